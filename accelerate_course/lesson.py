"""Show one lesson: the diff from the step before to step N.

    python -m accelerate_course.lesson 3          (make lesson STEP=3)
    python -m accelerate_course.lesson 1          (step 1 itself: every line is new)

In a terminal, word by word in colour (git's --color-words); when the output is not a
terminal (a pipe, a file, a projector's capture) or NO_COLOR is set (no-color.org), a plain
unified diff whose lines start with - and +, readable without colour. Either way the previous
step is read as the lesson reads it: with its own `# step N-1:` tags taken off
(accelerate_course/steps.py). Needs only Python's standard library (and git for the colour).
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from accelerate_course.steps import FOLDERS, TRAIN_PY, lesson_diff, untagged


def in_colour():
    """Return True if the output is a terminal that may get colour."""
    return sys.stdout.isatty() and "NO_COLOR" not in os.environ and shutil.which("git")


def plain(step):
    """Return lesson `step` as a unified diff (step 1: its whole file, as added lines)."""
    if step == 1:
        lines = TRAIN_PY[1].read_text().splitlines()
        return (f"--- /dev/null\n+++ {FOLDERS[1]}/train.py\n@@ -0,0 +1,{len(lines)} @@\n"
                + "".join(f"+{line}\n" for line in lines))
    return lesson_diff(step)


def coloured(step):
    """Show lesson `step` with git's word diff, the two files named as in the repository."""
    with tempfile.TemporaryDirectory() as folder:
        later = Path(folder) / FOLDERS[step] / "train.py"
        later.parent.mkdir()
        later.write_text(TRAIN_PY[step].read_text())
        if step == 1:
            earlier = "/dev/null"
        else:
            earlier = Path(folder) / FOLDERS[step - 1] / "train.py"
            earlier.parent.mkdir()
            earlier.write_text(untagged(TRAIN_PY[step - 1].read_text(), step - 1))
            earlier = str(earlier.relative_to(folder))
        subprocess.run(["git", "diff", "--no-index", "--color-words", earlier,
                        str(later.relative_to(folder))], cwd=folder)


def main():
    parser = argparse.ArgumentParser(prog="python -m accelerate_course.lesson",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("step", type=int)
    args = parser.parse_args()
    if args.step not in FOLDERS:
        sys.exit(f"error: there is no step {args.step}: the steps are "
                 f"{', '.join(map(str, FOLDERS))} (make lesson STEP=3)")
    if in_colour():
        coloured(args.step)
    else:
        sys.stdout.write(plain(args.step))


if __name__ == "__main__":
    main()
