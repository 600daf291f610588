"""Exercises: made from the steps, runnable as they are, and graded honestly.

The grader (accelerate_course/check.py) must not be a rubber stamp: for each step, the untouched exercise
fails, the course's own step passes, and every what-if variant that the lab measures as
different from the lesson fails with the hint that names its mistake. The variants the
lab measures as equivalent here (loss.backward() in fp32 without accumulation;
gather_for_metrics; loss.item() at every step, on a CPU) pass: that is what was measured, and
the grader says no more than it measured.
"""

import re
import subprocess
import sys

import pytest

import step3_mistakes
from accelerate_course import check, exercise, run_plans
from conftest import REPO, STEPS

# the hint (symptom) that must name each variant's mistake
EXPECTED_HINTS = {
    (2, "model_not_prepared"): "different weights",
    (2, "scheduler_prepared"): "learning rate at steps 16 and 30: 0.00e+00",
    (3, "no_gather"): "each process scored only its own share",
    (3, "no_cut"): "scored 416 samples for 408 pairs: the duplicated tail was counted",
    (3, "every_process_prints_and_writes"): "2 processes wrote metrics.json",
    (3, "labels_not_gathered"): "each process holds only its own share of the labels",
    (3, "no_end_training"): "while still in the process group",
    (3, "main_process_evaluates_alone"): "the prepared model, whose DistributedDataParallel "
                                         "wrapper first broadcasts its buffers",
    (3, "main_process_evaluates_alone_unwrapped"): "one process evaluated all 408 pairs and "
                                                   "the others none",
    (4, "accelerator_without_cpu"): "each process reports 1 process",
    (4, "accelerator_before_launch"): "the `Accelerator` should only be initialized inside",
    (4, "dynamic_padding"): "different lengths",
}
# computed the same here, on the CPU (loss.item() at every step costs only on a TPU: the XLA
# lane measures it; no run on a CPU can tell it from the lesson)
EQUIVALENT = {(2, "loss_backward"), (3, "gather_for_metrics"), (4, "loss_item_every_step")}
EXERCISE_HINTS = {
    2: "it never creates an Accelerator",
    3: "each process scored only its own share",
    4: "only 1 process trained: main() should start training_function with notebook_launcher",
}


@pytest.mark.parametrize("step", [2, 3, 4])
def test_the_exercise_is_the_previous_step_plus_todos(step):
    text = exercise.exercise(step)
    todo_blocks = re.findall(rf"(?m)^[ \t]*# TODO step {step}: .*(?:\n[ \t]*#   \S.*)*", text)
    without = text
    for block in todo_blocks:
        without = without.replace(block + "\n", "", 1)
    assert without.split('"""', 2)[2] == STEPS[step - 1].read_text().split('"""', 2)[2]
    assert len(todo_blocks) >= 4
    # every TODO's words are a comment of step N's lesson, or say what its hunk does
    comments = " ".join(exercise.comment_texts(STEPS[step].read_text().splitlines()))
    for block in todo_blocks:
        words = " ".join(line.strip().lstrip("#").strip() for line in block.splitlines())
        words = words.split(f"TODO step {step}: ", 1)[1]
        assert words in comments or words in exercise.WITHOUT_COMMENT.values(), block


def test_the_exercise_names_its_check():
    assert "make check STEP=3 FILE=exercises/step3/train.py" in exercise.exercise(3)


@pytest.mark.parametrize("step", [2, 3, 4])
def test_the_course_step_passes_its_check(lab_runs, step):
    checks = lab_runs(step).graded["lesson"]
    assert checks and all(c.passed for c in checks), [c for c in checks if not c.passed]


@pytest.mark.parametrize("step", [2, 3, 4])
def test_the_untouched_exercise_fails_its_check_with_a_measured_hint(lab_runs, step):
    checks = lab_runs(step).graded["exercise"]
    failed = [c for c in checks if not c.passed]
    assert failed, f"the grader passed step {step - 1}'s code as step {step}"
    assert any(EXERCISE_HINTS[step] in c.hint for c in failed), [c.hint for c in failed]


@pytest.mark.parametrize("step,name", sorted(EXPECTED_HINTS) + sorted(EQUIVALENT))
def test_every_variant_fails_with_the_hint_that_names_its_mistake(lab_runs, step, name):
    checks = lab_runs(step).graded[name]
    failed = [c for c in checks if not c.passed]
    if (step, name) in EQUIVALENT:
        assert not failed, f"{name} computes what the lesson computes, yet failed: {failed}"
        return
    assert failed, f"the grader passed the what-if variant {name}"
    assert any(EXPECTED_HINTS[step, name] in c.hint for c in failed), [c.hint for c in failed]


# failing cleanly: before anything launches, and at the time limit ---------------------------

def run_check(step, path, *flags, timeout=300):
    return subprocess.run([sys.executable, "-m", "accelerate_course.check", str(step), str(path),
                           *flags], cwd=REPO, capture_output=True, text=True, timeout=timeout)


@pytest.mark.runs
def test_a_syntax_error_fails_before_anything_launches(tmp_path):
    broken = tmp_path / "train.py"
    broken.write_text(STEPS[3].read_text().replace("def main():", "def main()", 1))
    result = run_check(3, broken, timeout=60)
    assert result.returncode == 1
    assert "FAIL  it is valid Python" in result.stdout and "expected ':'" in result.stdout
    assert "0 of 1 checks passed in 0 s" in result.stdout  # nothing was launched


@pytest.mark.parametrize("cheat", [
    'import runpy\nrunpy.run_path("step3_distributed_eval/train.py", run_name="__main__")\n',
    'exec(open("step3_distributed_eval/train.py").read())\n',
    'from importlib import import_module\nimport_module("step4_tpu_notebook.train").main()\n',
])
@pytest.mark.runs
def test_running_or_importing_the_course_step_is_refused(tmp_path, cheat):
    path = tmp_path / "train.py"
    path.write_text(cheat)
    result = run_check(3, path, timeout=60)
    assert result.returncode == 1 and "FAIL  it is its own code" in result.stdout


@pytest.mark.runs
def test_a_runaway_solution_fails_at_the_time_limit_and_leaves_no_process(tmp_path):
    import time

    import psutil
    runaway = tmp_path / "train.py"
    runaway.write_text(STEPS[3].read_text().replace(
        "    model.train()\n", "    model.train()\n    while True:  # a loop that never ends\n"
        "        pass\n", 1))
    start = time.perf_counter()
    limit = 12  # past the launch of both processes (about 6 s of imports each)
    result = run_check(3, runaway, "--time-limit", str(limit), timeout=120)
    seconds = time.perf_counter() - start
    folder = re.search(r"\(the runs: (\S+)\)", result.stdout).group(1)
    left = [p.info["pid"] for p in psutil.process_iter(["pid", "cmdline"])
            if any(folder in part for part in (p.info["cmdline"] or []))]
    print(f"\nrunaway: FAIL after {seconds:.0f} s (limit {limit} s); processes of the run left: {left}")
    assert result.returncode == 1
    assert f"FAIL  it finishes within the time limit ({limit} s)" in result.stdout
    assert "was stopped with every process it had started" in result.stdout
    assert seconds < limit + 20 and left == []


# cheats and crash-type mistakes of step 3 (tests/helpers/step3_mistakes.py), graded -----------

CHEAT_HINTS = {
    "hardcoded_cut": ("on 2 machines of 1 process", "how many predictions to keep depends on the split"),
    "local_main_writes": ("on 2 machines of 1 process", "each machine has a main process of its own"),
    "no_training_whole_split": ("it trained as the lesson does", "no optimizer step was taken"),
    "copied_predictions": ("each process evaluated its own share", "no process put the validation pairs"),
    "tolist_before_gather": ("it runs", "gather() was given something that is not a tensor"),
}


@pytest.mark.parametrize("name", sorted(CHEAT_HINTS))
def test_each_step3_cheat_and_crash_fails_with_its_hint(lab_runs, name):
    checks = lab_runs(3).graded[name]
    failed = {c.name.split(":")[0].split(" (")[0]: c.hint for c in checks if not c.passed}
    check_name, hint = CHEAT_HINTS[name]
    print(f"\n{name}: " + " | ".join(f"FAIL {k}: {v}" for k, v in failed.items()))
    assert any(k.startswith(check_name) and hint in v for k, v in failed.items()), failed
    # the hint explains without writing the answer
    assert not any(word in v for v in failed.values()
                   for word in ("is_main_process", "end_training", "gather_for_metrics"))


def test_the_reference_and_an_equivalent_solution_pass_in_the_unseen_setting(lab_runs):
    for name in ("lesson", "gather_for_metrics"):
        checks = lab_runs(3).graded[name]
        assert any(c.name.startswith("on 2 machines") for c in checks), name
        assert all(c.passed for c in checks), [c for c in checks if not c.passed]


@pytest.mark.runs
def test_a_gather_only_the_main_process_joins_fails_with_its_hint(tmp_path):
    # alone in its launch: the other process leaves while the main one waits in the gather
    path = step3_mistakes.write_all(tmp_path / "mistake", ["gather_on_main_only"])["gather_on_main_only"]
    run = run_plans.run_scripts(3, {"mine": path}, tmp_path / "runs", time_limit=120)["mine"]
    checks = check.refused(run)
    assert checks and "every process must take part in each" in checks[0].hint, run.error


@pytest.mark.parametrize("step", [2, 3, 4])
def test_make_exercise_prints_the_steps_own_run_command(step):
    # the README's command for the step (its docstring's Run: line), flags and all, on the
    # exercise's file and an output folder of its own
    from accelerate_course.exercise import run_command
    command = run_command(step, f"exercises/step{step}/train.py")
    text = STEPS[step].read_text()
    flags = {2: [], 3: ["ACCELERATE_USE_CPU=1", "--config_file configs/cpu-2-processes.yaml"],
             4: ["--num-processes 2"]}[step]
    assert f"exercises/step{step}/train.py --" in command and f"outputs/exercise{step}" in command
    assert all(flag in command and flag in text for flag in flags)


@pytest.mark.runs
def test_a_notebook_saved_after_its_py_is_not_graded_stale(tmp_path):
    import os
    import time
    path = tmp_path / "train.py"
    path.write_text(STEPS[3].read_text())
    notebook = tmp_path / "train.ipynb"
    notebook.write_text("{}")
    later = time.time() + 60
    os.utime(notebook, (later, later))
    result = run_check(3, path, timeout=60)
    assert result.returncode == 1 and "FAIL  it is the file you saved last" in result.stdout
    assert f"jupytext --sync {notebook}" in result.stdout
