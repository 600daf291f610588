"""A graded lab end to end, as GitHub Classroom and Gradescope run it, with local bare git
repositories and a fake /autograder tree (make test-classroom, in CI; about 3 minutes on 2
cores: four real gradings of lesson 3).

GitHub Classroom: the teacher's copy of the course at its tag, a students' repository written
by `make student-template` and pushed, a student's push of the untouched exercise and then of
the solution; each push graded by playing the students' .github/workflows/classroom.yml step
by step, as GitHub Actions would: the checkout, the grading step's own script, every
autograding-command-grader step with exactly the environment that action gives its command
(PATH and HOME, nothing else), and the grading reporter's sum of their points. What cannot
run here: actions/setup-python and the install step (PyTorch's index is out of reach; the
course's own environment stands in for them), and GitHub itself.

Gradescope: `make gradescope`'s zip unpacked as Gradescope's image build does
(/autograder/source, run_autograder copied to /autograder), a submission in
/autograder/submission, run_autograder run, its results.json read. setup.sh (uv and PyPI, as
root) is not run here.
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

from accelerate_course import check, classroom, published, running
from conftest import REPO, STEPS, offline_env

pytestmark = pytest.mark.skipif(os.environ.get("COURSE_CLASSROOM_TEST") != "1",
                                reason="four real gradings: make test-classroom")
STEP = 3
TAG = published.version_tag()
VENV_BIN = str(Path(sys.executable).parent)


def git(*words, cwd):
    result = subprocess.run(["git", *words], cwd=cwd, capture_output=True, text=True,
                            env={**os.environ, "GIT_AUTHOR_NAME": "s", "GIT_AUTHOR_EMAIL": "s@x",
                                 "GIT_COMMITTER_NAME": "s", "GIT_COMMITTER_EMAIL": "s@x"})
    assert result.returncode == 0, result.stderr
    return result.stdout


def run_to_end(args, timeout, **popen):
    """Run a command as the course runs its launches (running.run: a process group of its own,
    so that one Ctrl-C or SIGTERM to the tests stops it and all it started); return (exit
    code, its output, stdout and stderr together)."""
    with tempfile.TemporaryFile("w+") as out:
        [process] = running.run([(args, dict(stdout=out, stderr=subprocess.STDOUT, text=True,
                                             **popen))], seconds=timeout)
        out.seek(0)
        return process.returncode, out.read()


def teacher_repository(tmp_path):
    """The teacher's published course: this working tree's files (committed or not, as
    `git ls-files` lists them), committed and tagged, as a bare repository."""
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
    return f"file://{tmp_path / 'teacher.git'}"


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
    env = {"PATH": os.environ["PATH"], "FORCE_COLOR": "true", "DOTNET_CLI_HOME": "/tmp",
           "DOTNET_NOLOGO": "true", "HOME": os.environ["HOME"]}
    env["PATH"] = f"{VENV_BIN}:{env['PATH']}"  # setup-python's python first, as on a runner
    code, output = run_to_end(["bash", "-c", inputs["command"]], cwd=workspace, env=env,
                              timeout=float(inputs.get("timeout", 10)) * 60)
    status = "pass" if code == 0 else "fail"
    max_score = int(inputs.get("max-score") or 0)
    result = {"version": 1, "status": status, "max_score": max_score,
              "tests": [{"name": inputs["test-name"], "status": status,
                         "score": max_score if status == "pass" else 0,
                         "message": output, "test_code": inputs["command"],
                         "filename": "", "line_no": 0, "duration": 0}]}
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
    results.json, the command-graders' messages)."""
    workspace = tmp_path / f"runner-{name}"
    git("clone", "--quiet", student_repository, str(workspace), cwd=tmp_path)  # Checkout code
    workflow = yaml.safe_load((workspace / ".github" / "workflows" / "classroom.yml").read_text())
    job = workflow["jobs"]["run-autograding-tests"]
    outputs, messages = {}, {}
    for step in job["steps"]:
        uses = step.get("uses", "")
        if uses.startswith(("actions/checkout", "actions/setup-python")) or \
                step["name"].startswith("Install"):
            continue  # done above, or by this environment (the module docstring says why)
        if "run" in step:
            env = offline_env(PATH=f"{VENV_BIN}:{os.environ['PATH']}",
                              GITHUB_WORKSPACE=str(workspace), COURSE_TOKEN="")
            code, output = run_to_end(["bash", "-e", "-c", step["run"]], cwd=workspace,
                                      env=env, timeout=900)
            print(f"\n--- {name}: {step['name']}\n{output[-4000:]}")
            assert code == 0, output
        elif uses == "classroom-resources/autograding-command-grader@v1":
            outputs[step["id"]] = command_grader(step["with"], workspace)
            result = json.loads(base64.b64decode(outputs[step["id"]]))
            messages[step["with"]["test-name"]] = result["tests"][0]["message"].strip()
        elif uses == "classroom-resources/autograding-grading-reporter@v1":
            points, out_of = grading_reporter(step, outputs)
        else:
            pytest.fail(f"a step this test does not play: {step}")
    print(f"--- {name}: Points {points}/{out_of}\n" + "\n".join(messages.values()))
    return points, out_of, json.loads((workspace / "results.json").read_text()), messages


@pytest.mark.runs
def test_a_classroom_lab_scores_each_check_and_holds_no_solution(tmp_path):
    # the teacher: the course published at its tag; the students' repository written from it
    course = teacher_repository(tmp_path)
    template = tmp_path / "template"
    made = subprocess.run([sys.executable, "-m", "accelerate_course.classroom", "template",
                           str(STEP), str(template), "--course", course],
                          capture_output=True, text=True, cwd=REPO)
    assert made.returncode == 0, made.stderr
    files = sorted(str(p.relative_to(template)) for p in template.rglob("*") if p.is_file())
    print("\n".join(["", made.stdout.strip(), *files]))
    # nothing of the solution: no step 3, none of the code lines lesson 3 adds in any file
    assert not (template / "step3_distributed_eval").exists()
    assert not (template / "accelerate_course" / "check.py").exists()
    wanted = added_code_lines(STEP)
    assert len(wanted) >= 10, wanted  # the lesson's gather, cut, print, writer, end: found
    for path in template.rglob("*"):
        if path.is_file() and path.suffix in {".py", ".md", ".yml", ".json", ".toml", ""}:
            lines = {line.split("  #")[0].strip() for line in path.read_text().splitlines()}
            assert not wanted & lines, (path, wanted & lines)
    git("init", "--quiet", "-b", "main", cwd=template)
    git("add", "-A", cwd=template)
    git("commit", "--quiet", "-m", "lab 3", cwd=template)
    git("clone", "--quiet", "--bare", str(template), str(tmp_path / "student.git"), cwd=tmp_path)
    student = f"file://{tmp_path / 'student.git'}"

    # a student pushes the untouched exercise, then the lesson's own step 3 as the solution
    work = tmp_path / "student"
    git("clone", "--quiet", student, str(work), cwd=tmp_path)
    git("commit", "--quiet", "--allow-empty", "-m", "started", cwd=work)
    git("push", "--quiet", "origin", "HEAD", cwd=work)
    untouched, out_of, untouched_json, untouched_messages = autograde(tmp_path, student, "untouched")
    shutil.copy(STEPS[STEP], work / "exercises" / f"step{STEP}" / "train.py")
    git("commit", "--quiet", "-am", "lesson 3 done", cwd=work)
    git("push", "--quiet", "origin", "HEAD", cwd=work)
    solved, _, solved_json, _ = autograde(tmp_path, student, "solved")

    assert out_of == check.total(STEP) == 10
    # each command-grader step scores its check of the one grading: the reporter's sum is
    # results.json's score, on both pushes
    assert (untouched, solved) == (untouched_json["score"], solved_json["score"])
    assert solved == out_of and all(t["status"] == "passed" for t in solved_json["tests"])
    assert 0 < untouched < out_of
    # a failed check's step says why, in the check's own hint
    failed = [t for t in untouched_json["tests"] if t["status"] == "failed"]
    assert failed and all(f"hint: {t['output']}" in untouched_messages[t["extra_data"]["check"]]
                          for t in failed)


def fake_autograder(tmp_path, archive, submission=None):
    """A folder laid out as Gradescope lays out /autograder for one submission: the zip in
    source/, run_autograder copied beside it (its Dockerfile's cp), the submission's files."""
    root = tmp_path / "autograder"
    shutil.rmtree(root, ignore_errors=True)
    with zipfile.ZipFile(archive) as zipped:
        assert {"setup.sh", "run_autograder"} <= set(zipped.namelist())  # at the zip's root
        zipped.extractall(root / "source")
    shutil.copy(root / "source" / "run_autograder", root / "run_autograder")
    (root / "run_autograder").chmod(0o755)
    (root / "submission").mkdir()
    if submission:
        shutil.copy(submission, root / "submission" / "train.py")
    code, output = run_to_end([str(root / "run_autograder")], cwd=root, timeout=900,
                              env=offline_env(AUTOGRADER=str(root),
                                              AUTOGRADER_PYTHON=sys.executable))
    assert code == 0, output
    results = json.loads((root / "results" / "results.json").read_text())
    print(f"\n--- run_autograder, {submission or 'no train.py'}\n{output[-1500:]}"
          f"results.json:\n{json.dumps(results, indent=1)}")
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
def test_gradescope_run_autograder_writes_results_json(tmp_path):
    out = tmp_path / "gradescope"
    made = subprocess.run([sys.executable, "-m", "accelerate_course.classroom", "gradescope",
                           str(STEP), str(out)], capture_output=True, text=True, cwd=REPO)
    assert made.returncode == 0, made.stderr
    archive = out / "autograder.zip"
    setup = zipfile.ZipFile(archive).read("setup.sh").decode()
    assert "download.pytorch.org/whl/cpu" in setup and "uv venv --python 3.11" in setup

    missing = fake_autograder(tmp_path, archive)
    assert missing["score"] == 0 and "no train.py" in missing["output"]
    exercise = tmp_path / "exercise.py"
    exercise.write_text(classroom.exercise.exercise(STEP))
    untouched = fake_autograder(tmp_path, archive, exercise)
    lesson = fake_autograder(tmp_path, archive, STEPS[STEP])
    for results in (untouched, lesson):
        assert_gradescope_schema(results)
        assert sum(test["max_score"] for test in results["tests"]) == check.total(STEP)
    assert 0 < untouched["score"] < check.total(STEP) == lesson["score"]
