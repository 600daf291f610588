"""The pages agree with the code (the README, each lesson's page, the docs): their diffs,
their commands and their numbers.

Every command of the pages' bash blocks is read as a newcomer would
type it after the two set-up commands: the files it names exist, the step's flags parse, the
launcher's own flags parse with the launcher's own parser, and the make targets exist; and
the README tells how to activate `.venv` before its first bare `python`.
"""

import re
import shlex

import pytest
from conftest import REPO

from accelerate_course.maintain import update_readme
from accelerate_course.steps import FOLDERS
from common.cli import parse_args

README = (REPO / "README.md").read_text()
# the front door, each lesson's page beside its code, and the docs
PAGES = {
    str(path.relative_to(REPO)): path.read_text()
    for path in [*update_readme.PAGES, *sorted((REPO / "docs").glob("*.md"))]
}
EVERY_PAGE = "\n".join(PAGES.values())
# written by the commands themselves, or a placeholder for the reader's own
NOT_IN_THE_REPOSITORY = (
    "outputs/",
    "exercises/",
    "path/to",
    ".venv/",
    "$PWD/",
)  # $PWD: a student's clone


def test_the_diffs_on_the_pages_are_the_real_diffs():
    assert update_readme.shown(update_readme.BLOCK), "no page shows a generated diff"
    for page in update_readme.PAGES:
        assert update_readme.render(page.read_text()) == page.read_text(), (
            f"{page.relative_to(REPO)}: run python -m accelerate_course.maintain.update_readme"
        )


def shell_commands(text):
    """Yield every command of a page's bash blocks, continuation lines joined."""
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for command in block.replace("\\\n", " ").splitlines():
            command = command.split("  #")[0].strip().rstrip("&").strip()
            if command and not command.startswith("#"):
                yield command


def all_commands():
    return [(page, command) for page, text in PAGES.items() for command in shell_commands(text)]


def without_environment(words):
    """Return the words of a command after its leading NAME=value settings."""
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
        words = words[1:]
    return words


@pytest.mark.parametrize("page,command", all_commands())
def test_every_command_names_real_files_and_flags(page, command):
    words = without_environment(shlex.split(command))
    for word in words:
        word = word.split("=", 1)[-1]  # make's VAR=value names a file in its value
        if re.search(
            r"\.(py|ipynb|md)$|^(step\d_\w+|common|accelerate_course|tests|docs)/", word
        ) and not word.startswith(NOT_IN_THE_REPOSITORY):
            assert (REPO / word).exists(), f"{page}: {command}: {word} does not exist"
    scripts = [i for i, w in enumerate(words) if re.fullmatch(r"step\d_\w+/train\.py", w)]
    runs_a_step = words[:1] in (["python"], ["accelerate"], ["torchrun"])
    if scripts and runs_a_step and not any(w.startswith("path/to") for w in words):
        flags = words[scripts[0] + 1 :]
        if "glue" in flags:  # the hub's dataset: its name is checked, not its download
            flags = [f for f in flags if f not in ("glue", "--dataset")]
        parse_args(flags)  # exits with an error line if a flag or value is wrong
        launcher = words[: scripts[0]]
        if launcher[:2] == ["accelerate", "launch"]:
            from accelerate.commands.launch import launch_command_parser

            launch_command_parser().parse_args(launcher[2:] + [words[scripts[0]]])
        elif launcher[:1] == ["torchrun"]:
            from torch.distributed.run import get_args_parser

            get_args_parser().parse_args(launcher[1:] + [words[scripts[0]]])
        else:
            assert launcher == ["python"], f"{page}: {command}: launched how?"
    if words[:1] == ["make"] and not any(w.startswith("FILE=path/to") for w in words):
        makefile = (REPO / "Makefile").read_text()
        assert re.search(rf"^{words[1]}:", makefile, re.M), f"{page}: make {words[1]}"


def test_there_are_commands_for_every_step_and_launcher():
    commands = " | ".join(command for _, command in all_commands())
    for script in (f"{folder}/train.py" for folder in FOLDERS.values()):
        assert script in commands
    assert "accelerate launch --config_file configs/cpu-2-processes.yaml" in commands
    assert "torchrun --standalone --nproc_per_node 2" in commands


def test_every_make_target_the_readme_uses_exists():
    makefile = (REPO / "Makefile").read_text()
    for page, text in PAGES.items():  # in commands and in `code`, not in prose ("make sure")
        for target in set(re.findall(r"(?:^|`)make (\w[\w-]*)", text, re.M)):
            assert re.search(rf"^{target}:", makefile, re.M), f"{page}: make {target}"


def test_the_activation_comes_before_the_first_bare_python():
    # after `make course` / `make test`, a newcomer's `python ...` must be .venv's python
    # (the lessons' pages are reached from the README, after it)
    activation = README.find("source .venv/bin/activate")
    pythons = [
        README.find(command) for command in shell_commands(README) if command.startswith("python ")
    ]
    assert activation >= 0 and all(activation < at for at in pythons)


def test_the_front_door_is_short_and_each_lesson_has_its_page():
    assert len(README.splitlines()) <= 200
    for step, folder in FOLDERS.items():
        page = PAGES[f"{folder}/README.md"]
        assert f"({folder}/README.md)" in README  # linked from the front door
        assert f"<!-- BEGIN whatif {step} -->" in page
        if step > 1:
            assert f"<!-- BEGIN diff {FOLDERS[step - 1]} {folder} -->" in page


@pytest.mark.parametrize("step", [1, 2])
def test_the_numbers_shown_for_steps_1_and_2_are_what_a_run_gives(default_runs, step):
    shown = re.search(
        rf"^  step {step} done in \d+ s: accuracy (\S+), f1 (\S+)$", README, re.M
    )  # make course's lines (steps 1 and 2 run side by side)
    assert shown, f"the README shows no result line for step {step}"
    metrics = default_runs[step]
    assert shown.groups() == (f"{metrics['accuracy']:.4f}", f"{metrics['f1']:.4f}")
    assert (
        f"validation: accuracy {metrics['accuracy']:.4f}, f1 {metrics['f1']:.4f} (408 examples)"
        in PAGES[f"{FOLDERS[step]}/README.md"]
    )  # the lesson's own run


def test_every_page_and_notebook_names_the_tag_the_course_is_published_at():
    # a class installs and grades with the course at one tag: the pages' `git tag`, their
    # versions and the notebooks' sources must all be it (a `git tag v1` beside a notebook
    # that installs @v0.1.0 ends the notebook's setup in pip's "did not match")
    from accelerate_course import published

    tag = published.version_tag()
    # every notebook of the course's folders (not those of the virtual environments, .venv
    # and .venv-xla, whose gigabytes a walk would read through first)
    folders = [path for path in REPO.iterdir() if path.is_dir() and not path.name.startswith(".")]
    notebooks = {
        str(path.relative_to(REPO)): path.read_text()
        for folder in folders
        for path in sorted(folder.glob("**/*.ipynb"))
    }
    # (a teacher's private copy tags its commit <tag>-private: make private-copy)
    named = {}
    for name, text in {**PAGES, **notebooks}.items():
        for found in re.findall(
            r"git tag (?:-f\s+)?([\w.-]+)|(?<![\w.])(v\d+\.\d+\.\d+)\b|TAG = \\?\"(\S+?)\\?\"", text
        ):
            named.setdefault("".join(found).strip("`").removesuffix("-private"), set()).add(name)
    assert set(named) == {tag}, named
    assert {"docs/classroom.md", "docs/publishing.md", "docs/teaching.md"} <= named[tag]
