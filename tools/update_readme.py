"""Regenerate the parts of README.md that come from the code: the diffs between the steps.

    python tools/update_readme.py          (rewrites README.md in place)
    python tools/update_readme.py --check  (exit 1 if README.md is stale)

A generated part sits between two markers,
    <!-- BEGIN diff step1_plain_loop step2_accelerate -->  ...  <!-- END diff -->
and holds `diff -u` of the two steps' train.py, in a ```diff block. tests/test_readme.py
fails when README.md and the code disagree.
"""

import argparse
import difflib
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
BLOCK = re.compile(r"(<!-- BEGIN diff (\S+) (\S+) -->\n)(.*?)(<!-- END diff -->)", re.S)


def step_diff(earlier, later):
    """Return the unified diff (3 lines of context) of two steps' train.py, as text."""
    a = (REPO / earlier / "train.py").read_text().splitlines(keepends=True)
    b = (REPO / later / "train.py").read_text().splitlines(keepends=True)
    return "".join(difflib.unified_diff(a, b, f"{earlier}/train.py", f"{later}/train.py"))


def render(text):
    """Return the README text with every diff block regenerated."""
    def fill(match):
        head, earlier, later, _, tail = match.groups()
        return f"{head}```diff\n{step_diff(earlier, later)}```\n{tail}"
    return BLOCK.sub(fill, text)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    text = README.read_text()
    new = render(text)
    if args.check:
        if new != text:
            sys.exit("error: README.md's diffs are stale; run python tools/update_readme.py")
        return
    README.write_text(new)
    print(f"updated {README.name}: {len(BLOCK.findall(new))} diffs")


if __name__ == "__main__":
    main()
