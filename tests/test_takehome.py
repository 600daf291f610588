"""Take-home tasks (takehome/): the lesson applied to another loop, graded by the lesson's own
measured checks, with a solution in no file of the course. The solution is built here, at test
time, by applying lesson 3 to the task's starting script mechanically
(tests/helpers/lesson_applied.py); so are the known mistakes. All of them graded in one set of
launches, as make check TASK=... grades one file (about 2 minutes on 2 cores)."""

import subprocess

import pytest
from conftest import REPO
from lesson_applied import added_lines, applied

from accelerate_course import check, takehome
from accelerate_course.steps import TRAIN_PY

TASK = "sst2-losses"
START = takehome.tasks()[TASK].start.read_text()

# name -> (the file, the check that must fail, its hint): each mistake a student makes
MISTAKES = {
    # gathered, but the duplicated tail kept
    "no_cut": (
        applied(START, gather="gather"),
        "whole_split",
        "the main process scored 406 predictions for 400 sentences: the duplicated tail "
        "was counted",
    ),
    # predictions and labels gathered, each sentence's loss not: the loss of one share
    "losses_not_gathered": (
        applied(START, skip="sentence_losses"),
        "eval_loss",
        "the mean over the 400 sentences of the split is",
    ),
    "every_process_writes": (
        applied(START, writer=None),
        "one_writer",
        "metrics.json was written 2 times; the model was saved 2 times",
    ),
    # right on one machine only
    "local_main_writes": (
        applied(START, writer="is_local_main_process"),
        "two_machines",
        "metrics.json was written 2 times",
    ),
    # the tail of this setting (6) cut by hand: wrong where the tail is another
    "hardcoded_cut": (
        applied(START, gather="gather")
        .replace("torch.cat(sentence_predictions)", "torch.cat(sentence_predictions)[:-6]")
        .replace("torch.cat(sentence_labels)", "torch.cat(sentence_labels)[:-6]")
        .replace("torch.cat(sentence_losses)", "torch.cat(sentence_losses)[:-6]"),
        "two_machines",
        # (2 machines, batches of 3: 402 gathered, 396 kept)
        "the main process scored 396 predictions; the split has 400 sentences",
    ),
    # the labels written as the predictions: a perfect accuracy, not the model's
    "labels_as_predictions": (
        applied(START).replace(
            '"predictions": predictions.tolist()', '"predictions": labels.tolist()'
        ),
        "own_predictions",
        "of the predictions written differ from what "
        "the model predicts for the split (400 sentences)",
    ),
}


def grade_takehome(folder):
    """{name: (its checks, its score)} for the untouched script, the solution and each mistake."""
    texts = {
        "untouched": START,
        "solution": applied(START),
        **{name: text for name, (text, _, _) in MISTAKES.items()},
    }
    paths = {}
    for name, text in texts.items():
        (folder / name).mkdir()
        paths[name] = folder / name / "train.py"
        paths[name].write_text(text)
    grading = check.grading_of(TASK)
    runs = check.runs_for(grading, paths, folder / "runs")
    result = {}
    for name in paths:
        checks = check.grade(grading, name, runs)
        result[name] = checks, check.score(grading, checks)
    return result


# made while other tests run (tests/helpers/ahead.py)
MADE_AHEAD = {"graded": grade_takehome}


@pytest.fixture(scope="module")
def graded(made_ahead):
    result = made_ahead(grade_takehome)
    for name, (checks, score) in result.items():
        print(
            f"\n{name}: {score} | "
            + " | ".join(f"FAIL {c.key}: {c.hint}" for c in checks if not c.passed)
        )
    return result


def test_the_untouched_script_scores_nothing_and_passes_only_prerequisites(graded):
    checks, score = graded["untouched"]
    task = check.grading_of(TASK)
    prerequisites = {key for key, worth in task.points.items() if worth.kind == check.PREREQUISITE}
    assert {c.key for c in checks if c.passed} == prerequisites
    assert score == (0, 10)


def test_a_solution_built_at_test_time_scores_every_point(graded):
    checks, score = graded["solution"]
    assert all(c.passed for c in checks), [c for c in checks if not c.passed]
    assert sorted(c.key for c in checks) == sorted(check.grading_of(TASK).points)
    assert score == (10, 10)


# each mistake's score with partial credit (out of 10): what its passing checks are worth
MISTAKE_SCORES = {
    "no_cut": 1,
    "losses_not_gathered": 5,
    "every_process_writes": 2,
    "local_main_writes": 7,
    "hardcoded_cut": 5,
    "labels_as_predictions": 3,
}


@pytest.mark.parametrize("name", sorted(MISTAKES))
def test_each_known_mistake_has_its_partial_credit_and_its_hint(graded, name):
    _, key, hint = MISTAKES[name]
    checks, score = graded[name]
    failed = {c.key: c.hint for c in checks if not c.passed}
    assert key in failed and hint in failed[key], failed
    assert score[0] == MISTAKE_SCORES[name] < graded["solution"][1][0]


def solution_lines():
    """Return the lines the task's solution adds that lesson 3's own step does not hold
    (comments off): the task's answer, beyond the lesson every student reads."""
    lesson = {line.split("  #")[0].strip() for line in TRAIN_PY[3].read_text().splitlines()}
    return [line for line in added_lines(START, applied(START)) if line not in lesson]


@pytest.mark.runs
def test_the_solution_is_in_no_file_of_the_course():
    # every line the solution adds to the starting script, beyond lesson 3's own, looked for
    # in every file git tracks (this file and the helper build it without its lines), but
    # a teacher's private copy's solutions/ (accelerate_course/private_copy.py), their place
    wanted = solution_lines()
    assert len(wanted) >= 4, wanted
    files = subprocess.run(
        ["git", "ls-files", "--", ".", ":!solutions/"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    found = []
    for name in files:
        try:
            lines = {line.strip() for line in (REPO / name).read_text().splitlines()}
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue
        found += [(name, line) for line in wanted if line in lines]
    assert found == []


def test_the_task_reads_in_chinese_under_course_lang_zh_cn(monkeypatch):
    # task.toml's title_zh-CN and README.zh-CN.md: what a class with COURSE_LANG=zh-CN reads,
    # in make takehome's line and in the lab's README (accelerate_course/classroom.py)
    from accelerate_course import classroom

    task = takehome.tasks()["sst2-losses"]
    assert task.title_in("zh-CN") != task.title and task.title_in("en") == task.title
    assert task.readme_in("zh-CN").name == "README.zh-CN.md"
    assert task.readme_in("en").name == "README.md"
    english, chinese = task.readme.read_text(), task.readme_in("zh-CN").read_text()
    assert english.count("\n## ") == chinese.count("\n## ")
    grading = check.grading_of("sst2-losses")
    monkeypatch.setenv("COURSE_LANG", "zh-CN")
    lab = classroom.readme(grading, None, "v0")
    assert "## 你的任务" in lab and "简体中文" not in lab.splitlines()[2]
    # the lab's own parts in the class's language too, and only the lab's commands
    assert "## 你的副本，就在这个仓库里" in lab and "## 分数" in lab and "| 检查 | 分数 |" in lab
    assert "make takehome" not in lab and "TASK=" not in lab
    monkeypatch.setenv("COURSE_LANG", "en")
    lab = classroom.readme(grading, None, "v0")
    assert "## Your task" in lab and "简体中文" not in lab
    assert "make takehome" not in lab and "TASK=" not in lab and "<!--" not in lab
