"""The course's steps, defined once: one Step record per step (its folder, how it starts its
processes, how its lab runs, how close it must come to the step before it, its line in the
loss plot), and how a lesson is read from them. Every per-step table of the runner, the lab,
the exercise writer, the grader, the lesson command and the tests is derived from STEPS; the
Makefile finds the same folders on disk (step<N>_*/train.py), and a test checks that the two
agree. Adding a step: its folder (train.py and its pages) and one Step below
(tests/test_new_step.py does it in a copy).

A lesson is the plain diff from step N-1 to step N, the one `diff -u` and GitHub's compare
view show: a comment written in one step stays word for word in the later steps, so every
hunk of that diff is the lesson's own.
"""

import difflib
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parent.parent

IDENTICAL = None  # a Step's `within`: the same predictions, losses and metrics, bit for bit


class Step(NamedTuple):
    """One step of the course, as every command runs and compares it."""

    number: int
    folder: str
    # who starts its processes: "python" (one process, as make course runs it), "a launcher"
    # (accelerate launch or torchrun starts N copies of it) or "itself" (its own
    # notebook_launcher, given --num-processes N)
    started_by: str
    # whether it joins its processes into one run (an Accelerator); step 1 never does, so its
    # lab runs and a launcher's N copies are N separate trainings
    joins_processes: bool
    # how many lines of code its lesson may add and remove (comments, blank lines and the
    # docstring aside: steps.code_lines_changed); lesson 2 close to the seed's own diff
    budget: int | None = None
    # how far its accuracy and F1 may be from the step before's in make course (IDENTICAL,
    # or a largest difference); the first step has no step before
    within: float | None = IDENTICAL
    # its lab runs use the checkpoint copy without dropout, when False (see lab_runs)
    lab_dropout: bool = True
    # its line in make course's loss plot: matplotlib's line style and width
    plot: tuple = ("-", 1.5)
    # the length it pads every validation pair to (step 4: XLA's fixed shapes), or None (each
    # batch to its longest pair): its saved model is reloaded and batched the same way
    eval_padding: int | None = None

    @property
    def train_py(self):
        return REPO / self.folder / "train.py"

    @property
    def lab_processes(self):
        """How many processes its lab runs have: 1 for a step that joins none, else 2 (CPU
        processes, which every machine has)."""
        return 2 if self.joins_processes else 1

    @property
    def lab_env(self):
        """What its lab runs add to the environment: a step that starts its own processes gives
        each one thread (notebook_launcher would give each cores / processes; on 2 cores the
        processes of a variant that never join would then slow each other down many times)."""
        return {"OMP_NUM_THREADS": "1"} if self.started_by == "itself" else {}

    def process_flags(self, n):
        """The flags that ask it for n processes: its own --num-processes when it starts them
        itself (a launcher is asked instead, on its command line)."""
        return ["--num-processes", str(n)] if self.started_by == "itself" else []


# the records as a table, one per step
# fmt: off
STEPS = {step.number: step for step in [
    Step(1, "step1_plain_loop", "python", joins_processes=False, plot=("-", 3.5)),
    Step(2, "step2_accelerate", "python", joins_processes=True, budget=22, plot=("--", 1.5)),
    Step(3, "step3_distributed_eval", "a launcher", joins_processes=True, budget=32,
         within=0.05, plot=("-", 2.5)),
    Step(4, "step4_tpu_notebook", "itself", joins_processes=True, budget=34, within=0.05,
         lab_dropout=False, plot=(":", 2.0), eval_padding=128),
]}
# fmt: on
LESSONS = [n for n in STEPS if n - 1 in STEPS]  # a lesson is a step with a step before it
FOLDERS = {n: step.folder for n, step in STEPS.items()}
TRAIN_PY = {n: step.train_py for n, step in STEPS.items()}


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
    """Return the Hunks of lesson `step` (one of LESSONS), in order, the docstrings' included."""
    before, after = lesson_lines(step)
    matcher = difflib.SequenceMatcher(None, before, after, autojunk=False)
    return [Hunk(i1, i2, j1, j2) for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"]


def lesson_diff(step, context=3):
    """Return lesson `step` as a unified diff (what the lesson pages and `make lesson` show)."""
    before, after = lesson_lines(step)
    return "".join(
        difflib.unified_diff(
            [line + "\n" for line in before],
            [line + "\n" for line in after],
            f"{FOLDERS[step - 1]}/train.py",
            f"{FOLDERS[step]}/train.py",
            n=context,
        )
    )


def code_lines_changed(step):
    """Return how many lines of code lesson `step` adds and removes (blank lines, comments and
    the docstring not counted): the size a lesson is held to (tests/test_lessons.py)."""
    before, after = lesson_lines(step)
    starts = docstring_end(before) + 1, docstring_end(after) + 1

    def code(lines):
        return [line for line in lines if code_of(line)]

    return sum(
        len(code(before[max(h.i1, starts[0]) : h.i2]))
        + len(code(after[max(h.j1, starts[1]) : h.j2]))
        for h in lesson_hunks(step)
    )
