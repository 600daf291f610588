"""How checks become points (accelerate_course/check.py): partial credit by default, a
prerequisite that keeps every check from scoring, the teacher's core gate, and a check
reported from inside the run that scores only once every check measured from outside passes;
a passed check that scores nothing always says why. Unit tests: no run."""

from pathlib import Path

from accelerate_course import check

LESSON3 = check.grading_of("3")


def checks(failed=()):
    """Every check of lesson 3, passed except those named in failed."""
    return [
        check.check(key, key not in failed, "why it failed", n=2, steps=30, split="408", batch="5")
        for key in LESSON3.points
    ]


def test_each_check_scores_its_points_when_it_passes():
    graded = checks(failed=["whole_split"])
    points = check.points(LESSON3, graded)
    # partial credit: 10 - 3 for the one outside check that failed; the checks reported from
    # inside wait for every outside check
    assert points["own_predictions"] == 2 and points["one_writer"] == 1
    assert points["two_machines"] == 2 and points["whole_split"] == 0
    assert points["one_printer"] == points["left_group"] == 0
    assert check.score(LESSON3, graded) == (5, 10)


def test_a_check_reported_from_inside_scores_once_every_outside_check_passes():
    graded = checks(failed=["left_group"])
    assert check.score(LESSON3, graded) == (9, 10)
    assert check.points(LESSON3, graded)["one_printer"] == 1


def test_a_failed_prerequisite_keeps_every_check_from_scoring():
    graded = checks(failed=["trained"])
    assert check.score(LESSON3, graded) == (0, 10)
    assert check.no_points_reason(LESSON3, graded).startswith("No points, because a prerequisite")


def test_the_core_gate_is_the_teachers_choice():
    graded = checks(failed=["one_writer"])
    assert check.score(LESSON3, graded) == (7, 10)  # one_printer and left_group wait
    assert check.score(LESSON3, graded, core_gate=True) == (0, 10)
    assert check.no_points_reason(LESSON3, graded) == ""
    assert "a check the lesson exists for failed" in check.no_points_reason(
        LESSON3, graded, core_gate=True
    )


def test_results_json_never_shows_a_passed_check_with_no_points_without_saying_why():
    for failed in (["whole_split"], ["trained"], ["one_writer"], []):
        for gate in (False, True):
            results = check.results(LESSON3, Path("train.py"), checks(failed=failed), 30, gate)
            for test in results["tests"]:
                if test["status"] == "passed" and test["score"] < test["max_score"]:
                    assert test["output"], (failed, gate, test)
            assert results["score"] == sum(test["score"] for test in results["tests"])


def test_the_lessons_table_says_which_checks_are_measured_from_outside():
    results = check.results(LESSON3, Path("train.py"), checks(), 30)
    measured = {
        test["extra_data"]["check"]: test["extra_data"]["measured"] for test in results["tests"]
    }
    assert measured["own_predictions"] == measured["one_writer"] == "from outside the run"
    assert measured["one_printer"] == "reported from inside the run"


def test_a_file_with_no_main_is_refused_before_anything_runs(tmp_path):
    # an empty file, or one whose main() was lost: the grader runs a file's main(); said in
    # one line before any launch (it once ran, and stopped with "KeyError: 'main'")
    empty, no_main = tmp_path / "empty.py", tmp_path / "no_main.py"
    empty.write_text("\n")
    no_main.write_text("def training_function(args):\n    pass\n")
    for path, what in ((empty, "is empty"), (no_main, "defines no main() function")):
        [refused] = check.before_launch(path)
        assert refused.key == "has_main" and not refused.passed
        assert refused.hint.startswith(f"{path} {what}: the grader runs a file's main()")
    assert (
        check.before_launch(Path(__file__).parents[1] / "step3_distributed_eval" / "train.py") == []
    )
