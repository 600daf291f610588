"""The invariants lab: what stays the same when a run is scaled, and what does not, measured.

Where the what-if lab takes a lesson line out, an invariant adds lines to the step (a patch in
stepN_*/invariants/) or changes a setting, and compares runs that a scaled run must match:

step 2  mixed precision: bf16 autocast on the CPU against float32, on 1 process each
        (metrics, time, the loss scaling accelerator.backward does then);
step 3  gradient accumulation: 1 process accumulating 2 batches against 2 processes (the same
        global batch of 16), and ACCELERATE_GRADIENT_ACCUMULATION_STEPS=2 alone;
        saving and resuming: save_state half way, a new launch that load_states, on 1 and on
        2 processes; the same with save_state on the main process alone; a state saved on 2
        processes resumed on 1, and one saved on 1 resumed on 2;
        the logged loss: accelerator.reduce(loss, "mean") against the main process's own;
        the learning rate against the global batch: 2 processes at lr and at 2 x lr, against
        1 process seeing the same pairs.

RUNS says which runs each needs and in which batch (one launch of the lab's driver): with the
what-if batch of the step (2 processes), in a batch of 1 process, or in a batch after those
(the resumed runs, which read a state saved there): lab.what_if runs them so. rows() turns
the measurements into the table's rows, as data; the commands render them
(accelerate_course/whatif.py for the terminal, accelerate_course/maintain/update_readme.py for
the pages). Comparisons with dropout off use the checkpoint copy that turns it off
(lab_runs.checkpoint_without_dropout): there two runs that compute the same sums in another
order can be compared step for step.
"""

from pathlib import Path
from typing import NamedTuple

from accelerate_course import lab_runs, patches
from accelerate_course.steps import FOLDERS, REPO, TRAIN_PY

# two runs of the same computation in another order of float sums (accumulated gradients
# against gradients averaged across processes) agree to about 1e-7 relative; 1e-5 leaves room
GRADIENT_TOLERANCE = 1e-5
LONGER = ["--max-train-steps", "60"]  # 1 process, 60 steps of 8: the pairs of 30 steps of 16


class Spec(NamedTuple):
    """One run an invariant compares."""

    name: str
    patch: str | None  # stepN_*/invariants/<patch>.patch, or None: the step itself
    processes: int  # 1, or the step's what-if launch's 2
    flags: tuple = ()  # instead of the lab's short run (lab_runs.SHORT_RUN)
    env: dict = {}
    dropout: bool = True  # False: the checkpoint copy without dropout
    resumes: str | None = None  # the run whose saved state it loads (in a launch after)


RUNS = {
    2: [Spec("bf16", "mixed_precision_bf16", 1), Spec("float32", None, 1)],
    3: [
        Spec("seedable, 2 processes", "seedable_batches", 2, dropout=False),
        Spec("accumulate 2, 1 process", "accumulate_2", 1, dropout=False),
        Spec(
            "the variable alone, 1 process",
            "seedable_batches",
            1,
            dropout=False,
            env={"ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "2"},
        ),
        Spec("seedable, 1 process", "seedable_batches", 1, dropout=False),
        Spec("saved, 2 processes", "save_state", 2),
        Spec("resumed, 2 processes", "resume_state", 2, resumes="saved, 2 processes"),
        Spec("saved, 1 process", "save_state", 1),
        Spec("resumed, 1 process", "resume_state", 1, resumes="saved, 1 process"),
        Spec("saved by the main process alone", "save_state_main_only", 2),
        Spec(
            "resumed from the main process's save",
            "resume_state",
            2,
            resumes="saved by the main process alone",
        ),
        Spec("resumed on 1 process from 2", "resume_state", 1, resumes="saved, 2 processes"),
        Spec("resumed on 2 processes from 1", "resume_state", 2, resumes="saved, 1 process"),
        Spec("reduced loss", "reduced_loss", 2),
        Spec("2 x lr", None, 2, flags=("--lr", "1e-4")),
        Spec("1 process, 60 steps", None, 1, flags=tuple(LONGER)),
    ],
}


def scripts(step, folder):
    """Write the invariants' patched copies of the step into folder; return {spec name:
    (script, env, flags)} for the lab (flags: the short run, the checkpoint without dropout
    where asked, a resumed run's state folder in its environment)."""
    folder = Path(folder)
    text = TRAIN_PY[step].read_text()
    found = {}
    for spec in RUNS.get(step, []):
        path = TRAIN_PY[step]
        if spec.patch:
            path = folder / "scripts" / spec.patch / "train.py"
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(
                    patches.apply_patch(
                        REPO / FOLDERS[step] / "invariants" / f"{spec.patch}.patch", text
                    )
                )
        flags = list(spec.flags or lab_runs.SHORT_RUN)
        if "--max-train-steps" not in flags:
            flags += lab_runs.SHORT_RUN
        if not spec.dropout:
            flags += ["--checkpoint", str(lab_runs.checkpoint_without_dropout(folder))]
        found[spec.name] = (path, dict(spec.env), flags)
    return found


def batches(step, folder, saved_in):
    """Return the invariants' runs by batch (one launch of the lab's driver each): {"two":
    {...}, "one": {...}, "after two": {...}, "after one": {...}} ({name: (script, env,
    flags)}); saved_in(spec) is the folder where the run of that Spec writes its outputs (a
    resumed run reads its state there)."""
    made = scripts(step, folder)
    specs = {spec.name: spec for spec in RUNS.get(step, [])}
    by_batch = {}
    for spec in specs.values():
        script, env, flags = made[spec.name]
        key = "two" if spec.processes > 1 else "one"
        if spec.resumes:
            saved = Path(saved_in(specs[spec.resumes])) / "state"
            # the reader is a patched step (resume_state.patch), whose command line is the
            # course's, with no flag for a state folder: the folder goes in this run's own
            # environment (the batch's run entry), which the driver sets for that run alone
            env = dict(env, COURSE_RESUME_FROM=str(saved))
            key = f"after {key}"
        by_batch.setdefault(key, {})[spec.name] = (script, env, flags)
    return by_batch


class InvariantRow(NamedTuple):
    """One row of a step's invariants table, as data (the commands render it)."""

    invariant: str  # what is compared
    compared: str  # which runs, in which setting
    measured: list  # what was measured, as short phrases
    verdict: str
    holds: bool  # what must stay the same did (the learning-rate row: every run finished)


def relative(a, b):
    return abs(a - b) / abs(b) if b else float("inf")


def mean_difference(a, b):
    return sum(abs(x - y) for x, y in zip(a, b)) / min(len(a), len(b))


def last(losses, n=10):
    return sum(losses[-n:]) / len(losses[-n:])


def rows(step, runs, lesson=None):
    """Return the invariants table's InvariantRows from the measured runs ({name: measuring.Run};
    lesson: the step's own run in its what-if launch)."""
    if step == 2:
        bf16, fp32 = runs["bf16"], runs["float32"]
        same = bf16.predictions == fp32.predictions
        return [
            InvariantRow(
                invariant="mixed precision: bf16 autocast",
                compared="bf16 against float32 (the lesson), 1 process each",
                measured=[
                    f"accuracy {bf16.accuracy[0]:.4f} against {fp32.accuracy[0]:.4f}",
                    f"{sum(a != b for a, b in zip(bf16.predictions, fp32.predictions))} "
                    f"of {len(fp32.predictions)} predictions differ",
                    f"losses differ by {mean_difference(bf16.losses, fp32.losses):.4f} on average",
                    f"training {bf16.seconds:.2f} s against {fp32.seconds:.2f} s",
                    f"mixed precision {bf16.mixed_precision}, loss scaler: "
                    f"{bf16.grad_scaler or 'none'}",
                ],
                verdict=(
                    "the same predictions" if same else "other numbers, as another seed would give"
                )
                + "; accelerator.backward(loss) scales nothing in bf16 (a "
                "GradScaler is made for fp16 only): it is loss.backward()",
                holds=bf16.error is None
                and bf16.mixed_precision == "bf16"
                and bf16.grad_scaler is None,
            )
        ]
    if step != 3:
        return []
    two, acc = runs["seedable, 2 processes"], runs["accumulate 2, 1 process"]
    alone, one = runs["the variable alone, 1 process"], runs["seedable, 1 process"]
    gradients_match = relative(acc.grad_norm, two.grad_norm) <= GRADIENT_TOLERANCE
    steps_match = len(acc.learning_rates) == len(two.learning_rates)
    found = [
        InvariantRow(
            invariant="gradient accumulation",
            compared="1 process, accumulate(2) against 2 processes: 16 pairs per optimizer step "
            "(dropout off, seedable batches)",
            measured=[
                f"first optimizer step's gradient norm {acc.grad_norm:.6f} against "
                f"{two.grad_norm:.6f} (relative difference "
                f"{relative(acc.grad_norm, two.grad_norm):.1e})",
                f"{len(acc.learning_rates)} and {len(two.learning_rates)} optimizer steps",
                f"accuracy {acc.accuracy[0]:.4f} and {two.accuracy[0]:.4f}",
                "final weights " + ("equal" if acc.weights == two.weights else "differ"),
            ],
            verdict=f"the same optimizer steps, within a relative {GRADIENT_TOLERANCE:g}"
            if gradients_match and steps_match
            else "NOT the same optimizer steps",
            holds=gradients_match and steps_match and acc.predictions == two.predictions,
        )
    ]
    halved = relative(alone.grad_norm, one.grad_norm / 2) <= GRADIENT_TOLERANCE
    found.append(
        InvariantRow(
            invariant="gradient accumulation: the variable alone",
            compared="ACCELERATE_GRADIENT_ACCUMULATION_STEPS=2 without accumulate(), 1 process, "
            "against the same run without it",
            # 4 decimals: the ratio is the point, and a norm's seventh digit depends on the
            # processor's kernels (1.402610 on an AMD EPYC Zen 5, 1.402609 on an Intel Xeon
            # model 167)
            measured=[
                f"first gradient norm {alone.grad_norm:.4f} against {one.grad_norm:.4f} "
                f"(a ratio of {alone.grad_norm / one.grad_norm:.4f})",
                f"{len(alone.learning_rates)} optimizer steps of 8 pairs each",
            ],
            verdict="not accumulation: accelerator.backward halves the loss, and the optimizer "
            "still steps at every batch",
            holds=halved and len(alone.learning_rates) == len(one.learning_rates),
        )
    )
    for word in ("2 processes", "1 process"):
        saved, resumed = runs[f"saved, {word}"], runs[f"resumed, {word}"]
        half = len(saved.losses) // 2
        equal = (
            resumed.losses == saved.losses[half:],
            resumed.weights == saved.weights,
            resumed.predictions == saved.predictions,
        )
        found.append(
            InvariantRow(
                invariant=f"saving and resuming, {word}",
                compared="a new launch that load_states the state saved after step 15, against "
                "the run that saved it and went on (dropout on)",
                measured=[
                    f"losses of steps {half + 1} to {len(saved.losses)} "
                    + ("equal, bit for bit" if equal[0] else "differ"),
                    "final weights " + ("equal" if equal[1] else "differ"),
                    "predictions " + ("equal" if equal[2] else "differ"),
                ],
                verdict="the uninterrupted run, bit for bit"
                if all(equal)
                else "NOT the uninterrupted run",
                holds=all(equal),
            )
        )
    found += saving_mistakes(runs)
    reduced, lesson_run = runs["reduced loss"], lesson
    same_training = (
        reduced.weights == lesson_run.weights and reduced.predictions == lesson_run.predictions
    )
    found.append(
        InvariantRow(
            invariant="the logged loss",
            compared='accelerator.reduce(loss, "mean") against the main process\'s own loss '
            "(the lesson), 2 processes",
            measured=[
                "final weights and predictions " + ("equal" if same_training else "differ"),
                f"logged losses differ by {mean_difference(reduced.losses, lesson_run.losses):.4f}"
                " on average",
            ],
            verdict="the same training; the curve is the loss of all 16 pairs of each step, not "
            "of the main process's 8"
            if same_training
            else "the training changed",
            holds=same_training and reduced.losses != lesson_run.losses,
        )
    )
    doubled, longer = runs["2 x lr"], runs["1 process, 60 steps"]
    one_loss, two_loss, doubled_loss = (last(run.losses) for run in (longer, lesson_run, doubled))
    # what one seed and 30 steps can show: the step counts, not a ranking of the learning
    # rates (the three losses lie close, and a model this barely trained may answer the
    # majority class for every pair)
    spread = max(one_loss, two_loss, doubled_loss) - min(one_loss, two_loss, doubled_loss)
    accuracies = {run.accuracy[0] for run in (longer, lesson_run, doubled)}
    found.append(
        InvariantRow(
            invariant="the learning rate and the global batch",
            compared="the same 480 pairs: 1 process, 60 steps of 8 at lr; 2 processes, 30 steps of "
            "16 at lr (the lesson) and at 2 x lr",
            measured=[
                f"mean loss of the last 10 steps {one_loss:.4f}, {two_loss:.4f} and "
                f"{doubled_loss:.4f}",
                f"accuracy {longer.accuracy[0]:.4f}, {lesson_run.accuracy[0]:.4f} and "
                f"{doubled.accuracy[0]:.4f}",
            ],
            verdict="not an invariant: on the same pairs, 2 processes take half as many steps. "
            f"The three losses lie within {spread:.4f} of each other"
            + (f" and every accuracy is {accuracies.pop():.4f}" if len(accuracies) == 1 else "")
            + ", on one seed: the row shows the halved step count, not which learning "
            "rate trains better. The course keeps lr and 8 pairs per process, so step 3 "
            "trains unlike step 2 (its full run within 0.05 of step 2's accuracy)",
            holds=all(run.error is None for run in (doubled, longer, lesson_run)),
        )
    )
    return found


def saving_mistakes(runs):
    """Return the rows of the saving mistakes: save_state on the main process alone, and a
    state resumed on another number of processes than saved it."""
    uninterrupted, saved = runs["saved, 2 processes"], runs["saved by the main process alone"]
    resumed = runs["resumed from the main process's save"]
    half = len(uninterrupted.losses) // 2
    rest = uninterrupted.losses[half:]
    differs = resumed.error is None and resumed.losses != rest
    changed = sum(a != b for a, b in zip(resumed.predictions or [], uninterrupted.predictions))
    found = [
        InvariantRow(
            invariant="saving and resuming: save_state on the main process alone",
            compared="a new launch that load_states the state saved after step 15 by `if "
            "accelerator.is_main_process: accelerator.save_state(...)`, against the "
            "uninterrupted run, 2 processes (dropout on)",
            measured=[
                f"the state folder holds {', '.join(saved.state_files or [])}",
                f"losses of steps {half + 1} to {len(uninterrupted.losses)} "
                + (
                    f"differ by {mean_difference(resumed.losses, rest):.4f} on average"
                    if differs
                    else "equal"
                ),
                f"{changed} of {len(uninterrupted.predictions)} predictions differ",
            ],
            verdict="NOT the uninterrupted run, and nothing says so: process 1's random state was "
            "never saved, and its load_state goes on without it (Accelerate notes it at "
            "the info level, which the launch does not show), so its dropout draws other "
            "masks"
            if differs
            else "the uninterrupted run",
            holds=differs and "random_states_1.pkl" not in (saved.state_files or []),
        )
    ]
    two_to_one, one_to_two = (
        runs["resumed on 1 process from 2"],
        runs["resumed on 2 processes from 1"],
    )
    one = runs["saved, 1 process"]
    found.append(
        InvariantRow(
            invariant="resuming on another number of processes",
            compared="the state saved after step 15 on 2 processes, resumed in a new launch of 1; "
            "the one saved on 1, resumed on 2 (dropout on)",
            measured=[
                f"2 to 1: {'finished' if two_to_one.error is None else two_to_one.error}, "
                f"losses {'equal to' if two_to_one.losses == one.losses[half:] else 'unlike'}"
                " the 1-process run's",
                f"1 to 2: {'finished' if one_to_two.error is None else one_to_two.error}, "
                f"losses {'equal to' if one_to_two.losses == rest else 'unlike'} the "
                "2-process run's",
                f"saved on 1, the state holds {', '.join(one.state_files or [])}",
            ],
            verdict="the state loads on either count (the model, the optimizer and the schedule "
            "are one file each, whole), and repeats neither run: 2 processes take 16 pairs a "
            "step where 1 takes 8, and a process with no random state of its own in the "
            "folder draws from where it stood",
            holds=two_to_one.error is None and one_to_two.error is None,
        )
    )
    return found
