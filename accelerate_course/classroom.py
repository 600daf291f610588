"""A graded lab, for a teacher: the repository a class clones, and a Gradescope autograder.

    python -m accelerate_course.classroom template 3 OUT    (make student-template STEP=3 OUT=...)
    python -m accelerate_course.classroom gradescope 3 OUT  (make gradescope STEP=3 OUT=...)

template: the students' repository for lesson N with nothing of its solution (the steps before
N, the exercise, the lesson's text, what runs it, a dev container) and a
.github/workflows/classroom.yml in GitHub Classroom's own form, which grades each push once
with the teacher's copy of the course at its tag and scores each check as a step of its own.
gradescope: setup.sh and run_autograder at a zip's root, the teacher's copy beside them;
run_autograder writes /autograder/results/results.json (check.results). docs/teaching.md.
"""

import argparse
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from accelerate_course import check, exercise, install, published
from accelerate_course.steps import (FOLDERS, REPO, TRAIN_PY, docstring_end, lesson_hunks,
                                     lesson_lines)

RESULT_SCRIPT = '''"""One check of results.json as an exit code, for an autograding step: 0 when it passed.

    python .github/classroom/check_result.py results.json "own share"

It prints the check's own hint when it failed (the grade stopped before it: the reason).
"""
import json
import sys

path, key = sys.argv[1], sys.argv[2]
try:
    tests = json.load(open(path))["tests"]
except (OSError, ValueError) as error:
    sys.exit(f"no grade ({path}: {error}); see the step that graded the exercise")
found = [t for t in tests if t.get("extra_data", {}).get("check") == key]
if not found:  # the grade stopped before this check: its first test says why
    sys.exit(f"not graded: {tests[0]['name']}: {tests[0]['output']}" if tests else "no grade")
test = found[0]
print(f"{test['name']}: {test['score']} of {test['max_score']} points")
if test["status"] != "passed":
    sys.exit(f"hint: {test['output']}")
'''


def lesson_text(step):
    """Return the what and why of lesson N: its page's prose before the lesson's diff, without
    its asides about the page's tables (the lab has none)."""
    page = (REPO / FOLDERS[step] / "README.md").read_text()
    prose = page.split("<!-- BEGIN", 1)[0].strip().split("\n\n")
    text = "\n\n".join(part for part in prose[1:] if not part.startswith(("[The course]",
                                                                          "*In class:*")))
    return re.sub(r" \([^()]*\btable\b[^()]*\)", "", text)


def solution_lines(step):
    """Return the code lines lesson `step` adds (their inline comments off, stripped): the
    lines of the solution, none of which a students' repository may hold. A line the previous
    step already has, a comment and a line of punctuation alone are not the solution's."""
    before, after = lesson_lines(step)
    known = {line.split("  #")[0].strip() for line in before}
    code = docstring_end(after) + 1
    added = (after[j].split("  #")[0].strip() for hunk in lesson_hunks(step)
             for j in range(max(hunk.j1, code), hunk.j2))
    return sorted({line for line in added if line not in known and not line.startswith("#")
                   and any(c.isalnum() for c in line)})


def solution_found(step, folder):
    """Return ["path: line", ...] for each solution line in a text file under folder."""
    wanted = solution_lines(step)
    found = []
    for path in sorted(Path(folder).rglob("*")):
        try:
            lines = {line.split("  #")[0].strip() for line in path.read_text().splitlines()}
        except (IsADirectoryError, UnicodeDecodeError):
            continue
        found += [f"{path.relative_to(folder)}: {line}" for line in wanted if line in lines]
    return found


def run_command(step):
    """Return the command that runs the exercise (the step's own, with the exercise's path)."""
    return exercise.run_command(step, Path("exercises") / f"step{step}" / "train.py")


def workflow(step, repository, tag):
    """Return .github/workflows/classroom.yml for a lab on lesson `step`."""
    token_url = repository.replace("https://github.com/", "https://x-access-token:${COURSE_TOKEN}@github.com/")
    graders, reporter = [], []
    for number, (key, worth) in enumerate(check.POINTS[step].items(), start=1):
        graders.append(f"""    - name: {key} ({worth} point{'s' if worth > 1 else ''})
      id: check-{number}
      uses: classroom-resources/autograding-command-grader@v1
      with:
        test-name: {key}
        command: python .github/classroom/check_result.py results.json "{key}"
        timeout: 1
        max-score: {worth}""")
        reporter.append(f'        CHECK-{number}_RESULTS: "${{{{steps.check-{number}.outputs.result}}}}"')
    runners = ",".join(f"check-{n}" for n in range(1, len(graders) + 1))
    torch = install.pinned_torch()
    return f"""name: Autograding Tests
# Written by make student-template (accelerate_course/classroom.py) for lesson {step}. The
# checks and the lesson's reference come from the teacher's copy of the course at {tag}
# (set its repository's secret COURSE_TOKEN to a read token if that copy is private); the
# exercise is graded once, then each check is scored by a step of its own.
'on':
- push
- repository_dispatch
permissions:
  checks: write
  actions: read
  contents: read
jobs:
  run-autograding-tests:
    runs-on: ubuntu-latest
    timeout-minutes: 30
    if: github.actor != 'github-classroom[bot]'
    steps:
    - name: Checkout code
      uses: actions/checkout@v4
    - name: Set up Python
      uses: actions/setup-python@v5
      with:
        python-version: '3.11'
        cache: pip
        cache-dependency-path: requirements.txt
    - name: Install the course's packages (PyTorch's CPU build)
      run: |
        python -m pip install {torch} --index-url https://download.pytorch.org/whl/cpu
        python -m pip install -r requirements.txt
        python -m pip install --no-deps -e .
    - name: Grade the exercise with the teacher's copy of the checks
      env:
        COURSE_TOKEN: ${{{{ secrets.COURSE_TOKEN }}}}
      run: |
        url="{repository}"
        if [ -n "$COURSE_TOKEN" ]; then url="{token_url}"; fi
        git -c advice.detachedHead=false clone --quiet --depth 1 --branch {tag} "$url" .course
        cd .course && PYTHONPATH="$PWD" python -m accelerate_course.check {step} \\
          "$GITHUB_WORKSPACE/exercises/step{step}/train.py" --json "$GITHUB_WORKSPACE/results.json" || true
{chr(10).join(graders)}
    - name: Autograding Reporter
      uses: classroom-resources/autograding-grading-reporter@v1
      env:
{chr(10).join(reporter)}
      with:
        runners: {runners}
"""


def readme(step, repository, tag):
    """Return the students' README: the lesson, the task, how it is graded."""
    rows = "\n".join(f"| {key} | {worth} |" for key, worth in check.POINTS[step].items())
    title = TRAIN_PY[step].read_text().splitlines()[0].strip('"').split(": ", 1)[1]
    return f"""# Lab: lesson {step} of the course: {title}

{lesson_text(step)}

## Your task

`exercises/step{step}/train.py` is step {step - 1} (`{FOLDERS[step - 1]}/train.py`), with a
`# TODO step {step}:` comment where each change of lesson {step} goes. Make the changes, run it,
and commit it:

```bash
make install     # .venv with the course's packages (PyTorch's CPU build on a machine without a GPU)
source .venv/bin/activate
{run_command(step)}
make check       # grades it as the class's autograder does
```

## How it is graded

Every push runs `.github/workflows/classroom.yml`: it clones the teacher's copy of the
course ({repository or 'the teacher names it'}, at `{tag}`), runs your file where the lesson
runs, measures it from inside every process, and scores each check:

| check | points |
|---|---|
{rows}
| **total** | **{check.total(step)}** |

A check that fails says why, measured from your run (`make check` prints the same lines).
"""


MAKEFILE = """# The lab's commands: make install, make check
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH ?= auto
STEP := {step}
COURSE_REPOSITORY := {repository}
COURSE_TAG := {tag}

.PHONY: install check

$(BIN)/.installed: requirements.txt pyproject.toml
	$(PYTHON) -m accelerate_course.install --venv $(VENV) --torch $(TORCH)
	touch $@

install: $(BIN)/.installed

# the teacher's copy of the checks (and of the lesson's reference), at the lab's tag
.course:
	git -c advice.detachedHead=false clone --quiet --depth 1 --branch $(COURSE_TAG) $(COURSE_REPOSITORY) .course

check: install .course
	cd .course && PYTHONPATH=$(CURDIR)/.course $(CURDIR)/$(BIN)/python -m accelerate_course.check \\
		$(STEP) $(CURDIR)/exercises/step$(STEP)/train.py $(if $(JSON),--json $(abspath $(JSON)))
"""

PYPROJECT = """[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "accelerate-course-lab"
version = "{version}"
description = "A graded lab of the course: lesson {step}"
requires-python = ">=3.11"

[tool.setuptools]
packages = ["common", "common.embedded", "common.glue_mrpc"]

[tool.setuptools.package-data]
"common.embedded" = ["data/*.jsonl", "sst2/*.jsonl", "checkpoint/*"]
"common.glue_mrpc" = ["*.py"]
"""


def copy_tree(source, target):
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def template(step, out, repository=None, tag=None):
    """Write the students' repository for a lab on lesson `step` into out; return its files."""
    repository, tag = repository or published.named_repository(), tag or published.version_tag()
    if not repository:
        sys.exit("error: the lab grades with the teacher's copy of the course, and it has no "
                 "address yet: publish it (docs/publishing.md) and set repository in "
                 "pyproject.toml, or give it: ARGS=\"--course https://github.com/<owner>/<course>\"")
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        sys.exit(f"error: {out} is not empty; give a new folder (make student-template "
                 f"STEP={step} OUT=...)")
    out.mkdir(parents=True, exist_ok=True)
    copy_tree(REPO / "common", out / "common")
    copy_tree(REPO / "configs", out / "configs")
    for earlier in range(1, step):
        (out / FOLDERS[earlier]).mkdir()
        shutil.copy(TRAIN_PY[earlier], out / FOLDERS[earlier] / "train.py")
    (out / "accelerate_course").mkdir()  # make install's own code, and nothing of the checks
    for name in ("__init__.py", "install.py", "torch_build.py"):
        shutil.copy(REPO / "accelerate_course" / name, out / "accelerate_course" / name)
    (out / "accelerate_course" / "__init__.py").write_text(
        '"""make install\'s code (install.py, torch_build.py): the checks are the teacher\'s."""\n')
    shutil.copy(REPO / "requirements.txt", out / "requirements.txt")
    (out / ".devcontainer").mkdir()
    shutil.copy(REPO / ".devcontainer" / "devcontainer.json", out / ".devcontainer")
    version = tag.lstrip("v")
    (out / "pyproject.toml").write_text(PYPROJECT.format(version=version, step=step))
    (out / "Makefile").write_text(MAKEFILE.format(step=step, repository=repository, tag=tag))
    (out / ".gitignore").write_text(".venv/\n.course/\noutputs/\n__pycache__/\n*.egg-info/\n"
                                    "results.json\n")
    (out / "exercises" / f"step{step}").mkdir(parents=True)
    (out / "exercises" / f"step{step}" / "train.py").write_text(exercise.exercise(step))
    (out / "README.md").write_text(readme(step, repository, tag))
    (out / ".github" / "workflows").mkdir(parents=True)
    (out / ".github" / "workflows" / "classroom.yml").write_text(workflow(step, repository, tag))
    (out / ".github" / "classroom").mkdir()
    (out / ".github" / "classroom" / "check_result.py").write_text(RESULT_SCRIPT)
    found = solution_found(step, out)
    if found:  # the lesson's text or a copied file holds a line of the solution: no template
        shutil.rmtree(out)
        sys.exit(f"error: the students' repository would hold lesson {step}'s solution "
                 f"({found[0]}); nothing was written")
    return sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())


SETUP_SH = """#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image. Its default image
# is Ubuntu 22.04, whose python3 is 3.10 and whose own python3.11 package is a release
# candidate (3.11.0~rc1): uv installs a released Python 3.11 instead, then the course's
# packages with PyTorch's CPU build, and the teacher's copy of the course beside this file
# (AUTOGRADER and TORCH_INDEX: for a test outside Gradescope, a folder laid out as /autograder
# and another index of torch's CPU build)
set -euo pipefail
AUTOGRADER=${{AUTOGRADER:-/autograder}}
TORCH_INDEX=${{TORCH_INDEX:-https://download.pytorch.org/whl/cpu}}
COURSE="$AUTOGRADER/source/course"
python3 -m pip install --quiet uv
python3 -m uv venv --python 3.11 "$AUTOGRADER/venv"
VENV_PYTHON="$AUTOGRADER/venv/bin/python"
python3 -m uv pip install --python "$VENV_PYTHON" {torch} --index-url "$TORCH_INDEX"
python3 -m uv pip install --python "$VENV_PYTHON" -r "$COURSE/requirements.txt"
python3 -m uv pip install --python "$VENV_PYTHON" --no-deps -e "$COURSE"
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this for every submission: the submitted train.py graded as step {step} by the
# teacher's copy of the course's checks; the grade in $AUTOGRADER/results/results.json
# (AUTOGRADER and AUTOGRADER_PYTHON: for a test outside Gradescope, a folder laid out as
# /autograder and the Python to grade with)
set -uo pipefail
AUTOGRADER=${{AUTOGRADER:-/autograder}}
PYTHON=${{AUTOGRADER_PYTHON:-$AUTOGRADER/venv/bin/python}}
RESULTS="$AUTOGRADER/results/results.json"
mkdir -p "$AUTOGRADER/results"
submitted=$(find "$AUTOGRADER/submission" -name train.py -type f | head -n 1)
if [ -z "$submitted" ]; then
    echo '{{"score": 0, "output": "no train.py in the submission: upload exercises/step{step}/train.py", "tests": []}}' > "$RESULTS"
    exit 0
fi
cd "$AUTOGRADER/source/course"
PYTHONPATH="$PWD" "$PYTHON" -m accelerate_course.check {step} "$submitted" --json "$RESULTS" \\
    --time-limit {time_limit}
if [ ! -s "$RESULTS" ]; then
    echo '{{"score": 0, "output": "the grader could not run: see the autograder output", "tests": []}}' > "$RESULTS"
fi
exit 0
"""


def gradescope(step, out, time_limit=600):
    """Write Gradescope's autograder for lesson `step` into out (and out/autograder.zip);
    return the zip's path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    course = out / "course"
    if course.exists():
        shutil.rmtree(course)
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.split()
    for name in files:
        if (REPO / name).is_file():
            (course / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, course / name)
    (out / "setup.sh").write_text(SETUP_SH.format(torch=install.pinned_torch()))
    (out / "run_autograder").write_text(RUN_AUTOGRADER.format(step=step, time_limit=time_limit))
    for name in ("setup.sh", "run_autograder"):
        (out / name).chmod(0o755)
    archive = out / "autograder.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zipped:
        for path in sorted([out / "setup.sh", out / "run_autograder", *course.rglob("*")]):
            if path.is_file():
                zipped.write(path, path.relative_to(out))
    return archive


def main():
    parser = argparse.ArgumentParser(prog="python -m accelerate_course.classroom",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["template", "gradescope"])
    parser.add_argument("step", type=int, choices=[2, 3, 4])
    parser.add_argument("out", type=Path)
    parser.add_argument("--course", help="the teacher's repository (default: pyproject.toml's)")
    args = parser.parse_args()
    if args.what == "template":
        files = template(args.step, args.out, args.course)
        print(f"wrote the students' repository for lesson {args.step} into {args.out}: "
              f"{len(files)} files, none with any of the {len(solution_lines(args.step))} "
              f"code lines lesson {args.step} adds")
        print("next: make it a git repository, push it to GitHub, mark it a template "
              "repository and make it the assignment's starter code (docs/teaching.md)")
    else:
        archive = gradescope(args.step, args.out)
        print(f"wrote Gradescope's autograder for lesson {args.step}: {archive} (upload it "
              "as the assignment's autograder; docs/teaching.md says which settings it needs)")


if __name__ == "__main__":
    main()
