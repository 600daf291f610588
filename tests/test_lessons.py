"""The diffs between consecutive steps are the lessons and nothing else.

Read in the reader's direction: step N-1 plus its lesson is step N (accelerate_course/steps.py:
step N-1's own tags taken off its comments, which stay as plain comments in step N). Every
changed hunk must belong to the later step's lesson: a line of the hunk, or one of the few
lines just above it, carries a comment naming that step ("# step 3: ..."). Two exceptions:
the docstring at the top, which says what the step adds, and code that only leaves (its lesson
is told where it arrives: no comment stays behind about code that is no longer there). A step
carries no other step's tag, and each lesson has a budget of changed code lines.
"""

import ast
import re

import pytest

from conftest import REPO, STEPS
from accelerate_course.steps import (MARKER_ABOVE, code_lines_changed, docstring_end,
                                     lesson_hunks, lesson_lines, marker)

# lines of code (comments, blank lines and the docstring aside) each lesson may add and remove:
# lesson 2 close to the seed's own diff (Accelerator, prepare, backward, the device lines gone)
BUDGET = {2: 20, 3: 25, 4: 30}


def lines(step):
    return STEPS[step].read_text().splitlines()


@pytest.mark.parametrize("step", [2, 3, 4])
def test_every_hunk_is_marked_with_its_step(step):
    before, after = lesson_lines(step)
    end_of_docstring = docstring_end(after)
    unmarked = []
    for hunk in lesson_hunks(step):
        if hunk.j2 <= end_of_docstring + 1:
            continue  # the docstring says what this step adds
        if hunk.j1 == hunk.j2:
            continue  # code that leaves is explained where it arrives, not by a comment left behind
        context = after[max(0, hunk.j1 - MARKER_ABOVE):hunk.j2]
        if not any(marker(step).search(line) for line in context):
            unmarked.append(f"line {hunk.j1 + 1}: " + " / ".join(after[hunk.j1:hunk.j2][:2]))
    assert not unmarked, f"step {step} changes without a '# step {step}:' comment: {unmarked}"


@pytest.mark.parametrize("step", [2, 3, 4])
def test_each_lesson_stays_within_its_budget(step):
    changed = code_lines_changed(step)
    assert changed <= BUDGET[step], f"step {step}'s lesson grew to {changed} changed code lines"


@pytest.mark.parametrize("step", [1, 2, 3, 4])
def test_a_step_carries_only_its_own_tags(step):
    # the earlier lessons' comments stay, as plain comments: read alone (step 4 in its
    # notebook), a step names no other step
    others = [line.strip() for line in lines(step)
              if re.search(r"#.*\bstep (\d)\b", line)
              and re.search(r"#.*\bstep (\d)\b", line).group(1) != str(step)]
    assert not others, f"step {step} names other steps in: {others}"


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
