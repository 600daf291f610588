"""The graded take-home tasks of this private copy (make private-copy wrote this file): each
task with a solution in solutions/<task>/train.py is graded as make check grades a file, its
solution and its starting script in one set of launches. The solution scores every point; the
starting script passes no check worth points. Add a mistake a class makes as test_takehome.py
does for the practice task, with the score it must get."""

import pytest

from accelerate_course import check, takehome
from conftest import REPO

SOLVED = sorted(task for task in takehome.tasks()
                if (REPO / "solutions" / task / "train.py").is_file())


@pytest.fixture(scope="module", params=SOLVED)
def graded(request, tmp_path_factory):
    task = request.param
    grading = check.grading_of(task)
    paths = {"solution": REPO / "solutions" / task / "train.py",
             "start": takehome.tasks()[task].start}
    runs = check.runs_for(grading, paths, tmp_path_factory.mktemp(task) / "runs")
    return grading, {name: check.grade(grading, name, runs) for name in paths}


@pytest.mark.runs
def test_the_solution_scores_every_point_and_the_starting_script_none(graded):
    grading, checks = graded
    for name, each in checks.items():
        print(f"\n{grading.what}, {name}: {check.score(grading, each)} | " + " | ".join(
            f"FAIL {c.key}: {c.hint}" for c in each if not c.passed))
    assert all(c.passed for c in checks["solution"]), checks["solution"]
    assert sorted(c.key for c in checks["solution"]) == sorted(grading.points)
    assert check.score(grading, checks["solution"]) == (check.total(grading),) * 2
    assert check.score(grading, checks["start"])[0] == 0


def test_every_solution_is_of_a_task():
    assert sorted(p.parent.name for p in (REPO / "solutions").glob("*/train.py")) == SOLVED
