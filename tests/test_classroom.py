"""The classroom recipe of docs/classroom.md, played end to end with local bare repositories:
the teacher's course at a tag (what grading uses), a student's repository made from it,
the exercise written, committed and pushed, and a fresh clone of the student's repository
graded with the teacher's copy of the checks. Two real gradings (about 2 minutes on 2 cores):
it runs with `make test-classroom` (and in CI), not in `make test`.
"""

import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, STEPS

pytestmark = pytest.mark.skipif(os.environ.get("COURSE_CLASSROOM_TEST") != "1",
                                reason="two real gradings: make test-classroom")
TAG = "v-class"


def git(*words, cwd):
    result = subprocess.run(["git", *words], cwd=cwd, capture_output=True, text=True,
                            env={**os.environ, "GIT_AUTHOR_NAME": "s", "GIT_AUTHOR_EMAIL": "s@x",
                                 "GIT_COMMITTER_NAME": "s", "GIT_COMMITTER_EMAIL": "s@x"})
    assert result.returncode == 0, result.stderr
    return result.stdout


def grade(tmp_path, student_repo, name):
    """The documented grading command, in a fresh clone of the student's repository, with the
    teacher's course cloned at the tag (its make check runs python -m accelerate_course.check with the course's
    environment; here the environment of these tests, already installed)."""
    graded = tmp_path / f"graded-{name}"
    git("clone", "--quiet", str(student_repo), str(graded), cwd=tmp_path)
    course = tmp_path / f"course-{name}"
    git("clone", "--quiet", "--depth", "1", "--branch", TAG, f"file://{tmp_path / 'teacher.git'}",
        str(course), cwd=tmp_path)
    result = subprocess.run([sys.executable, "-m", "accelerate_course.check", "3",
                             str(graded / "exercises" / "step3" / "train.py")],
                            cwd=course, capture_output=True, text=True, timeout=900)
    print(f"\n$ make -C course check STEP=3 FILE=$PWD/exercises/step3/train.py   # {name}\n"
          f"{result.stdout}exit code {result.returncode}")
    return result


@pytest.mark.runs
def test_the_classroom_recipe_grades_a_pushed_solution_and_fails_the_untouched_exercise(tmp_path):
    # the teacher: the course's repository, tagged; the student's repository made from it
    git("clone", "--quiet", "--bare", str(REPO), str(tmp_path / "teacher.git"), cwd=tmp_path)
    git("tag", TAG, "HEAD", cwd=tmp_path / "teacher.git")
    git("clone", "--quiet", "--bare", str(tmp_path / "teacher.git"), str(tmp_path / "student.git"),
        cwd=tmp_path)
    # the student: clone, write the exercise, commit everything, push
    work = tmp_path / "student"
    git("clone", "--quiet", str(tmp_path / "student.git"), str(work), cwd=tmp_path)
    subprocess.run([sys.executable, "-m", "accelerate_course.exercise", "3"], cwd=work, check=True,
                   capture_output=True)
    git("add", "-A", cwd=work)
    git("commit", "--quiet", "-m", "the exercise, untouched", cwd=work)
    assert "exercises/step3/train.py" in git("show", "--name-only", "HEAD", cwd=work)
    git("push", "--quiet", "origin", "HEAD", cwd=work)
    untouched = grade(tmp_path, tmp_path / "student.git", "untouched")
    # the solution: the lesson's own step, written over the exercise
    shutil.copy(STEPS[3], work / "exercises" / "step3" / "train.py")
    git("commit", "--quiet", "-am", "step 3 done", cwd=work)
    git("push", "--quiet", "origin", "HEAD", cwd=work)
    solved = grade(tmp_path, tmp_path / "student.git", "solved")
    assert untouched.returncode == 1 and "FAIL" in untouched.stdout
    assert solved.returncode == 0 and "FAIL" not in solved.stdout
