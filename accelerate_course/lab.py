"""The what-if lab: run a step beside its variants and measure what each lesson line does.

A variant (accelerate_course/patches.py) is the step with one lesson line taken out or done
the other common way; it runs for real beside the step (accelerate_course/lab_runs.py), is
measured (measuring.py) and compared with the lesson's run (diagnosis.py): the rows of
`make what-if`'s table, as data, which whatif.py renders for the terminal and
maintain/update_readme.py for the pages.
"""

from pathlib import Path
from typing import NamedTuple

from accelerate_course import invariants
from accelerate_course.diagnosis import measured_cells, verdict
from accelerate_course.lab_runs import lab_batch, lab_flags, run_batches, run_scripts
from accelerate_course.patches import variant_scripts, variants


class ExtraRun(NamedTuple):
    """A run beside the variants: the lesson or a variant (base) measured again under a
    setting where the lesson line matters more than in the course's own run."""

    base: str
    setting: str  # said in the table: "ACCELERATE_GRADIENT_ACCUMULATION_STEPS=2"
    env: dict

    @property
    def name(self):
        return f"{self.base}, with {self.setting}"


EXTRA_RUNS = {
    2: [
        ExtraRun(
            "lesson",
            "ACCELERATE_GRADIENT_ACCUMULATION_STEPS=2",
            {"ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "2"},
        ),
        ExtraRun(
            "loss_backward",
            "ACCELERATE_GRADIENT_ACCUMULATION_STEPS=2",
            {"ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "2"},
        ),
    ],
}


# variants that run in a launch of their own: a collective only some of their processes join,
# or a process that stops while the others go on, would leave the others of a shared launch
# waiting in the next run's collectives
OWN_LAUNCH = {
    3: {"main_process_evaluates_alone", "prepared_model_saved", "load_state_without_wait"}
}


class Row(NamedTuple):
    """One row of a step's what-if table, as data (the commands render it)."""

    variant: str  # the variant's name, "lesson", or an extra run's name
    change: list  # its changed lines, at most 3 ("- old", "+ new"); [] for the lesson
    more: int  # how many changed lines are not shown
    setting: str | None  # an extra run's setting
    measured: list  # what was measured (measured_cells)
    verdict: str  # against the lesson ("-": the lesson, with nothing wrong on its own)
    seconds: float  # training time


class WhatIf(NamedTuple):
    """What the what-if lab measured for a step."""

    rows: list  # the what-if table's Rows
    invariant_rows: list  # the invariants table's rows (accelerate_course/invariants.py)
    measured: dict  # {run name: Run}: the lesson as "lesson", every variant, extra, invariant
    beside: tuple = ()  # the measurements of the caller's launches run beside (what_if's beside)


def what_if(step, folder, names=None, extra=None, one=None, beside=()):
    """Run a step and its variants (all, or those named), its invariants' runs, and any
    extra scripts ({name: path, or (path, env, flags)}: in the step's launch, not in the
    tables); return a WhatIf. The variants, the invariants' runs of 2 processes and the
    extras share one launch; then, side by side, the invariants' runs of 1 process (one:
    {name: (path, env, flags)} that launch runs besides) and the variants of OWN_LAUNCH (a
    launch each), and
    `beside` (a caller's own launches, lab_runs.LabBatch: of 1 process, they would leave a
    core idle alone); then the resumed runs, which read a state saved in those."""
    folder = Path(folder)
    scripts = variant_scripts(step, names, folder)
    alone = {name: scripts.pop(name) for name in sorted(OWN_LAUNCH.get(step, set()) & set(scripts))}
    extras = [run for run in EXTRA_RUNS.get(step, []) if run.base in scripts]
    for run in extras:
        scripts[run.name] = (scripts[run.base], run.env)
    in_table = [*scripts, *alone]
    by_batch = invariants.batches(
        step,
        folder / "invariants",
        lambda spec: (
            folder / ("runs" if spec.processes > 1 else "invariants/one") / spec.name / "output"
        ),
    )
    scripts.update(by_batch.get("two", {}))
    scripts.update(extra or {})
    flags = lab_flags(step, folder)
    measured = run_scripts(step, scripts, folder / "runs", flags)
    rounds = [
        [
            lab_batch(
                step,
                {**by_batch.get("one", {}), **(one or {})},
                folder / "invariants/one",
                processes=1,
                launcher="accelerate",
            )
        ]
        if by_batch.get("one") or one
        else [],
        [
            lab_batch(step, {name: script}, folder / "alone" / name, flags)
            for name, script in alone.items()
        ],
    ]
    after = [
        lab_batch(
            step,
            by_batch[key],
            folder / "invariants" / key.replace(" ", "-"),
            processes=2 if key == "after two" else 1,
            launcher=None if key == "after two" else "accelerate",
        )
        for key in ("after two", "after one")
        if key in by_batch
    ]
    first = [batch for group in rounds for batch in group]
    found = run_batches([*first, *beside]) if first or beside else []
    for runs in found[: len(first)]:
        measured.update(runs)
    for runs in run_batches(after) if after else []:
        measured.update(runs)
    by_name = {v.name: v for v in variants(step)}
    extra_by_name = {run.name: run for run in extras}
    rows = []
    for name in in_table:
        run = measured[name]
        extra_run = extra_by_name.get(name)
        base = extra_run.base if extra_run else name
        is_lesson = base == "lesson"
        # an extra run is compared with the lesson under the same setting
        reference = (
            measured[ExtraRun("lesson", extra_run.setting, {}).name]
            if extra_run
            else measured["lesson"]
        )
        changes = [] if is_lesson else by_name[base].changes
        text = verdict(run, reference, is_lesson and not extra_run)
        if extra_run and not is_lesson and run.grad_norm and reference.grad_norm:
            text += (
                f"; gradient norm at the first step {run.grad_norm:.4f}, the lesson's "
                f"{reference.grad_norm:.4f}"
            )
        elif extra_run and is_lesson and run.grad_norm:
            text = f"gradient norm at the first step {run.grad_norm:.4f}"
        rows.append(
            Row(
                name,
                [f"{line[0]} {line[1:].strip()}" for line in changes[:3]],
                max(0, len(changes) - 3),
                extra_run.setting if extra_run else None,
                measured_cells(run),
                text,
                run.seconds,
            )
        )
    return WhatIf(
        rows,
        invariants.rows(step, measured, measured["lesson"]),
        measured,
        tuple(found[len(first) :]),
    )
