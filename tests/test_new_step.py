"""Adding a step touches its folder, one record and its pages: a throwaway fifth step, in a copy
of the course, run through the course's own commands.

Step 5 is step 4 plus one line (the processes that shared the evaluation, printed once). The
copy gets that step's folder (train.py and its two pages) and one Step in
accelerate_course/steps.py, nothing else; then `make lesson`, `make course`, the exercise
writer and the lessons' tests each take step 5 as they take the others.
"""

import re
import shutil
import subprocess
import sys

import pytest
from conftest import REPO, run_command

NEW_LINE = (
    '    accelerator.print(f"{accelerator.num_processes} processes shared the evaluation")'
    "  # how many took part, said once"
)
RECORD = (
    '    Step(5, "step5_said_once", "itself", joins_processes=True, budget=2, within=0.05,\n'
    '         lab_dropout=False, plot=("-.", 1.5)),\n'
)


def copy_of_the_course(folder):
    """Copy the course's files as git has them (tracked, with this checkout's changes) into
    folder, as a repository of its own with one commit: what adding a step changes is then
    what `git status` lists."""
    listed = (
        subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True)
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, folder / name)
    git = dict(cwd=folder, check=True, capture_output=True)
    subprocess.run(["git", "init", "-q"], **git)
    subprocess.run(["git", "add", "-A"], **git)
    subprocess.run(
        [
            "git",
            "-c",
            "user.name=course",
            "-c",
            "user.email=course@example.com",
            "commit",
            "-qm",
            "the course",
        ],
        **git,
    )


def add_step5(course):
    """Add step 5 as a maintainer would: its folder (train.py, its pages) and its record."""
    folder = course / "step5_said_once"
    folder.mkdir()
    step4 = (course / "step4_tpu_notebook" / "train.py").read_text()
    anchor = (
        '    accelerator.print(f"gathered {len(gathered)} predictions, kept {len(predictions)}")\n'
    )
    assert anchor in step4
    text = step4.replace(anchor, anchor + NEW_LINE + "\n")
    text = text.replace(
        '"""Step 4 of 4: step 3 as Accelerate\'s TPU notebook: one function started '
        "by notebook_launcher.",
        '"""Step 5: step 4, saying how many processes shared the evaluation.',
    )
    text = text.replace("python step4_tpu_notebook/train.py", "python step5_said_once/train.py")
    (folder / "train.py").write_text(text)
    # its pages: the diff's block is left empty, for the pages' generator to fill
    diff = "<!-- BEGIN diff step4_tpu_notebook step5_said_once -->\n<!-- END diff -->\n"
    (folder / "README.md").write_text(
        "# Step 5: said once\n\n[中文](README.zh-CN.md)\n\n"
        "The lesson prints how many processes took part.\n\n" + diff
    )
    (folder / "README.zh-CN.md").write_text(
        "# 第 5 步\n\n[English](README.md)\n\n这一课打印有多少个进程参与了评估。\n\n" + diff
    )
    steps = course / "accelerate_course" / "steps.py"
    source = steps.read_text()
    last = re.search(r"    Step\(4, .*?\),\n(?=\]\})", source, re.S)
    assert last, "the record of step 4 is the last of STEPS"
    steps.write_text(source[: last.end()] + RECORD + source[last.end() :])


@pytest.mark.runs
def test_a_fifth_step_is_its_folder_one_record_and_its_pages(tmp_path):
    course = tmp_path / "course"
    course.mkdir()
    copy_of_the_course(course)
    add_step5(course)
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=course,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert sorted(line[3:] for line in status.splitlines()) == [
        "accelerate_course/steps.py",
        "step5_said_once/README.md",
        "step5_said_once/README.zh-CN.md",
        "step5_said_once/train.py",
    ]

    def run(*command, timeout=600):
        done = run_command(
            command, timeout, cwd=course, PYTHONPATH=str(course), OMP_NUM_THREADS="1", NO_COLOR="1"
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return done.stdout

    # the pages' generator fills step 5's diff blocks; it changes nothing but pages
    run(sys.executable, "-m", "accelerate_course.maintain.update_readme")
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=course,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    generated = {line[3:] for line in status.splitlines()} - {
        "accelerate_course/steps.py",
        "step5_said_once/train.py",
    }
    assert generated and all(name.endswith(".md") for name in generated), generated
    page = (course / "step5_said_once" / "README.zh-CN.md").read_text()
    assert NEW_LINE.replace("    ", "+    ", 1) in page

    # the lesson, as make lesson shows it: the one new line, against step 4
    lesson = run("make", "--no-print-directory", "lesson", "STEP=5", f"PYTHON={sys.executable}")
    assert "--- step4_tpu_notebook/train.py" in lesson and "+++ step5_said_once/train.py" in lesson
    added = [
        line[1:]
        for line in lesson.splitlines()
        if line.startswith("+") and not line.startswith("+++")
    ]
    # the new line, and the docstring's first line and Run: line
    assert [line for line in added if not line.startswith(('"""', "Run:"))] == [NEW_LINE]
    # the exercise: step 4 with the new line's comment as its TODO
    exercise = run(sys.executable, "-m", "accelerate_course.exercise", "5", "--print")
    assert "# TODO step 5: how many took part, said once" in exercise
    # make course runs it as its record says (its own notebook_launcher, 2 CPU processes) and
    # holds it to step 4 (identical here: the new line only prints)
    output = tmp_path / "out"
    table = run(
        sys.executable,
        "-m",
        "accelerate_course.run_course",
        "--steps",
        "4",
        "5",
        "--max-train-steps",
        "3",
        "--output-dir",
        str(output),
    )
    assert re.search(r"(?m)^  step 5  notebook_launcher +2 processes on the CPU", table), table
    row = next(line for line in table.splitlines() if line.startswith("5 "))
    assert row.split()[1:3] == ["notebook_launcher", "2"] and re.search(
        r"identical +408 / 408 equal", row
    ), row
    said = (output / "step5" / "train.log").read_text()
    assert "2 processes shared the evaluation" in said
    # the lessons' tests take it: its marker, its parametrizations, its budget
    tests = run(
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-m",
        "step5",
        "tests/test_lessons.py",
    )
    # its diff changes code only, within its budget, its comments short, its page's diff block
    # the hunks of diff -u
    assert re.search(r"(?m)^4 passed, \d+ deselected", tests), tests
    collected = run(
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--collect-only",
        "-m",
        "step5",
        "tests/test_lessons.py",
    )
    assert "test_each_lesson_stays_within_its_budget[5]" in collected
