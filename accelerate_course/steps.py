"""The course's steps, defined once: their folders in order, and how a lesson is read from
them. The runner, the lab, the exercise writer, the grader and the tests use this; the
Makefile finds the same folders on disk (step<N>_*/train.py), and a test checks that the two
agree."""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FOLDERS = {1: "step1_plain_loop", 2: "step2_accelerate", 3: "step3_distributed_eval",
           4: "step4_tpu_notebook"}
TRAIN_PY = {step: REPO / folder / "train.py" for step, folder in FOLDERS.items()}
MARKER_ABOVE = 4  # a lesson's `# step N:` comment may sit this many lines above its hunk


def docstring_end(lines):
    """Return the index of the line that closes a step's module docstring (it opens on line
    0), in the step's lines."""
    return next(i for i, line in enumerate(lines) if i > 0 and line.rstrip().endswith('"""'))
