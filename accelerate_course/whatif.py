"""What breaks without it: run each step beside its variants and print what changes.

    python -m accelerate_course.whatif                 (every step; about a minute on 2 CPU cores)
    python -m accelerate_course.whatif --step 3        (one step: make what-if STEP=3)
    python -m accelerate_course.whatif --readme        (also rewrite the tables of the lessons' pages)

Each variant is a patch beside its step (stepN_*/whatif/<name>.patch) that takes one lesson
line out, or does it the other common way; it is applied to a copy, never to the step. The
step and its variants run for real, as short runs (30 optimizer steps), steps 2 and 3 on 2
CPU processes started by accelerate launch, step 4 on the 2 processes its notebook_launcher
starts (step 3's launched without ACCELERATE_USE_CPU=1, as a student first types it: the
course's launch check joins them on the CPU). The table says, for each: the change, what was measured (processes, and how many of
them believed they were alone; pairs each process scored; accuracy; metrics.json writes;
whether the processes ended with the same weights), the verdict against the lesson, and the
training time, as plain text in the terminal (the Markdown tables, with --readme, go to
the lessons' pages, through accelerate_course/maintain/update_readme.py). tests/test_whatif.py runs the same and
checks the pages' tables.
"""

import argparse
import sys
import tempfile
from pathlib import Path


from accelerate_course import lab, running
from accelerate_course.maintain import update_readme
from accelerate_course.launching import describe_machine

LAUNCHES = {1: "1 process (python)", 2: "2 CPU processes (accelerate launch)",
            3: "2 CPU processes (accelerate launch, the course's config, without ACCELERATE_USE_CPU)",
            4: "2 CPU processes (notebook_launcher), dropout off"}


def variant_notes(step):
    """Return [(variant, note)]: the text of each patch between its first line and its diff,
    for the variants that have one."""
    found = []
    for variant in lab.variants(step):
        text = variant.path.read_text().split("\n--- ", 1)[0].splitlines()[1:]
        note = " ".join(line.strip() for line in text if line.strip())
        if note:
            found.append((variant.name, note))
    return found


def notes(step):
    """Return the variants' notes as the lesson page's Markdown list."""
    found = [f"- **{name}**: {note}" for name, note in variant_notes(step)]
    return "\n".join(found) + ("\n" if found else "")


def block(step, rows, with_time=True):
    """Return a step's table as its lesson page shows it: the table, then the variants' notes."""
    table = lab.markdown_table(rows, with_time)
    extra = notes(step)
    return table + ("\n" + extra if extra else "")


def plain_text(step, rows, width=100):
    """Return a step's what-if results for a terminal: one block per variant (its change,
    what was measured, the verdict against the lesson, the time), then the variants' notes,
    as plain wrapped text; the Markdown table is for the lesson's page (--readme)."""
    import textwrap

    def wrapped(label, text):
        return textwrap.fill(text, width, initial_indent=f"  {label:<10}",
                             subsequent_indent=" " * 12)

    out = []
    for row in rows:
        out.append(f"{row['variant']}  ({row['seconds']:.1f} s of training)")
        if row["change"] != "-":
            for i, line in enumerate(row["change"].replace("`", "").split("<br>")):
                out.append(f"  {'change' if i == 0 else '':<10}{line}")
        out.append(wrapped("measured", row["measured"]))
        if row["verdict"] != "-":
            out.append(wrapped("result", row["verdict"]))
        out.append("")
    for name, note in variant_notes(step):
        out += [textwrap.fill(f"{name}: {note}", width), ""]
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser(prog="python -m accelerate_course.whatif",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--step", type=int, nargs="+", choices=[1, 2, 3, 4], default=[1, 2, 3, 4])
    parser.add_argument("--output-dir", help="keep every run's reports here (default: a "
                                             "temporary folder)")
    parser.add_argument("--readme", action="store_true",
                        help="rewrite the what-if tables of the lessons' pages with these results")
    args = parser.parse_args()
    folder = Path(args.output_dir or tempfile.mkdtemp(prefix="whatif-"))
    blocks = {}
    try:
        with running.stop_together():
            for step in args.step:
                print(f"\nStep {step}: {LAUNCHES[step]}, {lab.train_steps(lab.SHORT_RUN)} "
                      f"optimizer steps each (reports in {folder / f'step{step}'})\n", flush=True)
                try:
                    rows, _ = lab.what_if(step, folder / f"step{step}")
                except lab.PatchError as error:
                    sys.exit(f"error: {error}")
                blocks[step] = block(step, rows)
                print(plain_text(step, rows), flush=True)
    except running.Stopped as stop:
        later = [str(s) for s in args.step if s > step]
        running.end_command(stop, f"the what-if lab was stopped during step {step}"
                            + (f"; step{'s' if len(later) > 1 else ''} {', '.join(later)} "
                               "not started" if later else ""))
    print(f"Measured on {describe_machine()}.")
    if args.readme:
        changed = update_readme.write_pages(whatif_tables=blocks)
        print(f"updated the what-if tables of steps {sorted(blocks)}: {', '.join(changed) or 'no change'}")

if __name__ == "__main__":
    main()
