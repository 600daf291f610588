"""The diffs between consecutive steps are the lessons and nothing else.

Read in the reader's direction: step N-1 plus its lesson is step N. Every changed hunk of
the diff between two consecutive train.py files must belong to the later step's lesson: a
line of the hunk, or one of the few lines just above it, carries a comment naming that step
("# step 3: ..."). Two exceptions: the docstring at the top, which says what the step adds,
and code that only leaves (its lesson is told where it arrives: no comment stays behind about
code that is no longer there). And each lesson has a budget of changed lines, so that growth is a decision.
"""

import ast
import difflib
import re

import pytest

from conftest import REPO, STEPS
from accelerate_course.steps import MARKER_ABOVE, docstring_end

# changed lines (added + removed) allowed in each lesson's diff, docstring included
BUDGET = {2: 50, 3: 55, 4: 61}  # 2: main_process_first re-indents 5 lines; 4: a copy per TPU core


def lines(step):
    return STEPS[step].read_text().splitlines()


def hunks(step):
    """Yield (start, end, added, removed) for the hunks of the diff from step-1 to step, with
    start/end the span of the hunk in the later file."""
    a, b = lines(step - 1), lines(step)
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            yield j1, j2, b[j1:j2], a[i1:i2]


@pytest.mark.parametrize("step", [2, 3, 4])
def test_every_hunk_is_marked_with_its_step(step):
    b = lines(step)
    end_of_docstring = docstring_end(b)
    marker = re.compile(rf"#.*\bstep {step}\b")
    unmarked = []
    for start, end, added, removed in hunks(step):
        if end <= end_of_docstring + 1:
            continue  # the docstring says what this step adds
        if not added:
            continue  # code that leaves is explained where it arrives, not by a comment left behind
        context = b[max(0, start - MARKER_ABOVE):end]
        if not any(marker.search(line) for line in context):
            unmarked.append(f"line {start + 1}: " + " / ".join((added or removed)[:2]))
    assert not unmarked, f"step {step} changes without a '# step {step}:' comment: {unmarked}"


@pytest.mark.parametrize("step", [2, 3, 4])
def test_each_lesson_stays_within_its_budget(step):
    changed = sum(len(added) + len(removed) for _, _, added, removed in hunks(step))
    assert changed <= BUDGET[step], f"step {step}'s lesson grew to {changed} changed lines"


@pytest.mark.parametrize("step", [2, 3, 4])
def test_earlier_steps_markers_are_kept(step):
    earlier_markers = [line.strip() for line in lines(step - 1) if re.search(r"# step \d", line)]
    later = "\n".join(lines(step))
    for line in earlier_markers:
        comment = line[line.index("# step"):]
        assert comment in later, f"step {step} dropped the earlier marker {comment!r}"


def test_common_teaches_nothing():
    # the code of the modules that the steps import uses none of the names a lesson is about
    lesson_names = {"Accelerator", "accelerator", "prepare", "backward", "gather",
                    "gather_for_metrics", "notebook_launcher", "is_main_process", "AdamW",
                    "get_scheduler", "tqdm", "device", "set_seed"}
    modules = sorted((REPO / "common").glob("*.py"))  # the runtime; the builders live below
    assert len(modules) >= 8, modules
    for path in modules:
        tree = ast.parse(path.read_text())
        used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
        used |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
        used |= {alias.name.split(".")[-1] for node in ast.walk(tree)
                 if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}
        assert not used & lesson_names, f"common/{path.name} uses {used & lesson_names}"


def test_steps_share_one_skeleton():
    for step in STEPS:
        text = STEPS[step].read_text()
        assert text.count("\n# %%\n") == 3, step  # imports | training_function | main
        assert "\ndef training_function(" in text and "\ndef main():" in text
        assert text.rstrip().endswith('if __name__ == "__main__":\n    main()')


def test_the_steps_are_defined_once():
    # accelerate_course/steps.py lists the step folders; the Makefile finds them on disk (step<N>_*/train.py):
    # the two agree, and no tool or test lists them again
    from accelerate_course.steps import FOLDERS
    on_disk = sorted(path.parent.name for path in REPO.glob("step[0-9]_*/train.py"))
    assert on_disk == [FOLDERS[step] for step in sorted(FOLDERS)]
    for path in [*REPO.glob("accelerate_course/**/*.py"), *REPO.glob("tests/*.py"), REPO / "Makefile"]:
        if path.name != "steps.py":
            text = path.read_text()
            assert not all(folder in text for folder in FOLDERS.values()), \
                f"{path.relative_to(REPO)} lists the step folders again"
