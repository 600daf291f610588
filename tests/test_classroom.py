"""A graded lab end to end, as GitHub Classroom and Gradescope run it, with local bare git
repositories and a fake /autograder tree (make test-classroom, in CI; 6 min 14 s on 2 cores
of an AMD EPYC, family 26, model 2, shared with other work: five real gradings).

GitHub Classroom: the teacher's copy of the course at its tag, a students' repository written
by `make student-template` and pushed, a student's push of the untouched exercise and then of
the solution; each push graded by playing the students' .github/workflows/classroom.yml step
by step, as GitHub Actions would: the checkout, the grading step's own script (its clone of
the grader: only the files .github/classroom/grader-files names), every
autograding-command-grader step with exactly the environment that action gives its command
(PATH and HOME, nothing else), and the grading reporter's sum of their points. Played for
lesson 3, and for the take-home task in Chinese (COURSE_LANG=zh-CN), whose solution is built
at test time and looked for, line by line, in the lab and its grader clone. What cannot run
here: actions/setup-python and the install step (PyTorch's index is out of reach; the
course's own environment stands in for them), and GitHub itself.

Gradescope: `make gradescope`'s zip, built from the teacher's committed course beside
untracked notes, unpacked as Gradescope's image build does (/autograder/source,
run_autograder copied to /autograder), a submission in /autograder/submission under a
browser's second-download name ("train (1).py"), run_autograder run, its results.json read.
setup.sh (uv and PyPI, as root) is not run here.
"""

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest
import yaml
from conftest import REPO, STEPS, enterable_by_others, offline_env

from accelerate_course import check, classroom, published, running

pytestmark = pytest.mark.skipif(
    os.environ.get("COURSE_CLASSROOM_TEST") != "1", reason="five real gradings: make test-classroom"
)
STEP = 3
TASK = "sst2-losses"
TAG = published.version_tag()
VENV_BIN = str(Path(sys.executable).parent)


def git(*words, cwd):
    result = subprocess.run(
        ["git", *words],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "GIT_AUTHOR_NAME": "s",
            "GIT_AUTHOR_EMAIL": "s@x",
            "GIT_COMMITTER_NAME": "s",
            "GIT_COMMITTER_EMAIL": "s@x",
        },
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def run_to_end(args, timeout, **popen):
    """Run a command as the course runs its launches (running.run: a process group of its own,
    so that one Ctrl-C or SIGTERM to the tests stops it and all it started); return (exit
    code, its output, stdout and stderr together)."""
    with tempfile.TemporaryFile("w+") as out:
        [process] = running.run(
            [(args, dict(stdout=out, stderr=subprocess.STDOUT, text=True, **popen))],
            seconds=timeout,
        )
        out.seek(0)
        return process.returncode, out.read()


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    """The teacher's published course: this working tree's files (committed or not, as
    `git ls-files` lists them), committed and tagged in a folder of its own, and a bare
    repository of it that serves partial clones as GitHub does (uploadpack.allowFilter);
    (the folder, the bare repository's file:// URL)."""
    tmp_path = tmp_path_factory.mktemp("teacher")
    work = tmp_path / "teacher"
    names = git("ls-files", "-co", "--exclude-standard", cwd=REPO).split()
    for name in names:
        if (REPO / name).is_file():
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, work / name)
    git("init", "--quiet", "-b", "main", cwd=work)
    git("add", "-A", cwd=work)
    git("commit", "--quiet", "-m", "the course", cwd=work)
    git("tag", TAG, cwd=work)
    git("clone", "--quiet", "--bare", str(work), str(tmp_path / "teacher.git"), cwd=tmp_path)
    git("config", "uploadpack.allowFilter", "true", cwd=tmp_path / "teacher.git")
    return work, f"file://{tmp_path / 'teacher.git'}"


def as_the_teacher(work, *words, **env):
    """Run a course command from the teacher's own folder (its code, not this tree's)."""
    return subprocess.run(
        [sys.executable, "-m", *words],
        capture_output=True,
        text=True,
        cwd=work,
        env=offline_env(PYTHONPATH=str(work), **env),
    )


def added_code_lines(step):
    """The code lines step N has and step N-1 has not, read here from the two files alone
    (not with classroom.solution_lines): what a students' repository must not hold."""

    def code(path):
        lines = path.read_text().split('"""', 2)[2].splitlines()  # after the docstring
        return {line.split("  #")[0].strip() for line in lines}

    added = code(STEPS[step]) - code(STEPS[step - 1])
    return {line for line in added if not line.startswith("#") and re.search(r"\w{3}", line)}


def command_grader(inputs, workspace):
    """classroom-resources/autograding-command-grader@v1 (src/main.js): the command with only
    PATH, HOME and three fixed variables, in the workspace, within `timeout` minutes; pass on
    exit 0, all of max-score or nothing; its output `result`, base64 of its JSON."""
    env = {
        "PATH": os.environ["PATH"],
        "FORCE_COLOR": "true",
        "DOTNET_CLI_HOME": "/tmp",
        "DOTNET_NOLOGO": "true",
        "HOME": os.environ["HOME"],
    }
    env["PATH"] = f"{VENV_BIN}:{env['PATH']}"  # setup-python's python first, as on a runner
    code, output = run_to_end(
        ["bash", "-c", inputs["command"]],
        cwd=workspace,
        env=env,
        timeout=float(inputs.get("timeout", 10)) * 60,
    )
    status = "pass" if code == 0 else "fail"
    max_score = int(inputs.get("max-score") or 0)
    result = {
        "version": 1,
        "status": status,
        "max_score": max_score,
        "tests": [
            {
                "name": inputs["test-name"],
                "status": status,
                "score": max_score if status == "pass" else 0,
                "message": output,
                "test_code": inputs["command"],
                "filename": "",
                "line_no": 0,
                "duration": 0,
            }
        ],
    }
    return base64.b64encode(json.dumps(result).encode()).decode()


def grading_reporter(step, outputs):
    """classroom-resources/autograding-grading-reporter@v1: each runner's result read from the
    env variable <ID upper-cased>_RESULTS its step sets; the points sent to Classroom, the sum
    of the tests' scores of runners with a max_score (notify-classroom.js)."""
    total = maximum = 0
    for runner in step["with"]["runners"].split(","):
        expression = step["env"][f"{runner.strip().upper()}_RESULTS"]
        assert expression == f"${{{{steps.{runner}.outputs.result}}}}", expression
        result = json.loads(base64.b64decode(outputs[runner]))
        if result["max_score"]:
            total += sum(test["score"] for test in result["tests"])
            maximum += result["max_score"]
    return total, maximum


def autograde(tmp_path, student_repository, name):
    """One push graded as GitHub Actions runs the students' classroom.yml: (points, out of,
    results.json, the command-graders' messages, the runner's workspace)."""
    enterable_by_others(tmp_path)
    home = tmp_path / "home"  # the runner's home (/home/runner), not this machine's
    home.mkdir(exist_ok=True)
    workspace = tmp_path / f"runner-{name}"
    git("clone", "--quiet", student_repository, str(workspace), cwd=tmp_path)  # Checkout code
    workflow = yaml.safe_load((workspace / ".github" / "workflows" / "classroom.yml").read_text())
    job = workflow["jobs"]["run-autograding-tests"]
    outputs, messages = {}, {}
    for step in job["steps"]:
        uses = step.get("uses", "")
        if uses.startswith(("actions/checkout", "actions/setup-python")) or step["name"].startswith(
            "Install"
        ):
            continue  # done above, or by this environment (the module docstring says why)
        if "run" in step:
            env = offline_env(
                PATH=f"{VENV_BIN}:{os.environ['PATH']}",
                HOME=str(home),
                GITHUB_WORKSPACE=str(workspace),
                COURSE_TOKEN="",
                **job.get("env", {}),
            )  # the job's env: every run step sees it
            code, output = run_to_end(
                ["bash", "-e", "-c", step["run"]], cwd=workspace, env=env, timeout=900
            )
            print(f"\n--- {name}: {step['name']}\n{output[-4000:]}")
            assert code == 0, output
        elif uses == "classroom-resources/autograding-command-grader@v1":
            outputs[step["id"]] = command_grader(step["with"], workspace)
            result = json.loads(base64.b64decode(outputs[step["id"]]))
            messages[step["with"]["command"].split()[-1]] = result["tests"][0]["message"].strip()
        elif uses == "classroom-resources/autograding-grading-reporter@v1":
            points, out_of = grading_reporter(step, outputs)
        else:
            pytest.fail(f"a step this test does not play: {step}")
    print(f"--- {name}: Points {points}/{out_of}\n" + "\n".join(messages.values()))
    return points, out_of, json.loads((workspace / "results.json").read_text()), messages, workspace


def found_in(lines, *folders):
    """Return ["path: line", ...] for each of the lines (stripped, comments off) in a text file
    under the folders (their .git folders aside: what a student's files and clones hold)."""
    found = []
    for folder in folders:
        for path in sorted(folder.rglob("*")):
            if ".git" in path.relative_to(folder).parts or not path.is_file():
                continue
            try:
                held = {line.split("  #")[0].strip() for line in path.read_text().splitlines()}
            except UnicodeDecodeError:
                continue
            found += [f"{path}: {line}" for line in lines if line in held]
    return found


def play_lab(tmp_path, course, teacher_work, what, solution, **env):
    """Write the lab for `what` from the teacher's course, push it, push the untouched file
    and then the solution; return (the lab's folder, each push's autograde result)."""
    template = tmp_path / "template"
    made = as_the_teacher(
        teacher_work,
        "accelerate_course.classroom",
        "template",
        str(what),
        str(template),
        "--course",
        course,
        **env,
    )
    assert made.returncode == 0, made.stderr
    files = sorted(str(p.relative_to(template)) for p in template.rglob("*") if p.is_file())
    print("\n".join(["", made.stdout.strip(), *files]))
    git("init", "--quiet", "-b", "main", cwd=template)
    git("add", "-A", cwd=template)
    git("commit", "--quiet", "-m", f"lab {what}", cwd=template)
    git("clone", "--quiet", "--bare", str(template), str(tmp_path / "student.git"), cwd=tmp_path)
    student = f"file://{tmp_path / 'student.git'}"
    work = tmp_path / "student"
    git("clone", "--quiet", student, str(work), cwd=tmp_path)
    git("commit", "--quiet", "--allow-empty", "-m", "started", cwd=work)
    git("push", "--quiet", "origin", "HEAD", cwd=work)
    untouched = autograde(tmp_path, student, "untouched")
    exercise = work / classroom.exercise_path(check.grading_of(str(what)))
    exercise.write_text(solution)
    git("commit", "--quiet", "-am", "done", cwd=work)
    git("push", "--quiet", "origin", "HEAD", cwd=work)
    solved = autograde(tmp_path, student, "solved")
    return template, untouched, solved


def assert_the_clone_holds_only_the_graders_files(workspace, template):
    clone = workspace / ".course"
    wanted = [
        line.strip("/")
        for line in (template / ".github" / "classroom" / "grader-files").read_text().split()
    ]
    held = sorted(
        str(p.relative_to(clone))
        for p in clone.rglob("*")
        if p.is_file() and ".git" not in p.relative_to(clone).parts
    )
    assert held and all(any(name == w or name.startswith(w) for w in wanted) for name in held)
    assert not (clone / "tests").exists() and not (clone / "step3_distributed_eval").exists()


@pytest.mark.runs
def test_a_classroom_lab_scores_each_check_and_holds_no_solution(tmp_path, teacher):
    teacher_work, course = teacher
    template, untouched, solved = play_lab(
        tmp_path, course, teacher_work, STEP, STEPS[STEP].read_text()
    )
    points, out_of, untouched_json, untouched_messages, workspace = untouched
    solved_points, _, solved_json, _, _ = solved
    # nothing of the solution: no step 3, none of the code lines lesson 3 adds, in the lab or
    # in the clone of the grader its make check and its workflow make
    assert not (template / "step3_distributed_eval").exists()
    assert not (template / "accelerate_course" / "check.py").exists()
    wanted = added_code_lines(STEP)
    assert len(wanted) >= 10, wanted  # the lesson's gather, cut, print, writer, end: found
    assert found_in(wanted, template, workspace / ".course") == []
    assert_the_clone_holds_only_the_graders_files(workspace, template)

    assert out_of == check.total(check.grading_of(str(STEP))) == 10
    # each command-grader step scores its check of the one grading: the reporter's sum is
    # results.json's score, on both pushes
    assert (points, solved_points) == (untouched_json["score"], solved_json["score"]) == (0, 10)
    assert all(t["status"] == "passed" for t in solved_json["tests"])
    # a check's step says why it scored nothing: its hint, or the check that kept it at 0
    for test in untouched_json["tests"]:
        key = test["extra_data"]["check"]
        if key in untouched_messages:
            assert test["output"] and test["output"] in untouched_messages[key], key


@pytest.mark.runs
def test_a_take_home_lab_in_chinese_holds_no_solution_in_the_lab_or_its_grader(tmp_path, teacher):
    from lesson_applied import applied
    from test_takehome import START, solution_lines

    teacher_work, course = teacher
    template, untouched, solved = play_lab(
        tmp_path, course, teacher_work, TASK, applied(START), COURSE_LANG="zh-CN"
    )
    points, out_of, untouched_json, _, workspace = untouched
    solved_points, _, solved_json, solved_messages, _ = solved
    # the task's solution, built at test time, is in no file the lab or its grader clone holds
    wanted = solution_lines()
    (tmp_path / "solution-lines").write_text("\n".join(wanted) + "\n")
    grep = subprocess.run(
        [
            "grep",
            "-rnF",
            "--exclude-dir=.git",
            "-f",
            str(tmp_path / "solution-lines"),
            str(template),
            str(workspace / ".course"),
        ],
        capture_output=True,
        text=True,
    )
    print(
        f"\n$ grep -rnF --exclude-dir=.git -f solution-lines lab/ lab/.course/\n"
        f"{grep.stdout or '(nothing)'} (exit {grep.returncode})"
    )
    assert grep.returncode == 1 and grep.stdout == ""
    assert_the_clone_holds_only_the_graders_files(workspace, template)
    # the grades, in Chinese, in results.json and in each check's step
    assert (points, out_of, solved_points) == (untouched_json["score"], 10, solved_json["score"])
    assert (points, solved_points) == (0, 10)
    assert untouched_json["output"].endswith("按课后作业“sst2-losses”评分：0 / 10 分。")
    assert solved_messages["one_writer"].startswith("只有一个进程写 metrics.json 和模型: 1 / 1")
    workflow = (template / ".github" / "workflows" / "classroom.yml").read_text()
    assert (
        "COURSE_LANG: 'zh-CN'" in workflow
        and "test-name: '只有一个进程写 metrics.json 和模型'" in workflow
    )


def fake_autograder(tmp_path, archive, submissions=()):
    """A folder laid out as Gradescope lays out /autograder for one submission: the zip in
    source/, run_autograder copied beside it (its Dockerfile's cp), the submission's files
    ({name: source file})."""
    root = tmp_path / "autograder"
    shutil.rmtree(root, ignore_errors=True)
    enterable_by_others(tmp_path)
    with zipfile.ZipFile(archive) as zipped:
        assert {"setup.sh", "run_autograder"} <= set(zipped.namelist())  # at the zip's root
        zipped.extractall(root / "source")
    shutil.copy(root / "source" / "run_autograder", root / "run_autograder")
    (root / "run_autograder").chmod(0o755)
    (root / "submission").mkdir()
    for name, source in dict(submissions).items():
        shutil.copy(source, root / "submission" / name)
    code, output = run_to_end(
        [str(root / "run_autograder")],
        cwd=root,
        timeout=900,
        env=offline_env(AUTOGRADER=str(root), AUTOGRADER_PYTHON=sys.executable),
    )
    assert code == 0, output
    results = json.loads((root / "results" / "results.json").read_text())
    print(
        f"\n--- run_autograder, {dict(submissions) or 'nothing handed in'}\n{output[-1500:]}"
        f"results.json:\n{json.dumps(results, indent=1, ensure_ascii=False)}"
    )
    return results


def assert_gradescope_schema(results):
    """The fields Gradescope's specification names, with their types; the score, the tests'."""
    assert isinstance(results["score"], (int, float)) and isinstance(results["tests"], list)
    for test in results["tests"]:
        assert isinstance(test["name"], str) and isinstance(test["output"], str)
        assert isinstance(test["score"], int) and isinstance(test["max_score"], int)
        assert test["status"] in {"passed", "failed"}
    assert results["score"] == sum(test["score"] for test in results["tests"])


@pytest.mark.runs
def test_gradescope_grades_the_one_py_file_of_any_name_from_the_committed_course(tmp_path, teacher):
    teacher_work, _ = teacher
    # the teacher's folder also holds untracked notes and a scratch solution: not in the zip
    (teacher_work / "notes.md").write_text("my notes for the class\n")
    (teacher_work / "scratch").mkdir(exist_ok=True)
    (teacher_work / "scratch" / "my_solution.py").write_text("# the answer\n")
    out = tmp_path / "gradescope"
    made = as_the_teacher(
        teacher_work, "accelerate_course.classroom", "gradescope", str(STEP), str(out)
    )
    assert made.returncode == 0, made.stderr
    assert "left out: 2 uncommitted or untracked paths" in made.stdout, made.stdout
    archive = out / "autograder.zip"
    names = zipfile.ZipFile(archive).namelist()
    committed = git("ls-files", cwd=teacher_work).split()
    assert sorted(names) == sorted(
        ["setup.sh", "run_autograder", *(f"course/{n}" for n in committed)]
    )
    setup = zipfile.ZipFile(archive).read("setup.sh").decode()
    assert "download.pytorch.org/whl/cpu" in setup and "uv venv --python 3.11" in setup

    missing = fake_autograder(tmp_path, archive)
    assert missing["score"] == 0 and missing["tests"] == []
    assert missing["output"].startswith("no grade: no .py file in ")
    several = fake_autograder(
        tmp_path, archive, {"train.py": STEPS[STEP], "train (1).py": STEPS[STEP]}
    )
    assert several["score"] == 0 and several["output"] == (
        "no grade: 2 .py files were handed in (train (1).py, train.py). Keep only the one to "
        "grade, and hand it in again."
    )
    # a browser's second download of the same file: graded
    lesson = fake_autograder(tmp_path, archive, {"train (1).py": STEPS[STEP]})
    assert_gradescope_schema(lesson)
    assert sum(test["max_score"] for test in lesson["tests"]) == 10 == lesson["score"]
