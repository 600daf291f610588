"""Show one lesson: the diff from the step before to step N.

    python -m accelerate_course.lesson 3          (make lesson STEP=3)
    python -m accelerate_course.lesson 1          (step 1 itself: every line is new)

It prints the same unified diff as `diff -u` between the two steps' train.py: every changed
line starts with - or +, so it reads without colour, on paper and on a projector. In a
terminal that takes colour (not when NO_COLOR is set: no-color.org), the added lines are also
blue and the removed ones orange, a pair that red-green colour blindness keeps apart. No pager
is started. It needs only Python's standard library: on Windows too, `python -m
accelerate_course.lesson 3` from the course's folder.
"""

import argparse
import os
import sys

from accelerate_course.steps import FOLDERS, TRAIN_PY, lesson_diff

# ANSI colours: bright blue for added lines, orange (256-colour 208) for removed ones, bold for
# the file names and hunk headers
ADDED, REMOVED, HEADER, RESET = "\033[94m", "\033[38;5;208m", "\033[1m", "\033[0m"


def plain(step):
    """Return lesson `step` as a unified diff (step 1: its whole file, as added lines)."""
    if step == 1:
        lines = TRAIN_PY[1].read_text().splitlines()
        return f"--- /dev/null\n+++ {FOLDERS[1]}/train.py\n@@ -0,0 +1,{len(lines)} @@\n" + "".join(
            f"+{line}\n" for line in lines
        )
    return lesson_diff(step)


def coloured(text):
    """Return a unified diff with its lines coloured by their first character."""
    out = []
    for line in text.splitlines(keepends=True):
        if line.startswith(("+++", "---", "@@")):
            out.append(f"{HEADER}{line.rstrip(chr(10))}{RESET}\n")
        elif line.startswith("+"):
            out.append(f"{ADDED}{line.rstrip(chr(10))}{RESET}\n")
        elif line.startswith("-"):
            out.append(f"{REMOVED}{line.rstrip(chr(10))}{RESET}\n")
        else:
            out.append(line)
    return "".join(out)


def in_colour(stream):
    """Return True if the stream is a terminal that may get colour."""
    return stream.isatty() and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"


def main():
    parser = argparse.ArgumentParser(
        prog="python -m accelerate_course.lesson", description=__doc__.splitlines()[0]
    )
    parser.add_argument("step", type=int)
    args = parser.parse_args()
    if args.step not in FOLDERS:
        sys.exit(
            f"error: there is no step {args.step}: the steps are "
            f"{', '.join(map(str, FOLDERS))} (make lesson STEP=3)"
        )
    text = plain(args.step)
    sys.stdout.write(coloured(text) if in_colour(sys.stdout) else text)


if __name__ == "__main__":
    main()
