"""The red team: files that try to forge a take-home's grade, each graded where a class is
graded (make test-forgery; about 25 minutes on 2 cores: three gradings per file).

For the untouched starting script of sst2-losses, each attack of tests/helpers/forgeries.py,
and the honest solution (built at test time), three gradings: the lab's GitHub Classroom
workflow played step by step (tests/test_classroom.py's replay, its grading step as root as
on a runner with sudo), Gradescope's run_autograder in a fake /autograder tree (as root, as
Gradescope runs it), and the lab's `make check` run as root (`sudo make check`). Each row:
the points out of 10 on each, and whether the forgery held (a score above the untouched
file's, or a file of the grade changed after the grader wrote it). Every attack must score
what the untouched file scores, and hold nowhere; the solution, 10 of 10 everywhere. The
table is printed, and written to $COURSE_FORGERY_TABLE when that names a file.
"""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO
from forgeries import ATTACKS, forged
from lesson_applied import applied
from test_classroom import (
    TASK,
    as_the_teacher,
    autograde,
    enterable_by_others,
    fake_autograder,
    git,
    run_to_end,
)  # noqa: F401 (fixture)
from test_takehome import START

pytestmark = pytest.mark.skipif(
    os.environ.get("COURSE_FORGERY_TEST") != "1",
    reason="three gradings per file: make test-forgery",
)
ROWS = {}  # name -> (Classroom points, Gradescope points, make check points, what held)


@pytest.fixture(scope="module")
def lab(tmp_path_factory, teacher):  # noqa: F811 (the fixture imported above)
    """The take-home's lab pushed as a bare repository, a student's clone of it, and its
    Gradescope autograder: (folder, the students' repository URL, the clone, the zip)."""
    teacher_work, course = teacher
    folder = tmp_path_factory.mktemp("forgery")
    enterable_by_others(folder)
    template = folder / "template"
    made = as_the_teacher(
        teacher_work,
        "accelerate_course.classroom",
        "template",
        TASK,
        str(template),
        "--course",
        course,
    )
    assert made.returncode == 0, made.stderr
    git("init", "--quiet", "-b", "main", cwd=template)
    git("add", "-A", cwd=template)
    git("commit", "--quiet", "-m", "lab", cwd=template)
    git("clone", "--quiet", "--bare", str(template), str(folder / "student.git"), cwd=folder)
    work = folder / "student"
    git("clone", "--quiet", f"file://{folder / 'student.git'}", str(work), cwd=folder)
    made = as_the_teacher(
        teacher_work, "accelerate_course.classroom", "gradescope", TASK, str(folder / "gradescope")
    )
    assert made.returncode == 0, made.stderr
    return (
        folder,
        f"file://{folder / 'student.git'}",
        work,
        folder / "gradescope" / "autograder.zip",
    )


def lab_environment(workspace):
    """The lab's .venv, standing in for make install's: this environment's packages."""
    venv = workspace / ".venv"
    (venv / "bin").mkdir(parents=True)
    base = Path(sys.executable).parent.parent
    (venv / "pyvenv.cfg").write_text((base / "pyvenv.cfg").read_text())
    (venv / "lib").symlink_to(base / "lib")
    (venv / "bin" / "python").symlink_to(sys.executable)
    (venv / "bin" / "accelerate").symlink_to(Path(sys.executable).parent / "accelerate")
    time.sleep(0.01)
    (venv / "bin" / ".installed").touch()


def make_check(workspace):
    """The lab's make check, run as root: (points, the results.json it wrote)."""
    lab_environment(workspace)
    results = workspace / "lab-results.json"
    code, output = run_to_end(
        ["make", "check", f"JSON={results}"],
        cwd=workspace,
        timeout=900,
        env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
    )
    print(f"\n--- make check\n{output[-2500:]}")
    found = re.search(r"(\d+) of 10 points", output)
    return (int(found.group(1)) if found else None), results


def grade_everywhere(lab, name, text):
    """Grade one file in the three places; return (Classroom, Gradescope, make check points,
    [what held])."""
    folder, student, work, archive = lab
    logs = folder / "logs"
    logs.mkdir(exist_ok=True)
    logs.chmod(0o1777)
    os.environ["COURSE_FORGERY_LOG"] = str(logs / name)  # what the attack managed, said there
    exercise = work / "exercises" / TASK / "train.py"
    exercise.write_text(text)
    git("commit", "--quiet", "--allow-empty", "-am", name, cwd=work)
    git("push", "--quiet", "origin", "HEAD", cwd=work)
    where = folder / name
    where.mkdir()
    points, _, results, _, workspace = autograde(where, student, "classroom")
    grader_result = json.dumps(results)
    checker = workspace / ".github" / "classroom" / "check_result.py"
    checker_text = checker.read_text()
    submitted = where / "train.py"
    submitted.write_text(text)
    gradescope = fake_autograder(where, archive, {"train.py": submitted})
    lab_points, lab_results = make_check(workspace)
    time.sleep(5)  # what a process left behind would write by now
    held = []
    if json.dumps(json.loads((workspace / "results.json").read_text())) != grader_result:
        held.append("Classroom results.json rewritten")
    if checker.read_text() != checker_text:
        held.append("check_result.py rewritten")
    after = json.loads((where / "autograder" / "results" / "results.json").read_text())
    if after["score"] != gradescope["score"]:
        held.append("Gradescope results.json rewritten")
    if lab_results.exists() and json.loads(lab_results.read_text())["score"] != lab_points:
        held.append("make check's results.json rewritten")
    import sysconfig

    site = Path(sysconfig.get_paths()["purelib"])
    for planted in (
        site / "zz_forged.pth",
        site / "sitecustomize.py",
        REPO / ".git" / "hooks" / "post-checkout",
    ):
        if planted.exists() and "forged" in planted.read_text():
            held.append(f"{planted} written")
            planted.unlink()
    log = "; ".join(
        sorted({line for path in logs.glob(f"{name}.*") for line in path.read_text().splitlines()})
    )
    print(
        f"\n=== {name}: Classroom {points}, Gradescope {gradescope['score']}, make check "
        f"{lab_points}; held: {held or 'nothing'}\n    its writes: {log[:1500] or 'none'}"
    )
    return points, gradescope["score"], lab_points, held


FILES = ["untouched", *ATTACKS, "solution"]


@pytest.mark.runs
@pytest.mark.parametrize("name", FILES)
def test_no_attack_scores_more_than_the_untouched_file(lab, name):
    text = (
        START
        if name == "untouched"
        else applied(START)
        if name == "solution"
        else forged(START, name)
    )
    points = grade_everywhere(lab, name, text)
    ROWS[name] = points
    table = os.environ.get("COURSE_FORGERY_TABLE")
    if table:
        Path(table).write_text(json.dumps(ROWS, indent=1))
    scores, held = points[:3], points[3]
    if name == "solution":
        assert scores == (10, 10, 10)
    else:
        assert held == []
        assert scores == ROWS.get("untouched", (0, 0, 0))[:3], (name, scores)
    # the machine is as it was: no forged file left where a later run would read it
    assert not (
        Path(
            subprocess.check_output(
                [sys.executable, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                text=True,
            ).strip()
        )
        / "zz_forged.pth"
    ).exists()
