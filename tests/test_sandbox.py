"""Where a graded file runs (accelerate_course/sandbox.py): as a user made for its grading,
who can write its scratch folder and nothing of the grader's, and whose every process ends
with the grading, whatever its environment or session. Run for real where the tests run as
root (as Gradescope and the lab's workflow run the grader); skipped elsewhere."""

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import REPO, STEPS

from accelerate_course import check, sandbox

pytestmark = [
    pytest.mark.runs,
    pytest.mark.skipif(
        bool(sandbox.without_root()), reason=f"needs root: {sandbox.without_root()}"
    ),
]


def as_user(user, code, **popen):
    return subprocess.run(
        [sys.executable, "-S", "-c", code],
        capture_output=True,
        text=True,
        cwd="/",
        timeout=60,
        **user.popen(),
        **popen,
    )


def test_the_graded_user_writes_its_scratch_folder_and_nothing_of_the_graders(tmp_path):
    tmp_path.chmod(0o711)
    for folder in tmp_path.parents:
        folder.chmod(folder.stat().st_mode | 0o001)
    with sandbox.GradedUser() as user:
        scratch = user.scratch(tmp_path / "scratch")
        grade = tmp_path / "results.json"
        grade.write_text('{"score": 0}')
        attempts = {
            "scratch": scratch / "a",
            "grade": grade,
            "course": REPO / "accelerate_course" / "check.py",
            "packages": __import__("sysconfig").get_paths()["purelib"] + "/zz.pth",
            "git": REPO / ".git" / "config",
        }
        code = (
            "import sys\nfor name, path in zip(sys.argv[1::2], sys.argv[2::2]):\n"
            "    try:\n        open(path, 'a').close(); print(name, 'written')\n"
            "    except OSError as error: print(name, error.strerror)\n"
        )
        done = subprocess.run(
            [
                sys.executable,
                "-S",
                "-c",
                code,
                *[str(x) for pair in attempts.items() for x in pair],
            ],
            capture_output=True,
            text=True,
            cwd="/",
            **user.popen(),
        )
        said = dict(line.split(" ", 1) for line in done.stdout.splitlines())
        print(f"\n{user.name}: {said}")
        assert said.pop("scratch") == "written"
        assert set(said.values()) == {"Permission denied"}, said
        assert grade.read_text() == '{"score": 0}'
        # it reads the course and the environment
        assert user.can_read([REPO / "accelerate_course" / "lab_driver.py", sys.executable]) is None
    assert not [u for u in __import__("pwd").getpwall() if u.pw_name == user.name]


def test_every_process_of_the_graded_user_ends_whatever_its_environment_or_session():
    with sandbox.GradedUser() as user:
        token = f"left-by-the-graded-user-{os.getpid()}"
        subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(600)", token],
            env={},
            start_new_session=True,
            cwd="/",
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            **user.popen(),
        )
        # and one that outlives its parent (a double fork)
        as_user(
            user,
            "import os, subprocess, sys\nif os.fork() == 0:\n"
            f"    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', "
            f"'{token}'], start_new_session=True, env={{}}, stdout=subprocess.DEVNULL, "
            f"stderr=subprocess.DEVNULL)\n    os._exit(0)\n",
        )
        time.sleep(1)
        left = [p for p in psutil.process_iter(["cmdline"]) if token in (p.info["cmdline"] or [])]
        assert len(left) == 2
        assert user.end_processes() == 2
    assert not [p for p in psutil.process_iter(["cmdline"]) if token in (p.info["cmdline"] or [])]


@pytest.mark.parametrize("lesson", [2, 4])
def test_every_run_of_the_graded_file_runs_as_the_graded_user_and_no_reference_does(
    tmp_path, lesson
):
    # lessons 2 and 4 as lesson 3: the file's runs in launches of their own, as the graded
    # user; the course's references after them, as the grader, in a folder the user cannot
    # read. Who ran each run is who wrote its metrics.json (the file's owner, seen from here).
    for folder in tmp_path.parents:
        folder.chmod(folder.stat().st_mode | 0o001)
    tmp_path.chmod(0o711)
    (tmp_path / "reference").mkdir(mode=0o700)
    (tmp_path / "graded").mkdir(mode=0o755)
    copy = tmp_path / "graded" / "train.py"
    copy.write_text(STEPS[lesson].read_text())
    copy.chmod(0o644)
    grading = check.grading_of(str(lesson))
    with sandbox.GradedUser() as user, user.denied(check.not_read_by_a_graded_run()):
        runs = check.runs_for(grading, {"yours": copy}, tmp_path, user=user)
        graded_uid = user.uid
    writer = {
        (name, run_name): (Path(run.folder) / "output" / "metrics.json").stat().st_uid
        for name, runs_ in runs.items()
        for run_name, run in runs_.items()
    }
    print(f"\nmetrics.json written by uid: {writer}")
    assert writer == {key: graded_uid if key[1] == "yours" else 0 for key in writer}
    assert {key[1] for key in writer} == {"yours", "step1" if lesson == 2 else check.REFERENCE} | (
        {check.REFERENCE} if lesson == 2 else set()
    )
    assert all(
        Path(runs_[name].folder).is_relative_to(tmp_path / "reference")
        for runs_ in runs.values()
        for name in runs_
        if name != "yours"
    )
    assert all(c.passed for c in check.grade(grading, "yours", runs))
