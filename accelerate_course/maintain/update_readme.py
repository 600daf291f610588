"""The one writer of the pages' generated blocks: the README and each lesson's page.

    python -m accelerate_course.maintain.update_readme          (rewrites the diffs in place: make readme)
    python -m accelerate_course.maintain.update_readme --check  (exit 1 if a page's diff is stale)

A generated block sits between two markers, on any of PAGES:
    <!-- BEGIN diff step1_plain_loop step2_accelerate -->  ...  <!-- END diff -->
holds the lesson from the first step to the second as a unified diff, in a ```diff block
(accelerate_course/steps.py's lesson_diff);
    <!-- BEGIN whatif 3 -->  ...  <!-- END whatif -->
holds step 3's what-if table, which only a run can measure: accelerate_course/whatif.py --readme runs it
and hands the tables to write_pages. tests/test_readme.py and tests/test_whatif.py fail when
a page and the code disagree.
"""

import argparse
import re
import sys

from accelerate_course.steps import FOLDERS, REPO, lesson_diff

README = REPO / "README.md"
PAGES = [README, *(REPO / folder / "README.md" for folder in FOLDERS.values())]
BLOCK = re.compile(r"(<!-- BEGIN diff (\S+) (\S+) -->\n)(.*?)(<!-- END diff -->)", re.S)
WHATIF = re.compile(r"(<!-- BEGIN whatif (\d) -->\n)(.*?)(<!-- END whatif -->)", re.S)


def step_diff(earlier, later):
    """Return the lesson from step folder `earlier` to the next, `later`, as a unified diff (3
    lines of context; accelerate_course/steps.py's lesson_diff)."""
    step = next(n for n, folder in FOLDERS.items() if folder == later)
    assert FOLDERS[step - 1] == earlier, f"{earlier} is not the step before {later}"
    return lesson_diff(step)


def render(text, whatif_tables=None):
    """Return a page's text with every diff block regenerated, and the what-if blocks of the
    steps in whatif_tables ({step: Markdown}) replaced."""
    def diff(match):
        head, earlier, later, _, tail = match.groups()
        return f"{head}```diff\n{step_diff(earlier, later)}```\n{tail}"

    def table(match):
        head, step, _, tail = match.groups()
        body = (whatif_tables or {}).get(int(step))
        return head + body + tail if body else match.group(0)

    return WHATIF.sub(table, BLOCK.sub(diff, text))


def shown(pattern):
    """Return the blocks of one kind (BLOCK or WHATIF) on all pages, as their matches."""
    return [match for page in PAGES for match in pattern.finditer(page.read_text())]


def write_pages(whatif_tables=None):
    """Regenerate every page's blocks (see render); return the names of the pages changed."""
    changed = []
    for page in PAGES:
        text = page.read_text()
        new = render(text, whatif_tables)
        if new != text:
            page.write_text(new)
            changed.append(str(page.relative_to(REPO)))
    return changed


def main():
    parser = argparse.ArgumentParser(prog="python -m accelerate_course.maintain.update_readme",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    if args.check:
        stale = [str(p.relative_to(REPO)) for p in PAGES if render(p.read_text()) != p.read_text()]
        if stale:
            sys.exit(f"error: stale diffs in {', '.join(stale)}; run python -m accelerate_course.maintain.update_readme")
        return
    changed = write_pages()
    print(f"updated: {', '.join(changed) or 'nothing (the diffs were up to date)'}")


if __name__ == "__main__":
    main()
