"""Exercises: made from the steps, runnable as they are, and graded honestly.

The grader (tools/check.py) must not be a rubber stamp: for each step, the untouched exercise
fails, the course's own step passes, and every what-if variant that the lab measures as
different from the lesson fails with the hint that names its mistake. The variants the
lab measures as equivalent here (loss.backward() in fp32 without accumulation;
gather_for_metrics; loss.item() at every step, on a CPU) pass: that is what was measured, and
the grader says no more than it measured.
"""

import re

import pytest

from conftest import STEPS, exercise

# the hint (symptom) that must name each variant's mistake
EXPECTED_HINTS = {
    (2, "model_not_prepared"): "different weights",
    (2, "scheduler_prepared"): "learning rate at steps 16 and 30: 0.00e+00",
    (3, "no_gather"): "each process scored only its own share",
    (3, "no_cut"): "scored 416 samples for 408 pairs: the duplicated tail was counted",
    (3, "every_process_prints_and_writes"): "2 processes wrote metrics.json",
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
    previous = STEPS[step - 1].read_text()
    assert without.split('"""', 2)[2] == previous.split('"""', 2)[2]
    assert len(todo_blocks) >= 4
    # every TODO's words come from a marker comment of step N
    markers = " ".join(re.findall(rf"# step {step}: (.*)", STEPS[step].read_text()))
    for block in todo_blocks:
        first = re.search(rf"# TODO step {step}: (\S+ \S+ \S+)", block)
        if first:  # its first words are the start of one of step N's marker comments
            assert first.group(1) in markers, block


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
