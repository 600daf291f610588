"""What breaks without it, and what stays the same when you scale: make what-if.

    python -m accelerate_course.whatif                 (every step: a few minutes on 2 CPU cores)
    python -m accelerate_course.whatif --step 3        (one step: make what-if STEP=3)

Each variant is a patch beside its step (stepN_*/whatif/<name>.patch) that takes one lesson
line out, or does it the other common way; it is applied to a copy, never to the step. The
step and its variants run for real, as short runs (30 optimizer steps), steps 2 and 3 on 2
CPU processes started by accelerate launch, step 4 on the 2 processes its notebook_launcher
starts. For each: the change, what was measured (processes, and
how many believed they were alone; pairs each scored; accuracy; metrics.json writes; whether
the processes ended with the same weights), the verdict against the lesson, the training time.
Then the invariants of steps 2 and 3 (accelerate_course/invariants.py): mixed precision,
gradient accumulation, saving and resuming, the logged loss, the learning rate against the
global batch, each measured against the runs it must match. Printed as plain text; the lesson
pages show the same rows as tables (make readme WHATIF=1 measures and writes them).
"""

import argparse
import sys
import tempfile
import textwrap
from pathlib import Path

from accelerate_course import lab, lab_runs, measuring, patches, running
from accelerate_course.machine import describe_machine
from accelerate_course.steps import STEPS

WIDTH = 100


def wrapped(label, text):
    return textwrap.fill(text, WIDTH, initial_indent=f"  {label:<10}", subsequent_indent=" " * 12)


def plain_text(step, result):
    """Return a step's what-if lab (a lab.WhatIf) for a terminal: one block per variant (its
    change, what was measured, the verdict against the lesson, the time), the variants' notes,
    then one block per invariant."""
    out = []
    for row in result.rows:
        out.append(f"{row.variant}  ({row.seconds:.1f} s of training)")
        change = row.change + ([f"and {row.more} more lines"] if row.more else [])
        if row.setting:
            change = [*(change or ["the lesson"]), f"with {row.setting}"]
        for i, line in enumerate(change):
            out.append(f"  {'change' if i == 0 else '':<10}{line}")
        out.append(wrapped("measured", ", ".join(row.measured)))
        if row.verdict != "-":
            out.append(wrapped("result", row.verdict))
        out.append("")
    for variant in patches.variants(step):
        if variant.note:
            out += [textwrap.fill(f"{variant.name}: {variant.note}", WIDTH), ""]
    if result.invariant_rows:
        out += [f"Step {step}'s invariants: what stays the same when you scale", ""]
    for row in result.invariant_rows:
        out.append(f"{row.invariant}  ({'holds' if row.holds else 'DOES NOT HOLD'})")
        out.append(wrapped("compared", row.compared))
        out.append(wrapped("measured", "; ".join(row.measured)))
        out.append(wrapped("result", row.verdict))
        out.append("")
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser(
        prog="python -m accelerate_course.whatif", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--step", type=int, nargs="+", choices=list(STEPS), default=list(STEPS))
    parser.add_argument(
        "--output-dir", help="keep every run's reports here (default: a temporary folder)"
    )
    args = parser.parse_args()
    folder = Path(args.output_dir or tempfile.mkdtemp(prefix="whatif-"))
    step = args.step[0]
    try:
        with running.stop_together():
            for step in args.step:
                print(
                    f"\nStep {step}: {lab_runs.how_launched(step)}, "
                    f"{measuring.train_steps(lab_runs.SHORT_RUN)} optimizer steps each "
                    f"(reports in {folder / f'step{step}'})\n",
                    flush=True,
                )
                try:
                    result = lab.what_if(step, folder / f"step{step}")
                except patches.PatchError as error:
                    sys.exit(f"error: {error}")
                print(plain_text(step, result), flush=True)
    except running.Stopped as stop:
        later = [str(s) for s in args.step if s > step]
        running.end_command(
            stop,
            f"the what-if lab was stopped during step {step}"
            + (
                f"; step{'s' if len(later) > 1 else ''} {', '.join(later)} not started"
                if later
                else ""
            ),
        )
    print(f"Measured on {describe_machine()}.")


if __name__ == "__main__":
    main()
