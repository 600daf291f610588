"""The Makefile on native Windows, simulated: make from Git Bash or MSYS sets OS=Windows_NT, which
is given here on make's command line. What needs only Python (make lesson) runs with `python`,
Windows' own name for it; every other goal stops in one line that names WSL and the plain
`python -m` command of what needs only Python. (Run here on Linux: the Makefile's decisions,
not Windows itself.)"""

import shutil
import subprocess

import pytest
from conftest import REPO

pytestmark = [
    pytest.mark.runs,
    pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make"),
]


def make(*words):
    return subprocess.run(
        ["make", "--no-print-directory", "OS=Windows_NT", *words],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_make_lesson_runs_with_python_on_windows():
    dry = make("-n", "lesson", "STEP=3")
    assert dry.returncode == 0 and dry.stdout.strip() == "python -m accelerate_course.lesson 3"
    ran = make("lesson", "STEP=2", "NO_COLOR=1")
    assert ran.returncode == 0, ran.stderr
    assert "+++ step2_accelerate/train.py" in ran.stdout


@pytest.mark.parametrize("goal", ["course", "check", "test", "exercise"])
def test_every_other_goal_names_wsl_and_the_python_command_in_one_line(goal):
    refused = make(goal)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1
    assert refused.stderr.startswith(
        f"Makefile:11: *** on Windows, make {goal} needs WSL "
        "(Windows Subsystem for Linux): in PowerShell, wsl --install"
    )
    assert "python -m accelerate_course.lesson 3" in refused.stderr
