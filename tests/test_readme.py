"""The README agrees with the code: its diffs, its commands, and its numbers."""

import re
import shlex
import sys

import pytest

from common.cli import parse_args
from conftest import REPO

sys.path.insert(0, str(REPO))
from tools import update_readme  # noqa: E402

README = (REPO / "README.md").read_text()


def test_the_diffs_in_the_readme_are_the_real_diffs():
    assert update_readme.BLOCK.findall(README), "the README shows no generated diff"
    assert update_readme.render(README) == README, "run python tools/update_readme.py"


def shell_commands():
    """Yield every command of the README's bash blocks, continuation lines joined."""
    for block in re.findall(r"```bash\n(.*?)```", README, re.S):
        for command in block.replace("\\\n", " ").splitlines():
            command = command.split("  #")[0].strip()
            if command and not command.startswith("#"):
                yield command


def test_every_step_command_names_a_real_script_and_real_flags():
    checked = 0
    for command in shell_commands():
        words = shlex.split(command)
        scripts = [w for w in words if re.fullmatch(r"step\d_\w+/train\.py", w)]
        if not scripts or "path/to" in command:
            continue
        assert (REPO / scripts[0]).is_file(), command
        flags = words[words.index(scripts[0]) + 1:]
        flags = [f for f in flags if f not in ("glue", "--dataset")] if "glue" in flags else flags
        parse_args(flags)  # exits with an error line if a flag or value is wrong
        checked += 1
    assert checked >= 6


def test_every_make_target_the_readme_uses_exists():
    makefile = (REPO / "Makefile").read_text()
    for target in set(re.findall(r"make (\w[\w-]*)", README)):
        assert re.search(rf"^{target}:", makefile, re.M), f"make {target}"


@pytest.mark.parametrize("step", [1, 2])
def test_the_numbers_shown_for_steps_1_and_2_are_what_a_run_gives(default_runs, step):
    shown = re.search(rf"step {step} \(\S+, python\) \.\.\. done in \d+ s: "
                      rf"accuracy (\S+), f1 (\S+)", README)
    assert shown, f"the README shows no result line for step {step}"
    metrics = default_runs[step]
    assert shown.groups() == (f"{metrics['accuracy']:.4f}", f"{metrics['f1']:.4f}")
