"""Exercises: made from the steps, runnable as they are, and graded honestly.

The grader (accelerate_course/check.py) must not be a rubber stamp: for each lesson, the
untouched exercise scores 0 (what it passes already is a prerequisite, shown and worth no
point), the course's own step scores every point, and every what-if variant that the lab
measures as different from the lesson fails with the hint that names its mistake and scores
what its checks allow: nothing when it fails a check the lesson exists for. The variants the
lab measures as equivalent here (loss.backward() in fp32 without accumulation;
gather_for_metrics; loss.item() at every step, on a CPU) score every point: that is what was
measured, and the grader says no more than it measured. Step 3's cheats score no more than
the untouched exercise.
"""

import os
import re
import shutil
import subprocess
import sys
import time

import psutil
import pytest
import step3_mistakes
from conftest import REPO, STEPS, offline_env, run_command

from accelerate_course import check, exercise
from accelerate_course.lab_runs import run_scripts

# the hint that must name each variant's mistake, and the score it gets (out of 5 for lesson
# 2, 10 for lessons 3 and 4) with partial credit: what its passing checks are worth
EXPECTED = {
    (2, "model_not_prepared"): ("the processes ended with different weights", 2),
    (2, "scheduler_prepared"): ("the learning rate differs: at steps 16 and 30 it is 0.00e+00", 3),
    (3, "no_gather"): ("the main process scored only its own share: 208 of the 408 pairs", 1),
    (3, "no_cut"): (
        "the main process scored 416 predictions for 408 pairs: the duplicated tail was counted",
        1,
    ),
    (3, "every_process_prints_and_writes"): ("2 processes wrote metrics.json", 3),
    (3, "labels_not_gathered"): ("Each process holds only its own share of the labels too", 0),
    (3, "no_end_training"): ("a process exited while still in the process group", 9),
    (3, "main_process_evaluates_alone"): ("a forward pass of the prepared model", 0),
    (3, "prepared_model_saved"): (
        "'DistributedDataParallel' object has no attribute 'save_pretrained'",
        0,
    ),
    (3, "prepared_state_dict_saved"): (
        "the saved model reloads to other weights than the trained ones",
        3,
    ),
    (3, "every_process_saves"): ("2 processes saved the model into the one folder", 3),
    (3, "load_state_without_wait"): (
        "read the saved state before the main process had finished writing it",
        0,
    ),
    (4, "accelerator_without_cpu"): ("2 of 2 processes say they are 1 process of 1", 0),
    (4, "accelerator_before_launch"): ("the `Accelerator` should only be initialized inside", 0),
    (4, "dynamic_padding"): ("different lengths", 8),
}
# computed the same here, on the CPU (loss.item() at every step costs only on a TPU: the XLA
# lane measures it; no run on a CPU can tell it from the lesson)
EQUIVALENT = {
    (2, "loss_backward"),
    (3, "gather_for_metrics"),
    (4, "loss_item_every_step"),
    # what step 3's page calls the same as the lesson: scored as the lesson is
    (3, "main_process_evaluates_alone_unwrapped"),
}
EXERCISE_HINTS = {
    2: "launched as 2 processes, your file stopped before it created an Accelerator",
    3: "the main process scored only its own share: 208 of the 408 pairs",
    4: "only 1 process trained: the training function was not started in 2 processes",
}
# the lessons the grader grades: those with checks of their own (check.POINTS)
GRADED = sorted(check.POINTS)
# what a hint never writes: the lessons' answers
ANSWERS = ("is_main_process", "end_training", "gather_for_metrics", "total_dataset_length")


@pytest.mark.parametrize("step", GRADED)
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


@pytest.mark.parametrize("step", GRADED)
def test_the_course_step_scores_every_point(lab_runs, step):
    runs = lab_runs(step)
    checks = runs.graded["lesson"]
    assert checks and all(c.passed for c in checks), [c for c in checks if not c.passed]
    assert runs.score("lesson") == (check.total(runs.grading), {2: 5, 3: 10, 4: 10}[step])


@pytest.mark.parametrize("step", GRADED)
def test_the_untouched_exercise_scores_nothing_and_passes_only_prerequisites(lab_runs, step):
    runs = lab_runs(step)
    checks = runs.graded["exercise"]
    prerequisites = {
        key for key, worth in runs.grading.points.items() if worth.kind == check.PREREQUISITE
    }
    # what the untouched exercise passes is exactly what the table calls a prerequisite
    assert {c.key for c in checks if c.passed} == prerequisites
    assert runs.score("exercise") == (0, check.total(runs.grading))
    failed = [c for c in checks if not c.passed]
    assert any(EXERCISE_HINTS[step] in c.hint for c in failed), [c.hint for c in failed]


@pytest.mark.parametrize("step,name", sorted(EXPECTED) + sorted(EQUIVALENT))
def test_every_variant_fails_with_the_hint_that_names_its_mistake(lab_runs, step, name):
    runs = lab_runs(step)
    checks = runs.graded[name]
    failed = [c for c in checks if not c.passed]
    if (step, name) in EQUIVALENT:
        assert not failed, f"{name} computes what the lesson computes, yet failed: {failed}"
        assert runs.score(name)[0] == check.total(runs.grading)
        return
    hint, score = EXPECTED[step, name]
    assert failed, f"the grader passed the what-if variant {name}"
    assert any(hint in c.hint for c in failed), [c.hint for c in failed]
    assert runs.score(name)[0] == score, failed


@pytest.mark.parametrize("step", GRADED)
def test_every_hint_is_said_and_fits_the_lesson(lab_runs, step):
    # a failed check always says why (no empty hint), in the lesson's words: never the
    # lesson's answer, never another step's advice
    runs = lab_runs(step)
    for name, checks in runs.graded.items():
        for c in checks:
            if not c.passed:
                assert c.hint.strip(), (name, c)
                assert not any(word in c.hint for word in ANSWERS), (name, c.hint)
                assert "launch step 2, 3 or 4" not in c.hint, (name, c.hint)


# failing cleanly: before anything launches, and at the time limit ---------------------------


def run_check(what, path, *flags, timeout=300, **env):
    return run_command(
        [sys.executable, "-m", "accelerate_course.check", str(what), str(path), *flags],
        timeout,
        **env,
    )


@pytest.mark.runs
def test_a_syntax_error_fails_before_anything_launches(tmp_path):
    broken = tmp_path / "train.py"
    broken.write_text(STEPS[3].read_text().replace("def main():", "def main()", 1))
    result = run_check(3, broken, timeout=60)
    assert result.returncode == 1
    assert "FAIL  It is valid Python" in result.stdout and "expected ':'" in result.stdout
    assert "0 of 1 checks passed in 0 s: 0 of 10 points." in result.stdout  # nothing launched


@pytest.mark.parametrize(
    "cheat",
    [
        'import runpy\nrunpy.run_path("step3_distributed_eval/train.py", run_name="__main__")\n',
        'exec(open("step3_distributed_eval/train.py").read())\n',
        'from importlib import import_module\nimport_module("step4_tpu_notebook.train").main()\n',
    ],
)
@pytest.mark.runs
def test_running_or_importing_the_course_step_is_refused(tmp_path, cheat):
    path = tmp_path / "train.py"
    path.write_text(cheat)
    result = run_check(3, path, timeout=60)
    assert result.returncode == 1 and "FAIL  It is its own code" in result.stdout


@pytest.mark.runs
def test_a_runaway_solution_fails_at_the_time_limit_and_leaves_no_process(tmp_path):
    runaway = tmp_path / "train.py"
    runaway.write_text(
        STEPS[3]
        .read_text()
        .replace(
            "    model.train()\n",
            "    model.train()\n    while True:  # a loop that never ends\n        pass\n",
            1,
        )
    )
    start = time.perf_counter()
    limit = 12  # past the launch of both processes (about 6 s of imports each)
    result = run_check(3, runaway, "--time-limit", str(limit), timeout=120)
    seconds = time.perf_counter() - start
    left = [
        p.info["pid"]
        for p in psutil.process_iter(["pid", "cmdline"])
        if any(str(runaway) in part or str(tmp_path) in part for part in (p.info["cmdline"] or []))
    ]
    print(
        f"\nrunaway: FAIL after {seconds:.0f} s (limit {limit} s); "
        f"processes of the run left: {left}"
    )
    assert result.returncode == 1
    assert f"FAIL  It finishes within the time limit ({limit} s)" in result.stdout
    assert "it was stopped with every process it started" in result.stdout
    assert seconds < limit + 20 and left == []


@pytest.mark.runs
def test_processes_a_graded_file_starts_in_sessions_of_their_own_are_ended(tmp_path):
    # issue 44, case 13: each of the file's processes starts a process in a session of its
    # own and leaves it running; the grade ends them all, and removes its runs' folder
    # (case 15: nothing of the check is left in the temporary folder)
    token = f"left-by-a-graded-file-{os.getpid()}"
    path = tmp_path / "train.py"
    path.write_text(
        STEPS[3]
        .read_text()
        .replace(
            "    check_launch(joins_processes=True)",
            "    import subprocess, sys\n"
            "    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', "
            f"'{token}'],\n"
            "                     start_new_session=True, stdout=subprocess.DEVNULL,\n"
            "                     stderr=subprocess.DEVNULL)\n"
            "    raise SystemExit('error: this file stops here, on purpose')\n"
            "    check_launch(joins_processes=True)",
            1,
        )
    )
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    result = run_check(3, path, timeout=300, TMPDIR=str(temporary))
    time.sleep(1)
    left = [p for p in psutil.process_iter(["cmdline"]) if token in (p.info["cmdline"] or [])]
    print(
        f"\n{result.stdout[-1500:]}\nleft: {len(left)}; in the temporary folder: "
        f"{sorted(p.name for p in temporary.iterdir())}"
    )
    for process in left:  # the test leaves nothing either
        process.kill()
    assert result.returncode == 1
    assert "your file stopped with: error: this file stops here, on purpose" in result.stdout
    assert re.search(r"ended \d+ processes that your file had started", result.stdout)
    assert left == [] and list(temporary.iterdir()) == []


@pytest.mark.runs
def test_a_file_whose_run_stops_is_graded_by_its_line_alone(tmp_path):
    # lessons 3 and 4 grade a run that stopped by its own line, comparing nothing: so nothing
    # else is run, neither the reference nor the unseen setting (make check answers in the
    # time of one launch)
    path = tmp_path / "train.py"
    path.write_text(
        STEPS[3]
        .read_text()
        .replace(
            "    check_launch(joins_processes=True)",
            "    raise SystemExit('error: this file stops here, on purpose')\n"
            "    check_launch(joins_processes=True)",
            1,
        )
    )
    grading = check.grading_of("3")
    runs = check.runs_for(grading, {"yours": path}, tmp_path / "runs")
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["yours"]
    assert list(runs) == [check.TWO_PROCESSES] and list(runs[check.TWO_PROCESSES]) == ["yours"]
    [stopped] = check.grade(grading, "yours", runs)
    assert "your file stopped with: error: this file stops here, on purpose" in stopped.hint


@pytest.mark.runs
def test_a_crash_says_the_line_of_the_file(lab_runs):
    # the crash's own last line, and where in the student's file it came from: no traceback
    [stopped] = lab_runs(3).graded["tolist_before_gather"]
    assert stopped.key == "runs" and "your file stopped with: TypeError" in stopped.hint
    assert re.search(r"\(line \d+ of your file\)", stopped.hint), stopped.hint
    assert "Traceback" not in stopped.hint


# cheats and crash-type mistakes of step 3 (tests/helpers/step3_mistakes.py), graded -----------

# each cheat's failing check, its hint, and its score with partial credit (out of 10): what
# its passing checks are worth; none as much as the lesson, and the crashes and the file that
# does not train nothing. (copied_predictions reads another run's metrics.json in the lab's
# shared launch; a graded run's folder holds no other run, and the reference's is not its to
# read: there it writes 408 zeros and fails own_predictions too)
CHEATS = {
    "hardcoded_cut": (
        "two_machines",
        "the main process scored 402 predictions; the split has 408 pairs",
        4,
    ),
    "local_main_writes": ("two_machines", "metrics.json", 6),
    "no_training_whole_split": ("trained", "no optimizer step was taken", 0),
    "copied_predictions": ("two_machines", "Mismatch in the number of predictions", 6),
    "tolist_before_gather": ("runs", "gather() was given something that is not a tensor", 0),
    "fixed_predictions": (
        "own_predictions",
        "of the predictions written differ from what the model predicts for the split (408 pairs)",
        4,
    ),
}


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_each_step3_cheat_and_crash_scores_what_its_checks_allow(lab_runs, name):
    runs = lab_runs(3)
    checks = runs.graded[name]
    failed = {c.key: c.hint for c in checks if not c.passed}
    key, hint, score = CHEATS[name]
    print(
        f"\n{name}: {runs.score(name)} | " + " | ".join(f"FAIL {k}: {v}" for k, v in failed.items())
    )
    assert key in failed and hint in failed[key], failed
    assert runs.score(name)[0] == score < runs.score("lesson")[0]
    # the hint explains without writing the answer
    assert not any(word in v for v in failed.values() for word in ANSWERS)


def test_the_reference_and_an_equivalent_solution_pass_in_the_unseen_setting(lab_runs):
    for name in ("lesson", "gather_for_metrics"):
        checks = lab_runs(3).graded[name]
        assert any(c.key == "two_machines" for c in checks), name
        assert all(c.passed for c in checks), [c for c in checks if not c.passed]


@pytest.mark.runs
def test_a_gather_only_the_main_process_joins_fails_with_its_hint(tmp_path):
    # alone in its launch: the other process leaves while the main one waits in the gather
    path = step3_mistakes.write_all(tmp_path / "mistake", ["gather_on_main_only"])[
        "gather_on_main_only"
    ]
    run = run_scripts(3, {"mine": path}, tmp_path / "runs", time_limit=120)["mine"]
    checks = check.stopped(run)
    assert checks and "Every process must take part in each" in checks[0].hint, run.error


@pytest.mark.parametrize("step", GRADED)
def test_make_exercise_prints_the_steps_own_run_command(step):
    # the README's command for the step (its docstring's Run: line), flags and all, on the
    # exercise's file and an output folder of its own
    from accelerate_course.exercise import run_command

    command = run_command(step, f"exercises/step{step}/train.py")
    text = STEPS[step].read_text()
    flags = {
        2: [],
        3: ["ACCELERATE_USE_CPU=1", "--config_file configs/cpu-2-processes.yaml"],
        4: ["--num-processes 2"],
    }[step]
    assert f"exercises/step{step}/train.py --" in command and f"outputs/exercise{step}" in command
    assert all(flag in command and flag in text for flag in flags)


# what is handed in: a notebook, a folder, any name ---------------------------------------


@pytest.mark.runs
def test_a_notebook_saved_after_its_py_is_not_graded_stale(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(STEPS[3].read_text())
    notebook = tmp_path / "train.ipynb"
    notebook.write_text("{}")
    later = time.time() + 60
    os.utime(notebook, (later, later))
    result = run_check(3, path, timeout=60)
    assert result.returncode == 1 and "FAIL  It is the file you saved last" in result.stdout
    assert f"jupytext --sync {notebook}" in result.stdout


@pytest.mark.runs
def test_a_notebook_given_grades_its_paired_py_or_says_what_to_pass(tmp_path):
    # issue 44, case 12: the notebook itself is not run as Python; its jupytext pair is graded
    notebook = tmp_path / "train.ipynb"
    notebook.write_text('{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')
    alone = run_check(3, notebook, timeout=60)
    assert alone.returncode == 1 and alone.stdout == ""
    assert alone.stderr == (
        f"error: {notebook} is a notebook, and the grader reads a .py file. "
        f"Pair them once with jupytext --set-formats ipynb,py:percent "
        f"{notebook}, then give the .py file.\n"
    )
    paired = tmp_path / "train.py"
    paired.write_text("def main(:\n")  # graded, and refused before anything launches
    later = time.time() - 60
    os.utime(notebook, (later, later))
    result = run_check(3, notebook, timeout=60)
    assert f"graded: {paired} (for {notebook})" in result.stdout
    assert "FAIL  It is valid Python" in result.stdout and "NameError" not in result.stdout


@pytest.mark.runs
def test_a_folder_is_graded_by_its_one_py_file_of_any_name(tmp_path):
    # Gradescope's /autograder/submission: one .py file, whatever its name; several: one line
    folder = tmp_path / "submission"
    folder.mkdir()
    (folder / "train (1).py").write_text("def main(:\n")
    one = run_check(3, folder, "--json", tmp_path / "one.json", timeout=60)
    assert f"graded: {folder / 'train (1).py'} (for {folder})" in one.stdout
    assert "FAIL  It is valid Python" in one.stdout
    (folder / "notes.py").write_text("")
    several = run_check(3, folder, "--json", tmp_path / "several.json", timeout=60)
    assert several.returncode == 1 and several.stdout == ""
    line = (
        "2 .py files were handed in (notes.py, train (1).py). Keep only the one to grade, "
        "and hand it in again."
    )
    assert several.stderr == f"error: {line}\n"
    import json

    assert json.loads((tmp_path / "several.json").read_text()) == {
        "score": 0,
        "output": f"no grade: {line}",
        "visibility": "visible",
        "stdout_visibility": "visible",
        "tests": [],
    }


# writing the exercise: never over a student's work; a read-only clone -----------------------


def test_writing_an_exercise_again_keeps_the_students_changes(tmp_path, capsys):
    path = tmp_path / "exercises" / "step3" / "train.py"
    assert exercise.write_once(path, "untouched\n", False, "AGAIN")
    path.write_text("my work\n")
    assert not exercise.write_once(path, "untouched\n", False, "AGAIN")
    assert path.read_text() == "my work\n"
    assert (
        "it has your changes (to start again from the untouched file: AGAIN)"
        in capsys.readouterr().out
    )
    assert exercise.write_once(path, "untouched\n", True, "AGAIN")
    assert path.read_text() == "untouched\n"


def test_an_exercise_saved_in_a_windows_encoding_is_kept_and_said_so(tmp_path, capsys):
    # an editor's cp1252 (curly quotes): kept as the student's work, and the one thing wrong
    # with it named, with the mend (it once ended in a UnicodeDecodeError traceback)
    path = tmp_path / "exercises" / "step3" / "train.py"
    path.parent.mkdir(parents=True)
    mine = "# \u201cmy\u201d work\n".encode("cp1252")
    path.write_bytes(mine)
    assert not exercise.write_once(path, "untouched\n", False, "AGAIN")
    assert path.read_bytes() == mine
    said = capsys.readouterr().out.splitlines()
    assert said[0].endswith("it has your changes (to start again from the untouched file: AGAIN)")
    assert said[1].endswith(
        "train.py is not UTF-8 (byte 3 is not), and Python reads a script "
        "as UTF-8: save it again as UTF-8 in your editor"
    )


@pytest.mark.runs
@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)")
def test_make_exercise_in_a_read_only_clone_says_so_in_one_line(tmp_path):
    # a read-only copy of the course (a bind mount made read-only, in a user namespace of its
    # own): the exercise cannot be written, and one line names the fix
    course = tmp_path / "course"
    for name in (
        "accelerate_course",
        "common",
        "configs",
        *(p.parent.name for p in STEPS.values()),
    ):
        shutil.copytree(
            REPO / name,
            course / name,
            ignore=shutil.ignore_patterns("__pycache__", "whatif", "invariants"),
        )
    script = (
        f"mount --bind {course} {course} && mount -o remount,bind,ro {course} && "
        f"cd {course} && {sys.executable} -m accelerate_course.exercise 2"
    )
    result = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env=offline_env(PYTHONPATH=str(course), PYTHONDONTWRITEBYTECODE="1"),
    )
    if "mount" in result.stderr and "exercises" not in result.stderr:
        pytest.skip(f"no read-only mount here: {result.stderr.strip()}")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr == (
        "error: cannot write exercises/step2/train.py (Read-only file "
        "system): clone the course into a folder you can write to, or "
        "write it elsewhere: python -m accelerate_course.exercise 2 "
        "--print > train.py\n"
    )
