"""What is wrong with a run, said from its own numbers: its symptoms alone, and against the
lesson's run of the same step: the what-if table's verdicts. make check's hints
(accelerate_course/check.py) say the same measurements in the grader's own words, in the
class's language (accelerate_course/messages.toml).
"""

import re
from typing import NamedTuple

from accelerate_course.measuring import VALIDATION_PAIRS
from accelerate_course.messages import say

# a process that read a saved state before another had finished writing it: the file it
# stopped at is missing, or half written (torch's zip reader), by timing
UNFINISHED_READ = re.compile(
    r"No such file or directory: '<output-dir>/state/|PytorchStreamReader failed"
)


class Symptom(NamedTuple):
    name: str
    hint: str  # what it means, said from the measurement


def process_symptoms(run):
    """Return what is wrong with a run on its own (an empty list: nothing), each said from the
    run's own numbers: the what-if table's verdicts."""
    if run.error:
        unfinished = UNFINISHED_READ.search(run.error)
        if unfinished:  # which file was missing or half written is a matter of timing
            return [
                Symptom("read_unfinished", f"the run stopped: {say('meaning.read_unfinished')}")
            ]
        # gloo's error line goes on with advice for its own developers: its first sentence
        error = re.sub(r"(by peer \S+)\. This is typically caused.*", r"\1", run.error)
        return [Symptom("refused", f"the run stopped: {error}")]
    found = []
    if run.processes_alone:
        same = " (the same training, done by each)" if run.weights_equal else ""
        found.append(
            Symptom(
                "alone",
                f"each process reports 1 process ({run.processes_alone} of "
                f"{run.processes_started}): they did not join one group, each trained "
                f"alone on all the data{same}",
            )
        )
    if not run.weights_equal:
        found.append(
            Symptom(
                "weights_differ",
                "the processes ended with different weights: "
                "each trained its own copy of the model",
            )
        )
    scored = run.scored
    if scored and max(scored) > VALIDATION_PAIRS:
        found.append(
            Symptom(
                "tail_counted",
                f"your run scored {max(scored)} samples for "
                f"{VALIDATION_PAIRS} pairs: the duplicated tail was counted",
            )
        )
    elif scored and max(scored) < VALIDATION_PAIRS:
        tail = sum(scored) - VALIDATION_PAIRS
        found.append(
            Symptom(
                "own_share",
                "each process scored only its own share: "
                f"{' and '.join(map(str, scored))} pairs, which together are the "
                f"{VALIDATION_PAIRS}" + (f" and a duplicated tail of {tail}" if tail > 0 else ""),
            )
        )
    if run.writes > 1:
        found.append(Symptom("many_writers", f"{run.writes} processes wrote metrics.json"))
    if run.printed > 1:
        found.append(Symptom("many_printers", f"{run.printed} processes printed the result"))
    if run.bars > 1:
        found.append(Symptom("many_bars", f"{run.bars} progress bars, one per process"))
    if run.saves > 1:
        found.append(Symptom("many_savers", say("hint.savers", n=run.saves)))
    if model_lost(run):
        found.append(Symptom("model_lost", saved_model_said(run)))
    return found


def model_lost(run):
    """Return True if the run saved a model, once, that does not reload to its trained weights
    (where several processes saved into one folder, which one stayed is a matter of timing:
    the saves are said instead)."""
    return bool(run.reloaded) and run.reloaded != run.weights and run.saves <= 1


def saved_model_said(run):
    """Return what is wrong with the model a run saved, from what its folder gives back."""
    if run.reloaded.startswith("cannot load"):
        return say(
            "hint.model_not_loaded",
            why=run.reloaded.removeprefix("cannot load: "),
            files=", ".join(run.saved_files) or "-",
        )
    named = run.saved_first_name or ""
    return say(
        "hint.model_other_weights",
        named=say("hint.module_prefix", prefix=named.split(".")[0])
        if named.startswith("module.")
        else "",
    )


def symptoms(run, lesson):
    """Return the Symptoms of a run that the lesson's run of the same step does not have; when
    there are none, how its training or predictions differ from the lesson's, if they do."""
    if run.error:
        return process_symptoms(run)
    lesson_has = {s.name for s in process_symptoms(lesson)}
    found = [s for s in process_symptoms(run) if s.name not in lesson_has]
    if lesson.left_group and run.left_group is False:
        found.append(
            Symptom(
                "stays_in_group",
                "the same numbers, but the processes exited "
                "while still in the process group (the lesson's leave it)",
            )
        )
    if found:
        return found
    if (
        run.losses != lesson.losses
        and run.predictions == lesson.predictions
        and close(run.losses, lesson.losses)
    ):
        found.append(
            Symptom(
                "float_order",
                "identical predictions, and losses within a "
                f"relative {TOLERANCE:g} of the lesson's, not equal",
            )
        )
    elif run.losses != lesson.losses:
        first = next(
            (i for i, (a, b) in enumerate(zip(run.losses, lesson.losses)) if a != b),
            len(lesson.losses),
        )
        found.append(
            Symptom(
                "training_differs",
                f"training differs from optimizer step "
                f"{first + 1} on: mean loss of the last 10 steps "
                f"{mean(run.losses[-10:]):.4f} (lesson "
                f"{mean(lesson.losses[-10:]):.4f})" + learning_rate_note(run, lesson),
            )
        )
    elif run.predictions != lesson.predictions:
        changed = sum(a != b for a, b in zip(run.predictions, lesson.predictions))
        found.append(
            Symptom(
                "predictions_differ",
                f"the same training, but {changed} of {VALIDATION_PAIRS} predictions differ",
            )
        )
    return found


def learning_rate_note(run, lesson):
    """Return ', learning rate ... (lesson ...)' where the run's schedule differs, else ''."""
    mine, theirs = run.learning_rates, lesson.learning_rates
    if not mine or mine == theirs:
        return ""
    middle = len(mine) // 2
    return (
        f"; learning rate at steps {middle + 1} and {len(mine)}: {mine[middle]:.2e} and "
        f"{mine[-1]:.2e} (lesson {theirs[middle]:.2e} and {theirs[-1]:.2e})"
    )


# two runs that compute the same function in other tensor shapes add their floats in another
# order: their losses then agree to about 1e-6 relative; 1e-4 leaves room, and any real
# change of the training (a step, a learning rate, a gradient) moves them by far more
TOLERANCE = 1e-4


def close(a, b):
    """Return True if two loss lists have the same length and agree to TOLERANCE (relative)."""
    return len(a) == len(b) and all(abs(x - y) <= TOLERANCE * abs(y) for x, y in zip(a, b))


def mean(values):
    return sum(values) / len(values) if values else float("nan")


def verdict(run, lesson, is_lesson=False):
    """Return the what-if table's verdict for a run: for the lesson, what it leaves wrong on
    its own ('-' when nothing); for a variant, how it differs from the lesson."""
    if is_lesson:
        return "; ".join(s.hint for s in process_symptoms(run)) or "-"
    found = symptoms(run, lesson)
    if not found:
        return "same as the lesson: identical losses, predictions and metrics"
    return "; ".join(s.hint for s in found)


def measured_cells(run):
    """Return the table's 'measured' cells for a run (a list of short phrases)."""
    if run.error:
        return ["stopped after training" if run.learning_rates else "stopped before training"]
    cells = [
        f"{run.processes_reporting} process{'es' if run.processes_reporting != 1 else ''}"
        + (f" ({run.processes_alone} alone)" if run.processes_alone else "")
    ]
    scored = run.scored
    if scored:
        cells.append("scored by each process: " + ", ".join(map(str, scored)) + " pairs")
        cells.append("accuracy " + " / ".join(f"{a:.4f}" for a in run.accuracy))
    cells.append(f"{run.writes} metrics.json write{'s' if run.writes != 1 else ''}")
    if run.processes_reporting > 1:
        cells.append("weights " + ("equal" if run.weights_equal else "differ"))
    if model_lost(run):
        cells.append(
            "saved model: "
            + ("does not load" if run.reloaded.startswith("cannot") else "other weights")
        )
    return cells
