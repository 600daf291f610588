"""Take-home tasks: a lesson applied to another loop the course provides, graded by that
lesson's measured checks (accelerate_course/check.py), with a solution in no file.

    python -m accelerate_course.takehome sst2-losses   (make takehome TASK=sst2-losses: writes
                                                         exercises/sst2-losses/train.py)

Each task is a folder takehome/<task>/: train.py, the starting script, which runs as it is;
task.toml, its lesson, the flags of its graded runs, and what each check is worth; README.md,
the task as a student reads it. The course ships no solution of a task. A practice task's
answer is public all the same (task.toml's answer = "public": sst2-losses): the tests build it
at test time by applying the lesson to the starting script mechanically
(tests/helpers/lesson_applied.py), and check that the grader passes it and fails the
untouched script and the known mistakes. Any other task's answer is in no public file: a
teacher keeps one in a private copy of the course (accelerate_course/private_copy.py).
"""

import argparse
import sys
import tomllib
from functools import cache
from pathlib import Path
from typing import NamedTuple

from accelerate_course.steps import REPO

FOLDER = REPO / "takehome"


class Task(NamedTuple):
    name: str  # its folder's name: what make check TASK=... names
    lesson: int  # the lesson it applies (its checks are that lesson's)
    title: str
    unit: str  # what its validation split holds: messages.toml's unit.<unit>
    flags: list  # the flags of its graded runs on 2 processes
    unseen_flags: list  # and on 2 machines of 1 process (a setting it does not show)
    points: dict  # {check key: check.Worth}
    start: Path  # the starting script
    readme: Path  # the task, as a student reads it
    title_zh: str = ""  # the title in Chinese (task.toml's title_zh-CN)
    # the resume (the check "resumes"): the graded run on 2 processes also gets state_flags,
    # with which it saves its whole training state in <output-dir>/state; then a new launch
    # gets resume_flags and that folder. None: the task has no resume
    state_flags: list = []
    resume_flags: list = []
    answer: str = "private"  # "public": the course's tests build its solution (practice)

    def title_in(self, lang="en"):
        """Return the title in the class's language (messages.language())."""
        return self.title_zh if lang == "zh-CN" and self.title_zh else self.title

    def readme_in(self, lang="en"):
        """Return the task's text as a class in that language reads it: README.zh-CN.md beside
        README.md for COURSE_LANG=zh-CN, where there is one."""
        chinese = self.readme.with_name("README.zh-CN.md")
        return chinese if lang == "zh-CN" and chinese.is_file() else self.readme

    @property
    def unseen_batch(self):
        """The evaluation batch size of the setting the task does not show."""
        return self.unseen_flags[self.unseen_flags.index("--eval-batch-size") + 1]


def load(folder):
    """Return the Task of a folder under takehome/."""
    from accelerate_course.check import Worth

    spec = tomllib.loads((folder / "task.toml").read_text(encoding="utf-8"))
    return Task(
        folder.name,
        spec["lesson"],
        spec["title"],
        spec["unit"],
        spec["flags"],
        spec["unseen_flags"],
        {key: Worth(*value) for key, value in spec["points"].items()},
        folder / "train.py",
        folder / "README.md",
        spec.get("title_zh-CN", ""),
        spec.get("state_flags", []),
        spec.get("resume_flags", []),
        spec.get("answer", "private"),
    )


@cache
def tasks():
    """Return {name: Task} of every folder under takehome/ with a task.toml."""
    return {
        folder.name: load(folder)
        for folder in sorted(FOLDER.glob("*/"))
        if (folder / "task.toml").is_file()
    }


def main():
    parser = argparse.ArgumentParser(
        prog="python -m accelerate_course.takehome", description=__doc__.splitlines()[0]
    )
    parser.add_argument("task", help=f"the task: {', '.join(tasks()) or 'none here'}")
    parser.add_argument("--force", action="store_true", help="overwrite your file")
    args = parser.parse_args()
    task = tasks().get(args.task)
    if task is None:
        sys.exit(
            f"error: there is no take-home task '{args.task}'; the tasks are "
            f"{', '.join(tasks()) or 'none'} (takehome/)"
        )
    from accelerate_course.exercise import write_once

    path = REPO / "exercises" / task.name / "train.py"
    if write_once(
        path,
        task.start.read_text(),
        args.force,
        f"python -m accelerate_course.takehome {task.name} --force",
        f"cp {task.start.relative_to(REPO)} train.py",
    ):
        from accelerate_course.messages import language

        lang = language()
        print(
            f"wrote {path.relative_to(REPO)}: the starting script of {task.name} "
            f"({task.title_in(lang)}); the task: {task.readme_in(lang).relative_to(REPO)}"
        )
    print(f"check it:  make check TASK={task.name}")


if __name__ == "__main__":
    main()
