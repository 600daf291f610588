"""Grade a student's file with the course's own measured checks, run for real.

    python -m accelerate_course.check 3 exercises/step3/train.py   (make check STEP=3 FILE=...)
    python -m accelerate_course.check 3 FILE --json results.json  (and Gradescope's results.json)
    python -m accelerate_course.check sst2-losses FILE             (a take-home task:
                                                                    make check TASK=...)
    python -m accelerate_course.check 3 FOLDER                     (the one .py file in FOLDER)

What is graded is a lesson (2, 3 or 4: its exercise) or a take-home task (takehome/<task>/:
a lesson applied to another loop; accelerate_course/takehome.py). The file runs where the
lesson runs, in each setting its grading names, measured from inside every process
(accelerate_course/lab_driver.py); each check compares what was measured with what the
lesson requires. Points come only for what the lesson adds: a check the untouched file
passes already is a prerequisite, shown and worth no point; a core check is one the lesson
exists for; while a prerequisite or a core check fails, no check scores (POINTS). The file
must be valid Python and its own code before anything is launched; each launch has a time
limit; every process the file starts is ended at the end, in any session; the runs' folder
is removed. The words are accelerate_course/messages.toml's, in the class's language
(COURSE_LANG=zh-CN). One line per check, the score, and exit code 1 when a check fails.
"""

import argparse
import ast
import contextlib
import dataclasses
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from accelerate_course import evidence, lab_runs, measuring, messages, running, sandbox, takehome
from accelerate_course.diagnosis import model_lost, saved_model_said
from accelerate_course.messages import joined, language, say, then
from accelerate_course.steps import FOLDERS, REPO
from accelerate_course.steps import TRAIN_PY as STEP_FILE

# seconds one launch of the grader may run (the student's runs, or a reference's): step 3's
# whole check, all three launches, takes about 40 s on 2 cores
TIME_LIMIT = 300

# what a check is: PREREQUISITE, what the untouched file passes already (shown, no point);
# CORE, what the lesson exists for; FURTHER, the rest of what the lesson adds. Each check
# scores its points when it passes (partial credit), except: while a prerequisite fails,
# none scores; with the teacher's core gate (--core-gate), while a core check fails, none
# scores; a check reported from inside the run (REPORTED_FROM_INSIDE) scores only once every
# check measured from outside it has passed
PREREQUISITE, CORE, FURTHER = "prerequisite", "core", "further"

# the checks whose result rests on what the run's own processes report (accelerate_course/
# lab_driver.py's spies, inside them: a file could make them up); every other check of
# lesson 3 and its tasks rests on what the grader measures from outside the run
# (accelerate_course/evidence.py). Lessons 2 and 4 are measured from inside alone
REPORTED_FROM_INSIDE = {"one_group", "trained", "one_printer", "left_group"}
MEASURED_FROM_OUTSIDE = {
    "whole_split",
    "own_predictions",
    "eval_loss",
    "one_writer",
    "two_machines",
    "resumes",
}


def from_outside(grading, key):
    """Return True if a check of this grading rests on what was measured from outside."""
    return grading.lesson == 3 and key in MEASURED_FROM_OUTSIDE


class Worth(NamedTuple):
    points: int
    kind: str  # PREREQUISITE, CORE or FURTHER


# what each check of a lesson is worth, by step (a take-home task has its own table, in its
# task.toml); a grade is out of the sum. Each key's words: messages.toml's check.<key>
POINTS = {
    2: {
        "like_step1": Worth(0, PREREQUISITE),
        "one_group": Worth(2, CORE),
        "one_model": Worth(1, CORE),
        "same_training": Worth(2, FURTHER),
    },
    3: {
        "one_group": Worth(0, PREREQUISITE),
        "trained": Worth(0, PREREQUISITE),
        "whole_split": Worth(3, CORE),
        "own_predictions": Worth(2, CORE),
        "one_writer": Worth(1, CORE),
        "two_machines": Worth(2, CORE),
        "one_printer": Worth(1, FURTHER),
        "left_group": Worth(1, FURTHER),
    },
    4: {
        "scored_once": Worth(0, PREREQUISITE),
        "launched": Worth(2, CORE),
        "like_step3": Worth(3, CORE),
        "model_outside": Worth(3, FURTHER),
        "fixed_shapes": Worth(2, FURTHER),
    },
}

# the flags of the graded runs where the predictions must mean something: long enough, at a
# learning rate high enough, for the model's predictions to differ from pair to pair. After
# the lab's short run (30 optimizer steps at 5e-5) the model predicts the same class for
# every pair, and a file that writes that class without the model would pass (measured
# here: 58 of 408 pairs predicted 0 on 1 process, 76 on 2, 95 with step 4's dropout off)
PREDICTING_RUN = ["--max-train-steps", "120", "--lr", "5e-4"]
# a setting the lesson's exercise does not show: 2 machines of 1 process each, evaluation
# batches of 5 (408 pairs in 82 batches, 41 per process: a duplicated tail of 2, not 8)
UNSEEN_FLAGS = [*PREDICTING_RUN, "--eval-batch-size", "5"]


class Check(NamedTuple):
    key: str  # its key in the points table; a check that stops grading has none there
    passed: bool
    hint: str  # why it failed, said from the run, in the class's language; "" when it passed
    name: str  # what it checks, in the class's language


def check(key, passed, hint="", **fields):
    """Return a Check named by messages.toml's check.<key>, its fields filled."""
    return Check(key, bool(passed), "" if passed else hint, say(f"check.{key}", **fields))


class Grading(NamedTuple):
    """What one lesson or take-home task is graded on."""

    lesson: int  # the lesson whose checks it uses (a key of POINTS)
    points: dict  # {check key: Worth}
    what: str  # how the lines name it, in the class's language ("lesson 3")
    task: object = None  # the take-home task (takehome.Task), or None for a lesson


def grading_of(name):
    """Return the Grading of a lesson ("2", "3", "4") or of a take-home task (its folder's
    name under takehome/); None when there is no such thing."""
    if str(name) in {str(lesson) for lesson in POINTS}:  # a lesson with checks of its own
        step = int(name)
        return Grading(step, POINTS[step], say("grade.lesson", step=step))
    task = takehome.tasks().get(str(name))
    if task is None:
        return None
    return Grading(task.lesson, task.points, say("grade.task", task=task.name), task)


def total(grading):
    """Return the points a grade is out of."""
    return sum(worth.points for worth in grading.points.values())


# ---- what a run measured, said in the lesson's words -------------------------------------


def items(grading, n):
    """Return "408 pairs" (a lesson on MRPC) or "400 sentences" (a task's unit)."""
    unit = grading.task.unit if grading.task else "pairs"
    return say(f"unit.{unit}", n=n)


def split_size(run):
    """Return how many examples the validation split has, as the run's own weights evaluated
    alone counted them (the driver's evaluation on a plain loader)."""
    return (
        len(run.alone_predictions)
        if run.alone_predictions
        else len(run.alone_labels)
        if run.alone_labels
        else measuring.VALIDATION_PAIRS
    )


def accuracy_and_f1(predictions, labels):
    """Return (accuracy, F1 of class 1) of predictions against labels, as GLUE computes them."""
    pairs = list(zip(predictions, labels))
    true_positive = sum(1 for p, y in pairs if p == 1 and y == 1)
    predicted, actual = sum(1 for p, _ in pairs if p == 1), sum(1 for _, y in pairs if y == 1)
    f1 = 2 * true_positive / (predicted + actual) if predicted + actual else 0.0
    return sum(1 for p, y in pairs if p == y) / len(pairs), f1


# the metric written and the metric of the written predictions: the same numbers, computed as
# float64 (scikit-learn, in evaluate) or float32 (a tensor's mean): they agree to about 1e-7
METRIC_TOLERANCE = 1e-6
# a mean loss over the split, summed in another order (gathered, or evaluated alone): equal to
# about 1e-7 relative; one duplicated example counted moves it by about 1e-3
LOSS_TOLERANCE = 1e-5


def metric_problem(grading, run):
    """Return why the metric a run wrote is not its own model's (a hint), or "" when the
    predictions written are the ones its final weights give alone, and the accuracy, F1 and
    loss written are those of these predictions on the split."""
    pairs = split_size(run)
    written = run.predictions
    if written is None:
        return say("hint.no_metrics_written")
    if len(written) != pairs:
        return say("hint.predictions_for", count=len(written), split=items(grading, pairs))
    differ = sum(a != b for a, b in zip(written, run.alone_predictions))
    if differ:
        return say("hint.not_its_predictions", differ=differ, split=items(grading, pairs))
    return written_metric_problem(run)


def written_metric_problem(run):
    """Return why the accuracy and F1 a run wrote are not those of the predictions it wrote,
    against the split's labels (a hint), or "" when they are."""
    accuracy, f1 = accuracy_and_f1(run.predictions, run.alone_labels)
    for name, value, expected in (
        ("accuracy", run.written_accuracy, accuracy),
        ("F1", run.written_f1, f1),
    ):
        if value is not None and abs(value - expected) > METRIC_TOLERANCE:
            return say(
                "hint.metric_not_from_predictions",
                metric=name,
                written=f"{value:.4f}",
                expected=f"{expected:.4f}",
            )
    if run.written_accuracy is None:
        return say("hint.no_accuracy_written")
    return ""


def loss_problem(grading, run):
    """Return why the validation loss a run wrote is not the mean over the whole split (a
    hint), or "" when it is."""
    if run.written_eval_loss is None:
        return say("hint.no_loss_written")
    expected = run.alone_loss
    if abs(run.written_eval_loss - expected) > LOSS_TOLERANCE * abs(expected):
        return say(
            "hint.loss_not_whole_split",
            written=f"{run.written_eval_loss:.6f}",
            expected=f"{expected:.6f}",
            split=items(grading, split_size(run)),
        )
    return ""


def scored_problem(grading, run):
    """Return why the main process did not score the whole split once (a hint), or ""."""
    pairs = split_size(run)
    scored = run.scored[0] if run.scored else len(run.predictions or [])
    if scored == pairs:
        return ""
    if scored > pairs:
        return say("hint.tail_counted", scored=scored, split=items(grading, pairs))
    share = run.eval_forwarded[0] if run.eval_forwarded else None
    if scored and share is not None and scored <= share:
        return say("hint.own_share_scored", scored=scored, split=items(grading, pairs))
    return say("hint.scored_count", scored=scored, split=items(grading, pairs))


def voice_problem(run, what):
    """Return why more or fewer than one process wrote or printed (a hint), or ""."""
    parts = []
    if what == "writes":
        if run.writes != 1:
            parts.append(say("hint.writers", n=run.writes))
        if run.saves > 1:
            parts.append(say("hint.savers", n=run.saves))
        if model_lost(run):
            parts.append(saved_model_said(run))
    if what == "prints":
        if run.printed != 1:
            parts.append(say("hint.printers", n=run.printed))
        if run.bars != 1:
            parts.append(say("hint.bars", n=run.bars))
    return joined(parts)


def differing_training(run, reference):
    """Return how a run's training differs from a reference's (a hint), or ""."""
    mine, theirs = run.learning_rates, reference.learning_rates
    if len(mine) != len(theirs):
        return say("hint.steps_count", steps=len(mine), reference=len(theirs))
    if mine != theirs:
        middle = len(mine) // 2
        return say(
            "hint.learning_rate",
            middle=middle + 1,
            last=len(mine),
            mine=f"{mine[middle]:.2e} / {mine[-1]:.2e}",
            theirs=f"{theirs[middle]:.2e} / {theirs[-1]:.2e}",
        )
    if run.losses != reference.losses:
        first = next(
            (i for i, (a, b) in enumerate(zip(run.losses or [], reference.losses)) if a != b),
            len(reference.losses),
        )
        return say("hint.losses_differ", step=first + 1)
    if run.predictions != reference.predictions:
        differ = sum(a != b for a, b in zip(run.predictions or [], reference.predictions))
        return say("hint.predictions_differ", differ=differ)
    return ""


def close(a, b, tolerance=1e-4):
    """Return True if two loss lists have the same length and agree to a relative tolerance
    (two runs that compute the same function in other tensor shapes agree to about 1e-6)."""
    return len(a) == len(b) and all(abs(x - y) <= tolerance * abs(y) for x, y in zip(a, b))


# what a crash says, and what it means in the lesson's words (without writing the answer)
CRASH_MEANINGS = [
    ("Mismatch in the number of predictions", "meaning.labels_not_gathered"),
    ("Unsupported types", "meaning.not_a_tensor"),
    ("<output-dir>/state/", "meaning.read_unfinished"),  # before gloo's lost connection
    ("PytorchStreamReader failed", "meaning.read_unfinished"),
    ("Permission denied", "meaning.course_denied"),  # a step or test file, by any route
    ("by peer", "meaning.collective_not_joined"),  # gloo's "Connection closed by peer"
]


def stopped(run):
    """Return the one failing Check of a run that stopped: its own last line (the course's
    one line, or the exception, with the line of the student's file it came from), and what
    it means when the lesson explains that crash."""
    error = re.sub(r"(by peer \S+)\. This is typically caused.*", r"\1", run.error)
    where = f" ({say('hint.at_line', line=run.error_line)})" if run.error_line else ""
    meaning = next((say(m) for text, m in CRASH_MEANINGS if text in run.error), None)
    return [
        check(
            "runs",
            False,
            say("hint.stopped", error=error)
            + where
            + (f"\n        {say('hint.meaning', meaning=meaning)}" if meaning else ""),
        )
    ]


# ---- the checks of each lesson ---------------------------------------------------------


def grade_lesson2(grading, one, two, step1, reference):
    """one/two: the candidate's runs on 1 process (PREDICTING_RUN) and on 2; step1: step 1
    on 1 process; reference: the lesson's step on 2 processes."""
    if one.error and two.error:
        return stopped(one)
    like = (
        not one.error
        and one.losses == step1.losses
        and one.predictions == step1.predictions
        and not metric_problem(grading, one)
    )
    like_hint = (
        stopped(one)[0].hint
        if one.error
        else differing_training(one, step1) or metric_problem(grading, one)
    )
    joined_ = not two.error and two.processes_alone == 0 and two.accelerator_processes == 2
    if joined_:
        group_hint = ""
    elif two.error and not two.accelerator_processes:  # stopped before any Accelerator
        group_hint = say("hint.no_accelerator", n=two.processes_started)
    elif two.error:
        group_hint = stopped(two)[0].hint
    else:
        group_hint = say("hint.alone", alone=two.processes_alone, started=two.processes_started)
    one_model = joined_ and two.weights_equal
    same = one_model and not differing_training(two, reference)
    return [
        check("like_step1", like, like_hint),
        check("one_group", joined_, group_hint, n=2),
        check(
            "one_model",
            one_model,
            say("hint.weights_differ") if joined_ else say("hint.not_one_group_above"),
        ),
        check(
            "same_training",
            same,
            differing_training(two, reference)
            if one_model
            else say("hint.not_one_model_above")
            if joined_
            else say("hint.not_one_group_above"),
        ),
    ]


def number(value):
    """Return a number written in metrics.json as a float, or None for anything else."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def seen_from_outside(run):
    """Return the run as the grader saw it from outside (accelerate_course/evidence.py): what
    its metrics.json holds, and what its saved model predicts when the grader evaluates it
    alone; what its processes reported is kept for the hints."""
    evidence = run.outside
    written = evidence.written or {}
    predictions = written.get("predictions")
    return dataclasses.replace(
        run,
        predictions=predictions if isinstance(predictions, list) else None,
        written_accuracy=number(written.get("accuracy")),
        written_f1=number(written.get("f1")),
        written_eval_loss=number(written.get("eval_loss")),
        alone_predictions=evidence.predictions,
        alone_labels=evidence.labels,
        alone_loss=evidence.loss,
    )


def unreadable(run):
    """Return why what a run left cannot be graded from outside (a hint), or "": no readable
    metrics.json; the model saved several times into one folder (which save stayed is a matter
    of timing: on 2 processes transformers writes the weights on rank 0 alone, so a
    tokenizer-only folder may be the one left); no model that loads."""
    evidence = run.outside
    if evidence.written is None:
        return unreadable_metrics(run)
    saves = run.saves if evidence.model_saves is None else evidence.model_saves
    if saves > 1:  # (counted from inside where the writes were not watched: the tests' runs)
        return say("hint.saves_raced", n=saves)
    if evidence.predictions is None:
        return model_problem(run)
    return ""


def model_problem(run):
    """Return why the run's saved model cannot be evaluated (a hint), or ""."""
    problem = run.outside.model_problem
    return (
        ""
        if not problem
        else say("hint.model_missing")
        if problem == "missing"
        else say("hint.model_link")
        if problem == "link"
        else say("hint.model_unloadable", why=problem)
    )


def unreadable_metrics(run):
    """Return why the run's metrics.json cannot be read (a hint), or ""."""
    problem = run.outside.written_problem
    return (
        ""
        if run.outside.written is not None
        else say("hint.metrics_missing")
        if problem == "missing"
        else say("hint.metrics_link")
        if problem == "link"
        else say("hint.metrics_not_json")
    )


def whole_split_problem(grading, run, seen):
    """Return why the metric written is not that of the whole split, each example once (a
    hint), or "": as many predictions written as the split has, and the accuracy and F1
    written are theirs. The hint says what the processes reported, where that explains it."""
    pairs = split_size(seen)
    written = seen.predictions
    if written is None:
        return say("hint.no_predictions_written")
    if len(written) != pairs:
        return scored_problem(grading, run) or say(
            "hint.predictions_for", count=len(written), split=items(grading, pairs)
        )
    return written_metric_problem(seen)


def writes_problem(run):
    """Return why metrics.json or the model was not written exactly once (a hint), or "":
    counted from outside while the run ran, else (where that cannot be counted) as its
    processes reported."""
    metrics, saves = run.outside.metrics_writes, run.outside.model_saves
    if metrics is None:
        return voice_problem(run, "writes")
    return joined(
        [
            say("hint.metrics_writes", n=metrics) if metrics != 1 else "",
            say("hint.model_saves", n=saves) if saves != 1 else "",
        ]
    )


def grade_lesson3(grading, run, reference, unseen, resumed=None):
    """run: the candidate on 2 processes, beside the reference (the loop before the lesson:
    step 2, or a task's starting script) in the same setting; unseen: the candidate on 2
    machines of 1 process with other evaluation batches (None when it was not run); resumed:
    for a task with a resume, the candidate going on from the state `run` saved. What the
    points rest on was measured from outside the runs (run.outside)."""
    if run.error:
        return stopped(run)
    seen = seen_from_outside(run)
    cannot = unreadable(run)
    pairs = split_size(seen)
    joined_ = (
        run.processes_alone == 0
        and run.accelerator_processes == 2
        and run.distributed_type == "DistributedType.MULTI_CPU"
    )
    steps, reference_steps = len(run.learning_rates), len(reference.learning_rates)
    trained = steps == reference_steps and run.weights == reference.weights
    trained_hint = (
        say("hint.no_training")
        if not steps
        else say("hint.steps_count", steps=steps, reference=reference_steps)
        if steps != reference_steps
        else say("hint.weights_not_reference")
    )
    # the model saved must be the trained one: the reference is the course's own code, run by
    # the grader after the file's processes have ended, so what it reports is trusted (its
    # saved folder is not: on 2 processes, two saves may replace each other)
    whole = unreadable_metrics(run) or whole_split_problem(grading, run, seen)
    own = (
        cannot
        or metric_problem(grading, seen)
        or (say("hint.saved_not_trained") if run.outside.weights != reference.weights else "")
        or unseen_predictions_problem(grading, unseen)
    )
    checks = [
        check(
            "one_group",
            joined_,
            say("hint.alone", alone=run.processes_alone, started=run.processes_started)
            if run.processes_alone
            else say("hint.group_size", n=run.accelerator_processes, kind=run.distributed_type),
            n=2,
        ),
        check("trained", trained, trained_hint, steps=reference_steps),
        check("whole_split", not whole, whole, split=items(grading, pairs)),
        check("own_predictions", not own, own),
    ]
    if "eval_loss" in grading.points:
        checks.append(
            check(
                "eval_loss",
                not cannot and not loss_problem(grading, seen),
                cannot or loss_problem(grading, seen),
            )
        )
    checks += [
        check("one_writer", not writes_problem(run), writes_problem(run)),
        check("one_printer", run.printed == 1 and run.bars == 1, voice_problem(run, "prints")),
        check("left_group", bool(run.left_group), say("hint.stays_in_group")),
    ]
    if unseen is not None:
        checks.append(two_machines_check(grading, unseen))
    if "resumes" in grading.points:
        problem = resume_problem(run, resumed)
        checks.append(check("resumes", not problem, problem))
    return checks


def resume_problem(run, resumed):
    """Return why the run resumed from the state `run` saved did not repeat it (a hint), or
    "": it trained only the steps left (as its processes report), and the weights it saved
    are those `run` saved, tensor for tensor (read by the grader from both weights files,
    whether or not they load into the model)."""
    state = Path(run.folder) / "output" / "state"
    held = (
        ", ".join(sorted(p.name for p in state.iterdir()))
        if state.is_dir() and not state.is_symlink()
        else ""
    )
    if resumed is None or not held:
        return say("hint.no_state")
    if resumed.error:
        return say("hint.resume_stopped", error=stopped(resumed)[0].hint)
    steps = len(resumed.learning_rates)
    if not 0 < steps < len(run.learning_rates):
        return say("hint.resume_restarted", steps=steps, total=len(run.learning_rates))
    if run.outside.saved_tensors is None or resumed.outside.saved_tensors is None:
        return say("hint.resume_no_weights")
    if run.outside.saved_tensors != resumed.outside.saved_tensors:
        return say("hint.resume_differs", held=held)
    return ""


def unseen_predictions_problem(grading, unseen):
    """Return why the predictions written in the unseen setting are not its model's own (a
    hint), or "": there the run trains long enough for its predictions to mean something
    (PREDICTING_RUN), where the lesson's own short run predicts one class for every pair and
    a file that writes that class without its model would match. Nothing to say where that
    run stopped or left nothing to read: the two_machines check says it."""
    if unseen is None or unseen.error or unreadable(unseen):
        return ""
    return metric_problem(grading, seen_from_outside(unseen))


def two_machines_check(grading, run):
    """The candidate on 2 machines (1 process each, on 127.0.0.1) with the unseen flags,
    measured from outside: the whole split once, its own predictions and metric (and loss),
    one metrics.json and one model."""
    batch = grading.task.unseen_batch if grading.task else UNSEEN_FLAGS[-1]
    if run.error:
        return check("two_machines", False, stopped(run)[0].hint, batch=batch)
    seen = seen_from_outside(run)
    # the count of predictions said once: by the scoring, else by the metric
    problems = [
        unreadable_metrics(run)
        or whole_split_problem(grading, run, seen)
        or unreadable(run)
        or metric_problem(grading, seen),
        writes_problem(run),
    ]
    if "eval_loss" in grading.points and not unreadable(run):
        problems.append(loss_problem(grading, seen))
    return check("two_machines", not any(problems), joined(problems), batch=batch)


def grade_lesson4(grading, run, step3):
    """run: the candidate through its notebook_launcher on 2 processes, dropout off; step3:
    the course's step 3 on 2 processes, dropout off (both PREDICTING_RUN)."""
    if run.error:
        return stopped(run)
    scored = joined(
        [scored_problem(grading, run) or metric_problem(grading, run), voice_problem(run, "writes")]
    )
    launched = (
        run.processes_alone == 0 and run.processes_reporting == 2 and run.accelerator_processes == 2
    )
    launched_hint = (
        say("hint.launched_one", n=run.processes_reporting)
        if run.processes_reporting < 2
        else say("hint.alone", alone=run.processes_alone, started=run.processes_started)
    )
    outside = run.models_created_before >= 1 and run.models_created_inside == 0
    fixed = run.lengths == [128]
    like = (
        launched and run.predictions == step3.predictions and close(run.losses or [], step3.losses)
    )
    like_hint = (
        say("hint.not_launched_above")
        if not launched
        else differing_training(run, step3) or say("hint.losses_not_close")
    )
    return [
        check("scored_once", not scored, scored, split=items(grading, split_size(run))),
        check("launched", launched, launched_hint, n=2),
        check("like_step3", like, like_hint),
        check("model_outside", outside, say("hint.model_inside", n=run.models_created_inside)),
        check(
            "fixed_shapes",
            fixed,
            say("hint.lengths", n=len(run.lengths), lengths=", ".join(map(str, run.lengths[:6]))),
        ),
    ]


# ---- the runs a grading reads ----------------------------------------------------------

ONE_PROCESS = "1 process"  # lesson 2: step 1 and the candidates on 1 process
TWO_PROCESSES = "2 processes"  # the candidates and the reference, each launch of 2 processes
TWO_MACHINES = "2 machines"  # lesson 3: the candidates in the setting no exercise shows
STEP3_REFERENCE = "step 3 without dropout"  # lesson 4: what it must equal
RESUMED = "resumed"  # a task with a resume: the candidates going on from the state they saved
REFERENCE = "reference"  # the name of the reference run in a set


def reference_script(grading):
    """Return the script a lesson's candidates are compared with on 2 processes: the loop
    before the lesson, when that suffices (lesson 3: step 2 trains and evaluates its shares
    as step 3 does; a task: its own starting script), else the lesson's own step (lesson 2)."""
    if grading.task:
        return grading.task.start
    return STEP_FILE[2]


def runs_for(grading, candidates, folder, made=None, time_limit=TIME_LIMIT, user=None):
    """Return the sets of runs that grading `candidates` ({name: path}) reads, {set name:
    {name: Run}}: each set not in `made` (sets run already, with the same flags and
    candidates) is run now, in one launch. Lessons 3 and 4 run the candidates first, and
    nothing more once every one of them has stopped (each is graded by its own line).
    Lesson 3's candidates run in launches of their own, as `user` where one is given
    (sandbox.GradedUser, or sandbox.AsGrader); once such a launch has ended, every process it
    left is ended, and what each candidate left is measured from outside (Run.outside:
    evidence.measured)."""
    folder, made = Path(folder), made or {}
    reference = reference_script(grading)
    flags = grading.task.flags if grading.task else lab_runs.SHORT_RUN
    unseen_flags = grading.task.unseen_flags if grading.task else UNSEEN_FLAGS
    state_flags = grading.task.state_flags if grading.task else []
    needed = {
        # each set: the candidates in a launch of their own, as `user`, then the course's
        # references in one of theirs, in a folder the user cannot read
        2: {
            ONE_PROCESS: lambda: reference_after(
                graded_launch(
                    candidates,
                    folder / "one",
                    None,
                    user,
                    lambda popen: lab_runs.run_batches(
                        [one_process_batch(candidates, folder / "one")], time_limit, popen
                    )[0],
                ),
                lambda: lab_runs.run_batches(
                    [one_process_batch({"step1": STEP_FILE[1]}, folder / "reference" / "one")],
                    time_limit,
                )[0],
            ),
            TWO_PROCESSES: lambda: reference_after(
                graded_launch(
                    candidates,
                    folder / "two",
                    None,
                    user,
                    lambda popen: lab_runs.run_scripts(
                        2, candidates, folder / "two", time_limit=time_limit, popen=popen
                    ),
                ),
                lambda: lab_runs.run_scripts(
                    2, {REFERENCE: reference}, folder / "reference" / "two", time_limit=time_limit
                ),
            ),
        },
        # the candidates in a launch of their own, before the reference's: a collective only
        # some of their processes join ends their launch (the others leave), instead of
        # meeting the reference's collectives
        3: {
            TWO_PROCESSES: lambda: reference_after(
                graded_launch(
                    candidates,
                    folder / "yours",
                    flags,
                    user,
                    lambda popen: lab_runs.run_scripts(
                        3,
                        {
                            name: (path, {}, [*flags, *state_flags])
                            for name, path in candidates.items()
                        },
                        folder / "yours",
                        flags,
                        time_limit=time_limit,
                        popen=popen,
                    ),
                ),
                lambda: lab_runs.run_scripts(
                    3, {REFERENCE: reference}, folder / "reference", flags, time_limit=time_limit
                ),
            ),
            # a task with a resume: a new launch goes on from the state each candidate saved
            **(
                {
                    RESUMED: lambda: graded_launch(
                        candidates,
                        folder / "resumed",
                        flags,
                        user,
                        lambda popen: lab_runs.run_scripts(
                            3,
                            {
                                name: (
                                    path,
                                    {},
                                    [
                                        *flags,
                                        *grading.task.resume_flags,
                                        str(folder / "yours" / name / "output" / "state"),
                                    ],
                                )
                                for name, path in candidates.items()
                            },
                            folder / "resumed",
                            flags,
                            time_limit=time_limit,
                            popen=popen,
                        ),
                    )
                }
                if state_flags
                else {}
            ),
            TWO_MACHINES: lambda: graded_launch(
                candidates,
                folder / "unseen",
                unseen_flags,
                user,
                lambda popen: lab_runs.run_on_two_machines(
                    3, candidates, folder / "unseen", unseen_flags, time_limit, popen=popen
                ),
            ),
        },
        4: {
            TWO_PROCESSES: lambda: graded_launch(
                candidates,
                folder / "two",
                None,
                user,
                lambda popen: lab_runs.run_scripts(
                    4,
                    candidates,
                    folder / "two",
                    step4_flags(folder),
                    time_limit=time_limit,
                    popen=popen,
                ),
            ),
            STEP3_REFERENCE: lambda: lab_runs.run_scripts(
                3,
                {REFERENCE: STEP_FILE[3]},
                folder / "reference" / "step3",
                step4_flags(folder),
                time_limit=time_limit,
            ),
        },
    }[grading.lesson]
    runs = {}
    for name, run in needed.items():
        runs[name] = made[name] if name in made else run()
        if grading.lesson > 2 and every_run_stopped(runs[TWO_PROCESSES], candidates):
            break  # lessons 3 and 4 grade a stopped run by its own line: nothing to compare
    if grading.lesson == 3:  # sets made elsewhere: their candidates measured from outside too
        settings = {TWO_PROCESSES: flags, TWO_MACHINES: unseen_flags, RESUMED: flags}
        for name in set(made) & set(runs):
            runs[name] = {
                **runs[name],
                **measured_outside(
                    {c: run for c, run in runs[name].items() if c in candidates}, settings[name]
                ),
            }
    return runs


def measured_outside(runs, flags, writes=None):
    """Return runs ({name: Run}) with what each left measured from outside (Run.outside),
    where it is not yet; writes: {name: evidence.Writes} counted while they ran (a run made
    elsewhere, by the tests' shared launches, has its writes reported from inside)."""
    return {
        name: run
        if run.outside is not None
        else dataclasses.replace(
            run,
            outside=evidence.measured(
                Path(run.folder) / "output", flags, writes[name].counted if writes else (None, None)
            ),
        )
        for name, run in runs.items()
    }


def graded_launch(candidates, batch_folder, flags, user, launch):
    """Run the candidates' launch (launch(popen): a lab_runs launch with Popen's extra
    arguments), as `user` where given (its folders its own); then end every process the
    launch left (the user's) and return its runs. flags: the runs' settings, when they are
    measured from outside (lesson 3: each run's writes counted while it runs, then what it
    left measured); None: the runs as their processes reported them (lessons 2 and 4)."""
    batch_folder = Path(batch_folder)
    batch_folder.mkdir(parents=True, exist_ok=True)
    batch_folder.chmod(0o755)  # readable by the graded user: its batch.json, not writable
    popen = {}
    if user is not None:
        for name in candidates:
            user.scratch(batch_folder / name)
            user.scratch(batch_folder / name / "output")
        scratch = user.scratch(batch_folder / "scratch")
        popen = dict(user.popen(), environment=lambda env: user.environment(env, scratch))
    writes = (
        {name: evidence.Writes(batch_folder / name / "output") for name in candidates}
        if flags is not None
        else {}
    )
    with contextlib.ExitStack() as watching:
        for watch in writes.values():
            watching.enter_context(watch)
        try:
            runs = launch(popen)
        finally:
            if user is not None:
                user.end_processes()
    return runs if flags is None else measured_outside(runs, flags, writes)


def not_read_by_a_graded_run():
    """Return the course's folders a graded run has no need to read: the steps (a lesson's
    answer is the next step) and the tests (which build a take-home's solution). The graded
    user is denied them (sandbox.GradedUser.denied): a file that runs one, by whatever route,
    stops at its open. In a teacher's private copy, the take-home tasks' solutions too
    (accelerate_course/private_copy.py)."""
    return [REPO / folder for folder in FOLDERS.values()] + [
        REPO / "tests",
        REPO / "tests" / "helpers",
        *([REPO / "solutions"] if (REPO / "solutions").is_dir() else []),
    ]


def one_process_batch(scripts, folder):
    """Return a launch of lesson 2's ONE_PROCESS set, ready to run (lab_runs.LabBatch): the
    scripts (the candidates, or step 1) on 1 process, with PREDICTING_RUN's flags."""
    return lab_runs.lab_batch(
        2,
        scripts,
        Path(folder),
        PREDICTING_RUN,
        processes=1,
        launcher="accelerate",
        evaluate_alone=True,
    )


def every_run_stopped(runs, names):
    """Return True if each of the named runs stopped (lessons 3 and 4 then compare nothing)."""
    return all(runs[name].error for name in names)


def reference_after(yours, reference):
    """Return the candidates' runs and the reference's (reference() runs it), or the
    candidates' alone when every one of them stopped."""
    if every_run_stopped(yours, yours):
        return yours
    return {**yours, **reference()}


def step4_flags(folder):
    """Return the flags of lesson 4's graded runs: dropout off (step 4 is then step 3 exactly,
    lab_runs.lab_flags), for PREDICTING_RUN's steps at its learning rate."""
    flags = lab_runs.lab_flags(4, folder)
    at = flags.index("--max-train-steps")
    return [*flags[:at], *flags[at + 2 :], *PREDICTING_RUN]


def grade(grading, name, runs):
    """Return the Checks of candidate `name` from runs_for(...)."""
    if grading.lesson > 2 and runs[TWO_PROCESSES][name].error:
        return stopped(runs[TWO_PROCESSES][name])  # its own line, before any comparison
    if grading.lesson == 2:
        # no reference run where every candidate stopped (reference_after): none is read
        return grade_lesson2(
            grading,
            runs[ONE_PROCESS][name],
            runs[TWO_PROCESSES][name],
            runs[ONE_PROCESS].get("step1"),
            runs[TWO_PROCESSES].get(REFERENCE),
        )
    if grading.lesson == 3:
        return grade_lesson3(
            grading,
            runs[TWO_PROCESSES][name],
            runs[TWO_PROCESSES][REFERENCE],
            runs.get(TWO_MACHINES, {}).get(name),
            runs.get(RESUMED, {}).get(name),
        )
    return grade_lesson4(grading, runs[TWO_PROCESSES][name], runs[STEP3_REFERENCE][REFERENCE])


# ---- the score ---------------------------------------------------------------------------


def blocking(grading, checks, core_gate=False):
    """Return the failed checks that keep every check from scoring: a prerequisite, a check
    that stopped grading (not in the points table), and with the core gate a core check."""
    blocks = {PREREQUISITE, CORE} if core_gate else {PREREQUISITE}
    return [
        c
        for c in checks
        if not c.passed and (c.key not in grading.points or grading.points[c.key].kind in blocks)
    ]


def outside_failed(grading, checks):
    """Return the failed checks measured from outside the run (lesson 3 and its tasks)."""
    return [c for c in checks if not c.passed and from_outside(grading, c.key)]


def why_unscored(grading, checks, c, core_gate=False):
    """Return why a passed check scores no point although it is worth some (said in the
    class's language), or "" when it scores them."""
    worth = grading.points.get(c.key)
    if not c.passed or worth is None or not worth.points:
        return ""
    blocked = blocking(grading, checks, core_gate)
    if blocked and not stopped_grading(grading, checks):
        return say(f"grade.blocked_{grading.points[blocked[0].key].kind}", check=blocked[0].name)
    if grading.lesson == 3 and c.key in REPORTED_FROM_INSIDE and outside_failed(grading, checks):
        return say("grade.inside_waits", check=outside_failed(grading, checks)[0].name)
    return ""


def points(grading, checks, core_gate=False):
    """Return {check key: points it scored}: its points when it passed and nothing keeps it
    from scoring (why_unscored), else 0."""
    return {
        c.key: grading.points[c.key].points
        if c.passed and c.key in grading.points and not why_unscored(grading, checks, c, core_gate)
        else 0
        for c in checks
    }


def score(grading, checks, core_gate=False):
    """Return (points scored, points the grade is out of)."""
    return sum(points(grading, checks, core_gate).values()), total(grading)


def points_table():
    """Return, as a Markdown table, what each check of each lesson and take-home task is worth:
    its prerequisites (no point), its core checks and its further ones (docs/classroom.md)."""
    lines = [
        "| graded | prerequisites (no points) | core checks: points | further checks: points "
        "| out of |",
        "|---|---|---|---|---|",
    ]
    gradings = [grading_of(str(step)) for step in POINTS] + [
        grading_of(name) for name in takehome.tasks()
    ]
    for grading in gradings:

        def cells(kind):
            return ", ".join(
                f"{key}" + ("" if kind == PREREQUISITE else f": {worth.points}")
                for key, worth in grading.points.items()  # noqa: B023 (called in this iteration)
                if worth.kind == kind
            )

        what = grading.task.name if grading.task else f"lesson {grading.lesson}"
        lines.append(
            f"| {what} | {cells(PREREQUISITE)} | {cells(CORE)} | {cells(FURTHER)} "
            f"| {total(grading)} |"
        )
    return "\n".join(lines) + "\n"


def stopped_grading(grading, checks):
    """Return True if grading stopped at one check outside the points table (not Python,
    not its own code, a crash, the time limit): the grade is that one line."""
    return len(checks) == 1 and checks[0].key not in grading.points


def no_points_reason(grading, checks, core_gate=False):
    """Return why no check scored (the first blocking check's kind), or "" when none blocks."""
    blocked = blocking(grading, checks, core_gate)
    if not blocked or stopped_grading(grading, checks):
        return ""
    first = blocked[0]
    kind = grading.points[first.key].kind
    return say(f"grade.blocked_{kind}", check=first.name)


def results(grading, path, checks, seconds, core_gate=False):
    """Return Gradescope's results.json for the checks of one file (its autograder format:
    gradescope-autograders.readthedocs.io, specs): one test per check, its points and, when
    it failed or scored nothing, why as its output; a prerequisite as a test worth 0; a check
    that stopped grading as one test worth every point of the grade, none scored. The words
    are the class's language's."""
    scored, out_of = score(grading, checks, core_gate)
    by_key = points(grading, checks, core_gate)
    reason = no_points_reason(grading, checks, core_gate)
    stopped_ = stopped_grading(grading, checks)
    tests = []
    for c in checks:
        worth = grading.points.get(c.key)
        output = c.hint if not c.passed else why_unscored(grading, checks, c, core_gate)
        tests.append(
            {
                "name": c.name
                + (
                    f" ({say('grade.prerequisite')})"
                    if worth and worth.kind == PREREQUISITE
                    else ""
                ),
                "score": by_key[c.key],
                "max_score": out_of if stopped_ else worth.points if worth else 0,
                "status": "passed" if c.passed else "failed",
                "output": output,
                "visibility": "visible",
                "extra_data": {
                    "check": c.key,
                    "kind": worth.kind if worth else "stops grading",
                    "measured": "from outside the run"
                    if from_outside(grading, c.key)
                    else "reported from inside the run",
                },
            }
        )
    summary = say("grade.summary", path=path, what=grading.what, scored=scored, out_of=out_of)
    return {
        "score": scored,
        "execution_time": round(seconds),
        "output": then(summary, reason),
        "visibility": "visible",
        "stdout_visibility": "visible",
        "tests": tests,
    }


def refused(message, **fields):
    """Return results.json for a submission graded as nothing (no file to grade): score 0, one
    line."""
    return {
        "score": 0,
        "output": say(message, **fields),
        "visibility": "visible",
        "stdout_visibility": "visible",
        "tests": [],
    }


# ---- before anything is launched ---------------------------------------------------------


class NoFile(Exception):
    """There is no one file to grade: its message is the one line to print."""


def graded_file(given, grading):
    """Return the Python file to grade for what was given: the file; a notebook's paired .py
    (jupytext); the one .py file of a folder (Gradescope's submission, whatever its name:
    "train (1).py"). Raise NoFile with the one line to print otherwise."""
    given = Path(given)
    if given.is_dir():
        found = sorted(p for p in given.rglob("*.py") if "__MACOSX" not in p.parts)
        if len(found) == 1:
            return found[0]
        if not found:
            notebooks = sorted(given.rglob("*.ipynb"))
            if len(notebooks) == 1:
                return graded_file(notebooks[0], grading)
            raise NoFile(say("submission.none", folder=given))
        names = ", ".join(str(p.relative_to(given)) for p in found)
        raise NoFile(say("submission.several", count=len(found), names=names))
    if given.suffix == ".ipynb":
        paired = given.with_suffix(".py")
        if paired.is_file():
            return paired
        raise NoFile(say("submission.notebook", notebook=given))
    if not given.is_file():
        raise NoFile(say("submission.missing", file=given, make=make_exercise(grading)))
    return given


def make_exercise(grading):
    """Return the command that writes the untouched file of a grading."""
    if grading.task:
        return f"make takehome TASK={grading.task.name}"
    return f"make exercise STEP={grading.lesson}"


def before_launch(path):
    """Return the Checks made on the file before anything is launched: it is the file saved
    last (beside its jupytext notebook), Python, with a main() to run, and its own code (its
    code, docstrings and comments aside, neither runs nor imports the course's step files)."""
    notebook = path.with_suffix(".ipynb")
    if notebook.exists() and notebook.stat().st_mtime > path.stat().st_mtime + 1:
        return [
            check(
                "saved_last", False, say("hint.notebook_newer", notebook=notebook, file=path.name)
            )
        ]
    text = path.read_text(errors="replace")
    try:
        tree = ast.parse(text, str(path))
    except SyntaxError as error:
        return [
            check(
                "valid_python",
                False,
                say("hint.syntax", line=error.lineno, error=error.msg, file=path),
            )
        ]
    docstrings = {
        id(body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef))
        and (body := node.body)
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
    }
    uses_reference = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
        ):
            uses_reference |= {folder for folder in FOLDERS.values() if folder in node.value}
        name = (
            node.id
            if isinstance(node, ast.Name)
            else node.attr
            if isinstance(node, ast.Attribute)
            else None
        )
        if name in ("exec", "runpy", "importlib", "__import__", "run_path", "import_module"):
            uses_reference.add(name)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [alias.name for alias in node.names] + [getattr(node, "module", "") or ""]
            uses_reference |= {
                m for m in modules if m.split(".")[0] in ("runpy", "importlib", *FOLDERS.values())
            }
    if uses_reference:
        return [check("own_code", False, say("hint.uses", names=", ".join(sorted(uses_reference))))]
    if not any(isinstance(node, ast.FunctionDef) and node.name == "main" for node in tree.body):
        what = say("hint.no_main_empty") if not text.strip() else say("hint.no_main_none")
        return [check("has_main", False, say("hint.no_main", file=path, what=what))]
    return []


# ---- running it ------------------------------------------------------------------------


def graded_within(grading, path, folder, time_limit, user=None):
    """Return the Checks of the file: its runs graded, or one failing Check when a launch ran
    past the time limit, or failed in a way that is not a run's own error. user: the
    sandbox.GradedUser its runs run as (None: as the grader)."""
    try:
        return grade(
            grading,
            "yours",
            runs_for(grading, {"yours": path.resolve()}, folder, time_limit=time_limit, user=user),
        )
    except running.TimeLimitReached as stopped_:
        return [
            check(
                "time_limit",
                False,
                say("hint.time_limit", seconds=round(stopped_.seconds)),
                seconds=time_limit,
            )
        ]
    except lab_runs.LaunchFailed as failed:
        return [check("runs", False, say("hint.stopped", error=failed.last_line))]


def readable_copy(path, folder):
    """Return a copy of the graded file in folder/graded/ that the graded user can read (the
    file handed in may lie in a folder only its owner may enter), under its own name."""
    copy = Path(folder) / "graded" / path.name
    copy.parent.mkdir(mode=0o755)
    copy.parent.chmod(0o755)
    shutil.copyfile(path, copy)
    copy.chmod(0o644)
    return copy


def needed_to_read(copy):
    """Return what a graded run reads: the Python that runs it, the course, the installed
    packages, the file."""
    import torch

    return [
        Path(sys.executable).resolve(),
        Path(running.__file__).resolve().parent / "lab_driver.py",
        Path(torch.__file__).resolve(),
        copy,
    ]


def print_checks(grading, checks, out=sys.stdout, core_gate=False):
    """Print one line per check (its hint below when it failed, or why it scored nothing
    when it passed), the prerequisites first."""
    by_key = points(grading, checks, core_gate)
    for c in checks:
        worth = grading.points.get(c.key)
        marks = say("grade.pass"), say("grade.fail")  # as wide as each other (通过, 未通过)
        mark = messages.padded(marks[0] if c.passed else marks[1], max(map(messages.width, marks)))
        worth_said = (
            ""
            if stopped_grading(grading, checks) or worth is None
            else f"  [{say('grade.prerequisite')}]"
            if worth.kind == PREREQUISITE
            else f"  [{say('grade.points', scored=by_key[c.key], worth=worth.points)}]"
        )
        print(f"  {mark}  {c.name}{worth_said}", file=out)
        if not c.passed:
            print(f"        {say('grade.hint', hint=c.hint)}", file=out)
        elif why_unscored(grading, checks, c, core_gate) and not blocking(
            grading, checks, core_gate
        ):
            print(f"        {why_unscored(grading, checks, c, core_gate)}", file=out)


def main():
    parser = argparse.ArgumentParser(
        prog="python -m accelerate_course.check", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "what",
        help=f"the lesson ({', '.join(map(str, POINTS))}) or the "
        f"take-home task ({', '.join(takehome.tasks()) or 'none'})",
    )
    parser.add_argument(
        "file", type=Path, help="the file to grade, its notebook, or a folder holding one .py file"
    )
    parser.add_argument(
        "--time-limit",
        type=int,
        default=TIME_LIMIT,
        metavar="SECONDS",
        help=f"stop a launch that runs longer (default {TIME_LIMIT}; more on a slow machine)",
    )
    parser.add_argument(
        "--json",
        type=Path,
        metavar="RESULTS_JSON",
        help="also write the grade in Gradescope's results.json format",
    )
    parser.add_argument(
        "--core-gate",
        action="store_true",
        help="no check scores while a core check fails (default: each check "
        "scores its points when it passes)",
    )
    args = parser.parse_args()
    language()  # an unknown COURSE_LANG: one line, before anything
    grading = grading_of(args.what)
    if grading is None:
        sys.exit(
            "error: "
            + say(
                "submission.unknown",
                what=args.what,
                lessons=", ".join(map(str, POINTS)),
                tasks=", ".join(takehome.tasks()) or "-",
            )
        )
    try:
        path = graded_file(args.file, grading)
    except NoFile as nothing:
        if args.json:
            write_results(args.json, refused("submission.graded_nothing", reason=str(nothing)))
        sys.exit(f"error: {nothing}")
    start = time.perf_counter()
    print(say("grade.checking", file=path, what=grading.what), flush=True)
    if path != args.file:
        print(say("grade.graded_instead", given=args.file, file=path), flush=True)
    checks = before_launch(path)
    no_root = sandbox.without_root()
    folder = Path(
        tempfile.mkdtemp(
            prefix=f"check-{args.what}-", dir=None if no_root else sandbox.enterable_temp()
        )
    )
    # what the launches write in a temporary folder (torch's launcher's logs) goes in this one
    # too, removed with it at the end
    (folder / "tmp").mkdir()
    os.environ["TMPDIR"] = str(folder / "tmp")
    tempfile.tempdir = str(folder / "tmp")  # this process's own (torch's caches), removed too
    if no_root:
        print(say("grade.as_grader", why=no_root), flush=True)
    else:
        folder.chmod(0o711)  # the graded user enters its own folders, and lists none
        (folder / "reference").mkdir(mode=0o700)  # the reference's runs: not the user's to read
        (folder / "tmp").chmod(0o700)
    user = sandbox.AsGrader() if no_root else sandbox.GradedUser()
    try:
        with running.stop_together(), user, user.denied(not_read_by_a_graded_run()):
            path_run = path
            if not no_root and not checks:
                path_run = readable_copy(path, folder)
                unread = user.can_read(needed_to_read(path_run))
                if unread:
                    raise NoFile(say("grade.cannot_read", path=unread))
            if not checks:
                checks = graded_within(grading, path_run, folder, args.time_limit, user)
    except running.Stopped as stop:
        shutil.rmtree(folder, ignore_errors=True)
        running.end_command(stop, say("grade.stopped", file=path))
    except NoFile as unreadable_:
        shutil.rmtree(folder, ignore_errors=True)
        if args.json:
            write_results(args.json, refused("submission.graded_nothing", reason=str(unreadable_)))
        sys.exit(f"error: {unreadable_}")
    left = user.ended
    shutil.rmtree(folder, ignore_errors=True)
    print_checks(grading, checks, core_gate=args.core_gate)
    failed = sum(not c.passed for c in checks)
    seconds = time.perf_counter() - start
    scored, out_of = score(grading, checks, args.core_gate)
    reason = no_points_reason(grading, checks, args.core_gate)
    print(
        then(
            say(
                "grade.total",
                passed=len(checks) - failed,
                checks=len(checks),
                seconds=f"{seconds:.0f}",
                scored=scored,
                out_of=out_of,
            ),
            reason,
        )
    )
    if left:
        print(say("grade.ended_left", n=left))
    if args.json:
        write_results(args.json, results(grading, path, checks, seconds, args.core_gate))
        print(say("grade.results_written", path=args.json))
    sys.exit(1 if failed else 0)


def write_results(path, results_json):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results_json, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
