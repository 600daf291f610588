"""A teacher's private copy of the course: a take-home that counts, with its solution and its
tests where no student's clone reaches (docs/teaching.md).

    python -m accelerate_course.private_copy OUT --repository URL --task NAME [--start TASK]
    (make private-copy OUT=../course-private REPOSITORY=https://github.com/<owner>/<private>
     TASK=<name>)

It clones the course (its last commit, with its history) into OUT, and adds:
- takehome/<name>/: the new task, to edit, starting as a copy of a task (--start, default
  the practice task): its starting script, task.toml and README;
- solutions/<name>/train.py: its solution (from a practice task, whose answer is public:
  lesson 3 applied, to edit with the task; from any other, the starting script, to solve);
  the graded user is denied solutions/ (check.not_read_by_a_graded_run), and
  neither a lab's grader clone nor Gradescope's zip holds it;
- tests/test_solutions.py: each task with a solution, graded: the solution scores every
  point, the starting script fewer;
- pyproject.toml's grader-repository and grader-tag: a lab written from the copy
  (make student-template, make gradescope) grades with the copy, at its own tag;
then commits all this and tags it <version>-private. origin is the private repository, public
the published course.
"""

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

from accelerate_course import published, takehome
from accelerate_course.steps import REPO

SOLUTIONS = "solutions"  # the copy's folder of solutions, beside takehome/
TEMPLATES = Path(__file__).parent / "templates" / "private"
GITHUB = re.compile(r"https://github\.com/[\w.-]+/[\w.-]+")
TASK_NAME = re.compile(r"[a-z0-9][a-z0-9-]*")


def refused(why):
    """End the command in one line, before anything is written."""
    sys.exit(f"error: {why}")


def git(*args, cwd):
    """Run git in cwd; return its output, or end the command in one line with git's own."""
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if done.returncode:
        said = (done.stderr.strip() or done.stdout.strip()).splitlines()
        sys.exit(f"error: git {args[0]} failed in {cwd}: {said[-1] if said else done.returncode}")
    return done.stdout


def checked(out, repository, task, start):
    """Refuse, in one line, what cannot make a copy: an OUT that holds files, an address that
    is not a GitHub repository's, a task name taken or not a folder's, an unknown start."""
    if out is None:
        refused(
            "say where: make private-copy OUT=../course-private REPOSITORY=https://"
            "github.com/<owner>/<private-course> TASK=<new task>"
        )
    if out.exists() and any(out.iterdir()):
        refused(f"{out} is not empty; give a new folder (make private-copy OUT=...)")
    if not GITHUB.fullmatch(repository or ""):
        refused(
            "give the private repository's address: REPOSITORY=https://github.com/"
            "<owner>/<private-course> (make private-copy)"
        )
    if not TASK_NAME.fullmatch(task or ""):
        refused(
            f"give the new task a folder's name, lowercase letters, digits and dashes "
            f"(TASK=my-losses), not '{task}'"
        )
    if task in takehome.tasks():
        refused(
            f"takehome/{task}/ is a take-home task of the course already; name the new "
            f"task otherwise"
        )
    if start not in takehome.tasks():
        refused(
            f"there is no take-home task '{start}' to start from; the tasks are "
            f"{', '.join(takehome.tasks())}"
        )


def solution_of(out, task, start):
    """Write solutions/<task>/train.py in the copy; return True if it is a solution. A
    practice task's answer is public (its task.toml's answer): the starting script with
    lesson 3 applied by the course's own program for it (tests/helpers/lesson_applied.py, run
    in the copy). Any other task's answer is in no public file: the starting script, for the
    teacher to solve (tests/test_solutions.py fails on it until then)."""
    target = out / SOLUTIONS / task / "train.py"
    target.parent.mkdir(parents=True)
    if takehome.tasks()[start].answer != "public":
        shutil.copy(out / "takehome" / task / "train.py", target)
        return False
    apply = (
        "import sys; sys.path.insert(0, 'tests/helpers')\n"
        "from pathlib import Path\nfrom lesson_applied import applied\n"
        "Path(sys.argv[2]).write_text(applied(Path(sys.argv[1]).read_text()))\n"
    )
    subprocess.run(
        [sys.executable, "-c", apply, f"takehome/{task}/train.py", str(target.relative_to(out))],
        cwd=out,
        check=True,
    )
    return True


def with_grader(pyproject, repository, tag):
    """Return pyproject.toml's text with the grader's repository and tag set."""
    lines = (
        "# the grader of this private copy's take-home tasks (make private-copy): a lab\n"
        "# written from it clones its grader from grader-repository at grader-tag\n"
        f'grader-repository = "{repository}"\ngrader-tag = "{tag}"\n'
    )
    return re.sub(
        r'(\[tool\.accelerate-course\]\n(?:#.*\n)*repository = ".*"\n)',
        lambda m: m.group(1) + lines,
        pyproject,
        count=1,
    )


def private_copy(out, repository, task, start):
    """Write the private copy into out; return (its tag, the uncommitted changes left out)."""
    checked(out and Path(out), repository, task, start)
    out = Path(out)
    changed = git("status", "--porcelain", cwd=REPO).splitlines()
    git("clone", "--quiet", "--no-hardlinks", str(REPO), str(out), cwd=REPO.parent)
    git("remote", "remove", "origin", cwd=out)
    git("remote", "add", "origin", repository, cwd=out)
    if published.named_repository():
        git("remote", "add", "public", published.named_repository(), cwd=out)
    shutil.copytree(out / "takehome" / start, out / "takehome" / task)
    solved = solution_of(out, task, start)
    shutil.copy(TEMPLATES / "solutions-README.md", out / SOLUTIONS / "README.md")
    shutil.copy(TEMPLATES / "test_solutions.py", out / "tests" / "test_solutions.py")
    tag = f"{published.version_tag()}-private"
    pyproject = out / "pyproject.toml"
    pyproject.write_text(with_grader(pyproject.read_text(), repository, tag))
    git("add", "-A", cwd=out)
    git(
        "commit",
        "--quiet",
        "-m",
        f"The graded take-home {task}: its task, its solution and "
        f"its tests (make private-copy, from {start})",
        cwd=out,
    )
    git("tag", tag, cwd=out)
    return tag, changed, solved


def main():
    parser = argparse.ArgumentParser(
        prog="python -m accelerate_course.private_copy", description=__doc__.splitlines()[0]
    )
    parser.add_argument("out", type=Path, nargs="?", help="a new folder for the copy")
    parser.add_argument("--repository", help="the private repository on GitHub it is pushed to")
    parser.add_argument("--task", help="the new take-home task's name (its folder)")
    parser.add_argument(
        "--start",
        default=next(
            (name for name, task in takehome.tasks().items() if task.answer == "public"), None
        ),
        help="the task it starts as a copy of (default: %(default)s, the "
        "practice task, with its solution)",
    )
    args = parser.parse_args()
    tag, changed, solved = private_copy(args.out, args.repository, args.task, args.start)
    if changed:
        print(
            f"note: {len(changed)} uncommitted changes of the course were left out "
            f"(the copy is its last commit)"
        )
    solution = f"{SOLUTIONS}/{args.task}/train.py"
    print(
        f"wrote the private copy into {args.out}: takehome/{args.task}/ (from {args.start}), "
        f"{'its solution in ' if solved else 'its starting script again in '}{solution} "
        f"and tests/test_solutions.py, committed and tagged {tag}"
    )
    if solved:
        print(
            f"next: takehome/{args.task}/train.py is still {args.start}'s loop, whose answer "
            f"is public: change the loop, its README and its solution, then make test "
            f"ARGS=tests/test_solutions.py, git commit, git tag -f {tag}, git push origin "
            f"main {tag} (docs/teaching.md)"
        )
    else:
        print(
            f"next: write the task's solution in {solution} (the course holds none), then "
            f"make test ARGS=tests/test_solutions.py, git commit, git tag -f {tag}, git push "
            f"origin main {tag} (docs/teaching.md)"
        )


if __name__ == "__main__":
    main()
