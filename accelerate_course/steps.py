"""The course's steps, defined once: their folders in order, and how a lesson is read from
them. The runner, the lab, the exercise writer, the grader, the lesson command and the tests
use this; the Makefile finds the same folders on disk (step<N>_*/train.py), and a test
checks that the two agree.

A lesson is the plain diff from step N-1 to step N, the one `diff -u` and GitHub's compare
view show: a comment written in one step stays word for word in the later steps, so every
hunk of that diff is the lesson's own.
"""

import difflib
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parent.parent
FOLDERS = {1: "step1_plain_loop", 2: "step2_accelerate", 3: "step3_distributed_eval",
           4: "step4_tpu_notebook"}
TRAIN_PY = {step: REPO / folder / "train.py" for step, folder in FOLDERS.items()}


def docstring_end(lines):
    """Return the index of the line that closes a step's module docstring (it opens on line
    0), in the step's lines."""
    return next(i for i, line in enumerate(lines) if i > 0 and line.rstrip().endswith('"""'))


def code_of(line):
    """Return a line without its comment and the spaces around it ("" for a comment-only or
    blank line). A `#` inside a string literal is kept."""
    quote, i = None, 0
    while i < len(line):
        char = line[i]
        if quote and char == "\\":
            i += 1  # the escaped character is part of the string
        elif quote and char == quote:
            quote = None
        elif not quote and char in "\"'":
            quote = char
        elif not quote and char == "#":
            return line[:i].strip()
        i += 1
    return line.strip()


class Hunk(NamedTuple):
    """One change of a lesson: lines before[i1:i2] of the previous step became after[j1:j2]
    of the step."""
    i1: int
    i2: int
    j1: int
    j2: int


def lesson_lines(step):
    """Return (the previous step's lines, the step's lines): what a lesson compares."""
    return TRAIN_PY[step - 1].read_text().splitlines(), TRAIN_PY[step].read_text().splitlines()


def lesson_hunks(step):
    """Return the Hunks of lesson `step` (2, 3, 4), in order, the docstrings' included."""
    before, after = lesson_lines(step)
    matcher = difflib.SequenceMatcher(None, before, after, autojunk=False)
    return [Hunk(i1, i2, j1, j2) for tag, i1, i2, j1, j2 in matcher.get_opcodes()
            if tag != "equal"]


def lesson_diff(step, context=3):
    """Return lesson `step` as a unified diff (what the lesson pages and `make lesson` show)."""
    before, after = lesson_lines(step)
    return "".join(difflib.unified_diff(
        [line + "\n" for line in before], [line + "\n" for line in after],
        f"{FOLDERS[step - 1]}/train.py", f"{FOLDERS[step]}/train.py", n=context))


def code_lines_changed(step):
    """Return how many lines of code lesson `step` adds and removes (blank lines, comments and
    the docstring not counted): the size a lesson is held to (tests/test_lessons.py)."""
    before, after = lesson_lines(step)
    starts = docstring_end(before) + 1, docstring_end(after) + 1

    def code(lines):
        return [line for line in lines if code_of(line)]

    return sum(len(code(before[max(h.i1, starts[0]):h.i2])) +
               len(code(after[max(h.j1, starts[1]):h.j2])) for h in lesson_hunks(step))
