"""A teacher's private copy of the course (make private-copy, accelerate_course/private_copy.py):
a new take-home task with its solution and its tests, where no student's clone reaches, and
the labs written from it grading with it. The copy is made from the course's last commit, and
its own tests are run in it, with the course's environment (PYTHONPATH: the copy's modules)."""

import os
import subprocess
import sys

import pytest
from conftest import REPO, enterable_by_others

from accelerate_course import sandbox

PRIVATE = "https://github.com/teacher/course-private"


def in_copy(copy, *args, timeout=900):
    """Run python with args in the copy, its modules first; return the finished process."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(copy)},
    )


def private_copy(out, *args):
    return subprocess.run(
        [sys.executable, "-m", "accelerate_course.private_copy", str(out), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.runs
@pytest.mark.parametrize(
    "args, said",
    [
        (["--task", "my-losses"], "give the private repository's address: REPOSITORY="),
        (
            ["--repository", "github.com/teacher/x", "--task", "my-losses"],
            "give the private repository's address",
        ),
        (["--repository", PRIVATE, "--task", "My Losses"], "give the new task a folder's name"),
        (
            ["--repository", PRIVATE, "--task", "sst2-losses"],
            "takehome/sst2-losses/ is a take-home task of the course already",
        ),
        (
            ["--repository", PRIVATE, "--task", "x", "--start", "nothing"],
            "there is no take-home task 'nothing' to start from",
        ),
    ],
)
def test_what_cannot_make_a_copy_is_refused_in_one_line_before_anything_is_written(
    tmp_path, args, said
):
    done = private_copy(tmp_path / "copy", *args)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith(f"error: {said}") and done.stderr.count("\n") == 1, done.stderr
    assert not (tmp_path / "copy").exists()


@pytest.mark.runs
def test_a_private_copy_holds_the_task_its_solution_and_its_tests_and_grades_with_them(tmp_path):
    enterable_by_others(tmp_path)
    copy = tmp_path / "course-private"
    made = private_copy(copy, "--repository", PRIVATE, "--task", "my-losses")
    assert made.returncode == 0, made.stderr
    print(made.stdout)
    git = lambda *args: (
        subprocess.run(
            ["git", *args],
            cwd=copy,
            capture_output=True,  # noqa: E731
            text=True,
            check=True,
        ).stdout
    )
    assert git("log", "-1", "--format=%s").startswith("The graded take-home my-losses")
    assert git("tag", "--points-at", "HEAD").split() == ["v0.1.0-private"]
    assert git("remote", "get-url", "origin").strip() == PRIVATE
    assert git("status", "--porcelain") == ""
    assert {
        "solutions/my-losses/train.py",
        "tests/test_solutions.py",
        "takehome/my-losses/task.toml",
    } <= set(git("ls-files").split())

    # the loop is the practice task's, whose answer is public: no lab is written for it
    refused = in_copy(
        copy, "-m", "accelerate_course.classroom", "template", "my-losses", str(tmp_path / "lab")
    )
    assert refused.returncode == 1 and not (tmp_path / "lab").exists()
    assert refused.stderr == (
        "error: takehome/my-losses/train.py is the loop of "
        "takehome/sst2-losses/, whose answer is public: change the loop "
        "(and its solution) before a class is graded on it "
        "(docs/teaching.md)\n"
    )
    # the teacher changes the loop: the lab grades with the private copy, at its tag, and its
    # grader clone holds no solution
    start = copy / "takehome" / "my-losses" / "train.py"
    start.write_text(start.read_text().replace("model.eval()", "model.eval()  # evaluation", 1))
    lab = in_copy(
        copy, "-m", "accelerate_course.classroom", "template", "my-losses", str(tmp_path / "lab")
    )
    assert lab.returncode == 0, lab.stderr
    workflow = (tmp_path / "lab" / ".github" / "workflows" / "classroom.yml").read_text()
    assert f'url="{PRIVATE}"' in workflow and "--branch v0.1.0-private" in workflow
    grader_files = (tmp_path / "lab" / ".github" / "classroom" / "grader-files").read_text()
    assert "/takehome/my-losses/" in grader_files.split() and "solutions" not in grader_files
    # nor Gradescope's zip
    git("commit", "-qam", "The loop, changed")
    zipped = in_copy(
        copy,
        "-m",
        "accelerate_course.classroom",
        "gradescope",
        "my-losses",
        str(tmp_path / "gradescope"),
    )
    assert zipped.returncode == 0, zipped.stderr
    names = __import__("zipfile").ZipFile(tmp_path / "gradescope" / "autograder.zip").namelist()
    assert "course/takehome/my-losses/train.py" in names
    assert not [name for name in names if name.startswith("course/solutions/")]

    # the graded user may not read the solutions (where the tests run as root)
    if not sandbox.without_root():
        read = in_copy(
            copy,
            "-c",
            (
                "from accelerate_course import check, sandbox\nimport subprocess, sys\n"
                "def read(user):\n"
                "    return subprocess.run([sys.executable, '-S', '-c', 'import sys; "
                "print(len(open(sys.argv[1]).read()))', 'solutions/my-losses/train.py'], "
                "capture_output=True, text=True, cwd='.', **user.popen())\n"
                "with sandbox.GradedUser() as user:\n"
                "    print(read(user).stdout.strip())\n"  # the folder alone is open to it
                "    with user.denied(check.not_read_by_a_graded_run()):\n"
                "        print((read(user).stderr.splitlines() or ['read'])[-1])\n"
            ),
            timeout=60,
        )
        size = len((copy / "solutions" / "my-losses" / "train.py").read_text())
        assert read.stdout.splitlines()[0] == str(size), read
        assert read.stdout.splitlines()[1].startswith(
            "PermissionError: [Errno 13] Permission denied"
        ), read

    # the copy's own tests: the solution scores every point, the starting script none
    # (its own temporary folder: a pytest session makes /tmp/pytest-of-<user> its user's
    # alone again, which the other tests' graded users must enter)
    tested = in_copy(
        copy,
        "-m",
        "pytest",
        "tests/test_solutions.py",
        "-q",
        "-s",
        "-p",
        "no:cacheprovider",
        "--basetemp",
        str(tmp_path / "copy-tests"),
    )
    print(tested.stdout[-2000:])
    assert tested.returncode == 0, tested.stdout[-3000:]
    assert "the take-home task my-losses, solution: (10, 10) |" in tested.stdout
    assert "the take-home task my-losses, start: (0, 10) |" in tested.stdout
