"""The diffs between consecutive steps are the lessons and nothing else.

A lesson is read in the reader's direction: step N-1 plus its lesson is step N, as `diff -u`
and GitHub's compare view show it. A comment written in one step stays word for word in the
later steps, so every hunk of that plain diff changes code (the docstring aside, which says
what the step adds). `make lesson`, the pages' diff blocks and the exercise writer show the
same hunks. Each lesson has a budget of changed code lines, and comments stay short.
"""

import ast
import re
import shutil
import subprocess

import pytest
from conftest import REPO, STEPS

from accelerate_course import exercise, lesson
from accelerate_course.steps import (
    LESSONS,
    code_lines_changed,
    code_of,
    docstring_end,
    lesson_diff,
    lesson_hunks,
    lesson_lines,
)
from accelerate_course.steps import STEPS as RECORDS


def lines(step):
    return STEPS[step].read_text().splitlines()


def comment(line):
    """Return a line's comment, without the # ("" for none)."""
    code = code_of(line)
    rest = line.strip()[len(code) :].strip() if code else line.strip()
    return rest[1:].strip() if rest.startswith("#") else ""


@pytest.mark.parametrize("step", LESSONS)
def test_every_hunk_of_the_plain_diff_changes_code(step):
    before, after = lesson_lines(step)
    churn = []
    for hunk in lesson_hunks(step):
        if hunk.j2 <= docstring_end(after) + 1:
            continue  # the docstring says what this step adds
        old, new = before[hunk.i1 : hunk.i2], after[hunk.j1 : hunk.j2]
        if [code_of(line) for line in old if code_of(line)] == [
            code_of(line) for line in new if code_of(line)
        ]:
            churn.append(f"line {hunk.j1 + 1}: only comments or blank lines change")
        # a line whose code stays and whose comment changes: the comment was rewritten
        kept = {code_of(line): comment(line) for line in old if code_of(line)}
        churn += [
            f"line {hunk.j1 + 1}: {line.strip()}"
            for line in new
            if code_of(line) in kept
            and comment(line) != kept[code_of(line)]
            and kept[code_of(line)]
        ]
    assert not churn, f"lesson {step}'s diff rewrites comments of code it keeps: {churn}"


@pytest.mark.parametrize("step", LESSONS)
def test_each_lesson_stays_within_its_budget(step):
    changed = code_lines_changed(step)
    budget = RECORDS[step].budget  # its record's (accelerate_course/steps.py)
    assert changed <= budget, f"step {step}'s lesson grew to {changed} changed code lines"


@pytest.mark.parametrize("step", sorted(STEPS))
def test_comments_are_short_and_name_no_step(step):
    body = lines(step)[docstring_end(lines(step)) + 1 :]
    code = [line for line in body if code_of(line)]
    comments = [line for line in body if line.strip().startswith("#") and line.strip() != "# %%"]
    # comment lines at most 40 % of the code lines
    assert len(comments) <= 0.4 * len(code), (len(comments), len(code))
    # a comment says one thing: at most two lines in a row
    runs = re.findall(r"(?:\n[ \t]*#(?! %%)[^\n]*){3,}", "\n" + "\n".join(body))
    assert not runs, runs
    # no tag a later step would have to rewrite
    tagged = [line.strip() for line in body if re.search(r"#.*\bstep \d\b", line)]
    assert not tagged, tagged


@pytest.mark.runs  # diff itself, the program a student runs
@pytest.mark.skipif(not shutil.which("diff"), reason="no diff program here")
@pytest.mark.parametrize("step", LESSONS)
def test_make_lesson_the_pages_and_the_exercise_show_the_hunks_of_diff_u(step):
    plain = subprocess.run(
        ["diff", "-u", str(STEPS[step - 1].relative_to(REPO)), str(STEPS[step].relative_to(REPO))],
        cwd=REPO,
        capture_output=True,
        text=True,
    ).stdout
    ranges = re.findall(r"(?m)^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@", plain)
    ours = re.findall(r"(?m)^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@", lesson_diff(step))
    assert ours == ranges
    # the hunks' lines (where a blank line is both above and below a removed line, diff and
    # difflib may take either: blank lines are left out of the comparison)
    body = lambda text: [
        line
        for line in text.splitlines()
        if line[:1] in "+- @" and not line.startswith(("+++", "---")) and line[1:].strip()
    ]
    assert body(lesson.plain(step)) == body(plain)
    page = (STEPS[step].parent / "README.md").read_text()
    block = page.split("<!-- BEGIN diff", 1)[1].split("\n", 1)[1].split("<!-- END diff -->")[0]
    assert body(block) == body(plain)
    # the exercise takes back exactly these hunks: outside them it is step N-1
    before, _ = lesson_lines(step)
    changed = {i for hunk in lesson_hunks(step) for i in range(hunk.i1, hunk.i2)}
    text = exercise.exercise(step)
    kept = [line for i, line in enumerate(before) if i not in changed and i > docstring_end(before)]
    assert all(line in text for line in kept)


def test_common_teaches_nothing():
    # the code of the modules that the steps import uses none of the names a lesson is about
    lesson_names = {
        "Accelerator",
        "accelerator",
        "prepare",
        "backward",
        "gather",
        "gather_for_metrics",
        "notebook_launcher",
        "is_main_process",
        "AdamW",
        "get_scheduler",
        "tqdm",
        "device",
        "set_seed",
    }
    modules = sorted((REPO / "common").glob("*.py"))  # the runtime; the builders live below
    assert len(modules) >= 8, modules
    for path in modules:
        tree = ast.parse(path.read_text())
        used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
        used |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
        used |= {
            alias.name.split(".")[-1]
            for node in ast.walk(tree)
            if isinstance(node, (ast.Import, ast.ImportFrom))
            for alias in node.names
        }
        assert not used & lesson_names, f"common/{path.name} uses {used & lesson_names}"


def test_steps_share_one_skeleton():
    for step in STEPS:
        text = STEPS[step].read_text()
        assert text.count("\n# %%\n") == 3, step  # imports | training_function | main
        assert "\ndef training_function(" in text and "\ndef main():" in text
        assert text.rstrip().endswith('if __name__ == "__main__":\n    main()')


def test_the_steps_are_defined_once():
    # accelerate_course/steps.py lists the step folders; the Makefile finds them on disk
    # (step<N>_*/train.py): the two agree, and no tool or test lists them again
    from accelerate_course.steps import FOLDERS

    on_disk = sorted(path.parent.name for path in REPO.glob("step[0-9]_*/train.py"))
    assert on_disk == [FOLDERS[step] for step in sorted(FOLDERS)]
    for path in [
        *REPO.glob("accelerate_course/**/*.py"),
        *REPO.glob("tests/*.py"),
        REPO / "Makefile",
    ]:
        if path.name != "steps.py":
            text = path.read_text()
            assert not all(folder in text for folder in FOLDERS.values()), (
                f"{path.relative_to(REPO)} lists the step folders again"
            )
