"""A graded lab, for a teacher: the repository a class clones, and a Gradescope autograder.

    python -m accelerate_course.classroom template 3 OUT
        (make student-template STEP=3 OUT=...)
    python -m accelerate_course.classroom template sst2-losses OUT
        (make student-template TASK=... OUT=...)
    python -m accelerate_course.classroom gradescope 3 OUT
        (make gradescope STEP=3 OUT=...)

What is graded: a lesson (2, 3, 4: its exercise) or a take-home task (takehome/<task>/).
template: the students' repository, with nothing of a lesson's solution (the steps before
it, the exercise or the task's starting script, the text, what runs it, a dev container) and
a .github/workflows/classroom.yml in GitHub Classroom's own form. That workflow grades each
push once with the teacher's copy of the course at its tag, cloned with only the files the
grader needs (.github/classroom/grader-files), and scores each check worth points as a step
of its own. gradescope: setup.sh and run_autograder at a zip's root, the course's committed
files beside them (git archive: nothing untracked, nothing uncommitted); run_autograder grades
the one .py file handed in and writes /autograder/results/results.json (check.results).
The files written come from accelerate_course/templates/; the grader's words are in the
language COURSE_LANG names (accelerate_course/messages.py). docs/teaching.md.
"""

import argparse
import ast
import io
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from accelerate_course import (
    check,
    exercise,
    install,
    lab_runs,
    measuring,
    messages,
    published,
    takehome,
)
from accelerate_course.messages import say
from accelerate_course.steps import (
    FOLDERS,
    REPO,
    TRAIN_PY,
    docstring_end,
    lesson_hunks,
    lesson_lines,
)

TEMPLATES = Path(__file__).resolve().parent / "templates"


def render(name, **values):
    """Return templates/<name> with each {{key}} replaced by its value; a placeholder left
    without a value is an error of the course's own (not of the teacher's input)."""
    path = TEMPLATES / name
    chinese = path.with_name(f"{path.stem}.zh-CN{path.suffix}")  # the class's language's, if any
    if messages.language() == "zh-CN" and chinese.is_file():
        path = chinese
    text = path.read_text(encoding="utf-8")
    for key, value in values.items():
        text = text.replace("{{" + key + "}}", str(value))
    left = re.findall(r"\{\{\w+\}\}", text)
    assert not left, f"{name}: no value for {left}"
    return text


def lesson_text(step):
    """Return the what and why of lesson N: its page's prose before the lesson's diff, without
    its asides about the page's tables (the lab has none)."""
    page = (REPO / FOLDERS[step] / "README.md").read_text()
    prose = page.split("<!-- BEGIN", 1)[0].strip().split("\n\n")
    text = "\n\n".join(
        part for part in prose[1:] if not part.startswith(("[The course]", "*In class:*"))
    )
    return re.sub(r" \([^()]*\btable\b[^()]*\)", "", text)


def solution_lines(step):
    """Return the code lines lesson `step` adds (their inline comments off, stripped): the
    lines of the solution, none of which a students' repository may hold. A line the previous
    step already has, a comment and a line of punctuation alone are not the solution's."""
    before, after = lesson_lines(step)
    known = {line.split("  #")[0].strip() for line in before}
    code = docstring_end(after) + 1
    added = (
        after[j].split("  #")[0].strip()
        for hunk in lesson_hunks(step)
        for j in range(max(hunk.j1, code), hunk.j2)
    )
    return sorted(
        {
            line
            for line in added
            if line not in known and not line.startswith("#") and any(c.isalnum() for c in line)
        }
    )


def solution_found(lines, folder):
    """Return ["path: line", ...] for each of the lines in a text file under folder."""
    found = []
    for path in sorted(Path(folder).rglob("*")):
        try:
            held = {line.split("  #")[0].strip() for line in path.read_text().splitlines()}
        except (IsADirectoryError, UnicodeDecodeError):
            continue
        found += [f"{path.relative_to(folder)}: {line}" for line in lines if line in held]
    return found


# ---- what the grader needs, and nothing more -------------------------------------------


def grader_modules():
    """Return the paths (relative to the course) of the course's own modules the grader runs:
    accelerate_course.check and the lab's driver, and what they import, read from their
    imports (inside functions too)."""
    todo, found = ["accelerate_course.check", "accelerate_course.lab_driver"], set()
    while todo:
        name = todo.pop()
        path = REPO / (name.replace(".", "/") + ".py")
        if name in found or not path.is_file():
            continue
        found.add(name)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "accelerate_course":
                todo += [f"accelerate_course.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "accelerate_course."
            ):
                todo.append(node.module)
            elif isinstance(node, ast.Import):
                todo += [
                    alias.name
                    for alias in node.names
                    if alias.name.startswith("accelerate_course.")
                ]
    return sorted(name.replace(".", "/") + ".py" for name in found)


def reference_steps(grading):
    """Return the steps whose train.py grading runs as a reference."""
    return {2: [1, 2], 3: [] if grading.task else [2], 4: [3]}[grading.lesson]


def grader_files(grading):
    """Return the patterns (git's sparse-checkout, non-cone) of the files the grader needs: its
    modules and words, common/ and configs/, the reference steps, the task's folder."""
    files = [
        "accelerate_course/__init__.py",
        *grader_modules(),
        messages.MESSAGES.relative_to(REPO).as_posix(),
        "common/",
        "configs/",
        *(f"{FOLDERS[step]}/train.py" for step in reference_steps(grading)),
    ]
    if grading.task:
        files.append(f"takehome/{grading.task.name}/")
    return [f"/{name}" for name in dict.fromkeys(files)]


# ---- the students' repository ----------------------------------------------------------


def what_id(grading):
    """Return how the commands name what is graded: the lesson's number, or the task's name."""
    return grading.task.name if grading.task else str(grading.lesson)


def exercise_path(grading):
    """Return the path (in the course and in the lab) of the file a student writes."""
    return f"exercises/{grading.task.name if grading.task else f'step{grading.lesson}'}/train.py"


def run_command(grading):
    """Return the command that runs the student's file (the step's own, or the task's)."""
    if grading.task:
        lines = grading.task.start.read_text().splitlines()
        docstring = "\n".join(lines[: docstring_end(lines)])
        return " ".join(
            docstring.split("Run:", 1)[1].split("\nRead:")[0].replace("\\\n", " ").split()
        )
    return exercise.run_command(grading.lesson, Path(exercise_path(grading)))


def worth_said(worth):
    """Return what a check is worth, in the class's language, for the lab's table."""
    return (
        say("grade.prerequisite")
        if worth.kind == check.PREREQUISITE
        else f"{worth.points} ({say(f'grade.{worth.kind}')})"
    )


def check_names(grading):
    """Return {check key: its name}, in the class's language, its fields filled from the
    grading's own settings; a count measured from a run (a split's share) left out."""
    flags = grading.task.flags if grading.task else lab_runs.SHORT_RUN
    fields = dict(
        n=2,
        steps=measuring.train_steps(flags),
        shares="...",
        split="...",
        batch=grading.task.unseen_batch if grading.task else check.UNSEEN_FLAGS[-1],
    )
    return {
        key: re.sub(r"\s*[(（]\.\.\.[)）]|[:：] ?\.\.\..*", "", say(f"check.{key}", **fields))
        for key in grading.points
    }


def grading_text(grading, repository, tag, core_gate=False):
    """Return the lab README's part on how the work is graded."""
    names = check_names(grading)
    rows = "\n".join(
        f"| {names[key]} | {worth_said(worth)} |" for key, worth in grading.points.items()
    )
    return render(
        "lab/grading.md",
        repository=repository or "the teacher names it",
        tag=tag,
        rows=rows,
        total=check.total(grading),
        scoring=say("grade.lab_scoring_gate") if core_gate else say("grade.lab_scoring"),
    )


def readme(grading, repository, tag, core_gate=False):
    """Return the students' README: the lesson or the task, how to run and check it, the points."""
    if grading.task:
        # the task in the class's language, without the line linking its other language (the
        # lab holds one README)
        text = grading.task.readme_in(messages.language()).read_text()
        text = re.sub(
            r"^(English · \[简体中文\]|\[English\]\(README\.md\) · 简体中文).*\n\n",
            "",
            text,
            flags=re.M,
        )
        # and without what only the course has (its commands, its pages): the lab's own
        # commands follow
        text = re.sub(r"<!-- course only -->.*?<!-- end course only -->\n*", "", text, flags=re.S)
        return render(
            "lab/README-task.md",
            task_text=text,
            exercise=exercise_path(grading),
            run_command=run_command(grading),
            grading=grading_text(grading, repository, tag, core_gate),
        )
    step = grading.lesson
    title = TRAIN_PY[step].read_text().splitlines()[0].strip('"').split(": ", 1)[1]
    return render(
        "lab/README-lesson.md",
        step=step,
        title=title,
        lesson_text=lesson_text(step),
        exercise=exercise_path(grading),
        previous=step - 1,
        previous_folder=FOLDERS[step - 1],
        run_command=run_command(grading),
        grading=grading_text(grading, repository, tag, core_gate),
    )


def grade_flags(core_gate):
    """Return what the lab's grader is given besides the file: the teacher's core gate."""
    return " --core-gate" if core_gate else ""


def workflow(grading, repository, tag, core_gate=False):
    """Return .github/workflows/classroom.yml for a lab: one grading, then one step per check
    worth points, named in the class's language."""
    token_url = repository.replace(
        "https://github.com/", "https://x-access-token:${COURSE_TOKEN}@github.com/"
    )
    names = check_names(grading)
    graders, reporter = [], []
    scored = [(key, worth) for key, worth in grading.points.items() if worth.points]
    for number, (key, worth) in enumerate(scored, start=1):
        graders.append(
            render(
                "lab/grader-step.yml",
                title=names[key].replace("'", "''"),
                points=say("grade.worth", worth=worth.points),
                number=number,
                key=key,
                worth=worth.points,
            ).rstrip("\n")
        )
        reporter.append(
            f'        CHECK-{number}_RESULTS: "${{{{steps.check-{number}.outputs.result}}}}"'
        )
    return render(
        "lab/classroom.yml",
        what=grading.what,
        tag=tag,
        repository=repository,
        grade_flags=grade_flags(core_gate),
        token_url=token_url,
        language=messages.language(),
        torch=install.pinned_torch(),
        what_id=what_id(grading),
        exercise=exercise_path(grading),
        graders="\n".join(graders),
        reporter="\n".join(reporter),
        runners=",".join(f"check-{n}" for n in range(1, len(scored) + 1)),
    )


def copy_tree(source, target):
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def public_loop(grading):
    """End the command in one line where a task's starting script is another task's loop: a
    practice task's answer is public (the course's tests build it), so a copy of its loop
    graded under another name has a public answer too (make private-copy starts a task so)."""
    if not grading.task:
        return
    for other in takehome.tasks().values():
        if (
            other.name != grading.task.name
            and other.answer == "public"
            and other.start.read_bytes() == grading.task.start.read_bytes()
        ):
            sys.exit(
                f"error: takehome/{grading.task.name}/train.py is the loop of "
                f"takehome/{other.name}/, whose answer is public: change the loop (and "
                f"its solution) before a class is graded on it (docs/teaching.md)"
            )


def template(grading, out, repository=None, tag=None, core_gate=False):
    """Write the students' repository for a lab into out; return its files."""
    repository, tag = repository or published.grader_repository(), tag or published.grader_tag()
    public_loop(grading)
    if not repository:
        sys.exit(
            "error: the lab grades with the teacher's copy of the course, and it has no "
            "address yet: publish it (docs/publishing.md) and set repository in "
            'pyproject.toml, or give it: ARGS="--course https://github.com/<owner>/<course>"'
        )
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        sys.exit(
            f"error: {out} is not empty; give a new folder (make student-template ... OUT=...)"
        )
    out.mkdir(parents=True, exist_ok=True)
    copy_tree(REPO / "common", out / "common")
    copy_tree(REPO / "configs", out / "configs")
    for earlier in range(1, grading.lesson):
        (out / FOLDERS[earlier]).mkdir()
        shutil.copy(TRAIN_PY[earlier], out / FOLDERS[earlier] / "train.py")
    (out / "accelerate_course").mkdir()  # make install's own code, and nothing of the checks
    for name in ("install.py", "torch_build.py"):
        shutil.copy(REPO / "accelerate_course" / name, out / "accelerate_course" / name)
    (out / "accelerate_course" / "__init__.py").write_text(
        '"""make install\'s code (install.py, torch_build.py): the checks are the teacher\'s."""\n'
    )
    shutil.copy(REPO / "requirements.txt", out / "requirements.txt")
    (out / ".devcontainer").mkdir()
    shutil.copy(REPO / ".devcontainer" / "devcontainer.json", out / ".devcontainer")
    (out / "pyproject.toml").write_text(
        render("lab/pyproject.toml", version=tag.lstrip("v"), what=grading.what)
    )
    (out / "Makefile").write_text(
        render(
            "lab/Makefile",
            what_id=what_id(grading),
            exercise=exercise_path(grading),
            repository=repository,
            tag=tag,
            language=messages.language(),
            grade_flags=grade_flags(core_gate),
        )
    )
    (out / ".gitignore").write_text(render("lab/gitignore"))
    student_file = out / exercise_path(grading)
    student_file.parent.mkdir(parents=True)
    student_file.write_text(
        grading.task.start.read_text() if grading.task else exercise.exercise(grading.lesson)
    )
    (out / "README.md").write_text(readme(grading, repository, tag, core_gate), encoding="utf-8")
    (out / ".github" / "workflows").mkdir(parents=True)
    (out / ".github" / "workflows" / "classroom.yml").write_text(
        workflow(grading, repository, tag, core_gate), encoding="utf-8"
    )
    (out / ".github" / "classroom").mkdir()
    shutil.copy(TEMPLATES / "lab" / "check_result.py", out / ".github" / "classroom")
    (out / ".github" / "classroom" / "grader-files").write_text(
        "\n".join(grader_files(grading)) + "\n"
    )
    # a lesson's solution is its step: none of its lines in any file written (a task's
    # solution is in no file of the course at all: the tests build one to look for)
    found = [] if grading.task else solution_found(solution_lines(grading.lesson), out)
    if found:
        shutil.rmtree(out)
        sys.exit(
            f"error: the students' repository would hold lesson {grading.lesson}'s "
            f"solution ({found[0]}); nothing was written"
        )
    return sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())


# ---- Gradescope ------------------------------------------------------------------------


def committed_files(source=REPO):
    """Return {path: bytes} of the course's files as its last commit holds them (git archive
    HEAD: nothing untracked, nothing uncommitted), and how many changes were left out. Ends
    the command in one line where the course is not a git repository."""
    archived = subprocess.run(
        ["git", "archive", "--format=tar", "HEAD"], cwd=source, capture_output=True
    )
    if archived.returncode != 0:
        sys.exit(
            f"error: the autograder is built from the course's last commit, and git "
            f"could not read it in {source} ({archived.stderr.decode().strip()}); "
            "make gradescope needs the course as a git repository, its work committed"
        )
    files = {}
    with tarfile.open(fileobj=io.BytesIO(archived.stdout)) as tar:
        for member in tar.getmembers():
            if member.isfile():
                files[member.name] = tar.extractfile(member).read()
    changed = subprocess.run(
        ["git", "status", "--porcelain"], cwd=source, capture_output=True, text=True
    ).stdout.splitlines()
    return files, changed


def gradescope(grading, out, time_limit=600, core_gate=False):
    """Write Gradescope's autograder for a lesson or a task into out (and out/autograder.zip);
    return (the zip's path, the uncommitted changes left out)."""
    public_loop(grading)
    files, changed = committed_files()
    # a private copy's solutions stay out: the grader needs none, and its user may read none
    files = {name: data for name, data in files.items() if not name.startswith("solutions/")}
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    setup = render("gradescope/setup.sh", torch=install.pinned_torch())
    run = render(
        "gradescope/run_autograder",
        what=grading.what,
        what_id=what_id(grading),
        language=messages.language(),
        time_limit=time_limit,
        grade_flags=grade_flags(core_gate),
    )
    for name, text in (("setup.sh", setup), ("run_autograder", run)):
        (out / name).write_text(text)
        (out / name).chmod(0o755)
    archive = out / "autograder.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zipped:
        for name in ("setup.sh", "run_autograder"):
            info = zipfile.ZipInfo(name)
            info.external_attr = 0o755 << 16  # executable once unpacked
            zipped.writestr(info, (out / name).read_text())
        for name, data in sorted(files.items()):
            zipped.writestr(f"course/{name}", data)
    return archive, changed


def main():
    parser = argparse.ArgumentParser(
        prog="python -m accelerate_course.classroom", description=__doc__.splitlines()[0]
    )
    parser.add_argument("command", choices=["template", "gradescope"])
    parser.add_argument("what", help="the lesson (2, 3, 4) or the take-home task")
    parser.add_argument("out", type=Path)
    parser.add_argument("--course", help="the teacher's repository (default: pyproject.toml's)")
    parser.add_argument(
        "--core-gate",
        action="store_true",
        help="grade with the core gate: no check scores while a core check "
        "fails (default: partial credit)",
    )
    args = parser.parse_args()
    messages.language()  # an unknown COURSE_LANG: one line, before anything is written
    grading = check.grading_of(args.what)
    if grading is None:
        sys.exit(
            "error: "
            + say(
                "submission.unknown",
                what=args.what,
                lessons="2, 3, 4",
                tasks=", ".join(takehome.tasks()) or "-",
            )
        )
    if args.command == "template":
        files = template(grading, args.out, args.course, core_gate=args.core_gate)
        lines = (
            ""
            if grading.task
            else (
                f", none with any of the "
                f"{len(solution_lines(grading.lesson))} code lines "
                f"lesson {grading.lesson} adds"
            )
        )
        print(
            f"wrote the students' repository for {grading.what} into {args.out}: "
            f"{len(files)} files{lines}; its grader clone: "
            f"{len(grader_files(grading))} paths (.github/classroom/grader-files)"
        )
        print(
            "next: make it a git repository, push it to GitHub, mark it a template "
            "repository and make it the assignment's starter code (docs/teaching.md)"
        )
    else:
        archive, changed = gradescope(grading, args.out, core_gate=args.core_gate)
        print(
            f"wrote Gradescope's autograder for {grading.what}: {archive} (upload it as the "
            "assignment's autograder; docs/teaching.md says which settings it needs)"
        )
        if changed:
            print(
                f"left out: {len(changed)} uncommitted or untracked paths of the course "
                f"(git status); the zip holds its last commit"
            )


if __name__ == "__main__":
    main()
