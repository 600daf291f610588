"""The one writer of the pages' generated blocks: the README and each lesson's page.

    python -m accelerate_course.maintain.update_readme                 (the diffs: make readme)
    python -m accelerate_course.maintain.update_readme --whatif [N ..] (and the what-if and
                                                  invariants tables, measured now: make
                                                  readme WHATIF=1)
    python -m accelerate_course.maintain.update_readme --check         (exit 1 if a diff is stale)

A generated block sits between two markers, on any of PAGES (the README, each lesson's page,
docs/invariants.md, docs/teaching.md, docs/classroom.md, and the Chinese pages of CHINESE,
which hold the same blocks as their English page):
    <!-- BEGIN diff step1_plain_loop step2_accelerate -->  ...  <!-- END diff -->
holds the lesson from the first step to the second as a unified diff, in a ```diff block
(accelerate_course/steps.py's lesson_diff);
    <!-- BEGIN links -->  ...  <!-- END links -->
the badges that open the course in a Codespace and its notebooks on Colab and Kaggle, at the
repository and tag pyproject.toml names (accelerate_course/published.py);
    <!-- BEGIN points -->  ...  <!-- END points -->
what each check of the grader is worth (accelerate_course/check.py's POINTS);
    <!-- BEGIN whatif 3 -->  ...  <!-- END whatif -->
holds step 3's what-if table and its variants' notes, and
    <!-- BEGIN invariants 3 -->  ...  <!-- END invariants -->
its invariants table (on docs/invariants.md), and (on the teacher's page)
    <!-- BEGIN questions 3 -->  ...  <!-- END questions -->
the questions to ask a class before a run, one per what-if, each with its measured answer:
only a run can measure them (accelerate_course/lab.py's what_if), and
whatif_block, invariants_block and questions_block render its rows here, as the terminal's
make what-if renders them there. tests/test_readme.py and tests/test_whatif.py fail when a
page and the code disagree.
"""

import argparse
import re
import sys
import tempfile
from pathlib import Path

from accelerate_course import check, lab, patches, published
from accelerate_course.steps import FOLDERS, REPO, lesson_diff

README = REPO / "README.md"
# the Chinese pages, each beside the English page it mirrors (docs/glossary.zh-CN.md: the
# terms they use). They hold the same generated blocks as their English page, from the same
# runs: the diffs and links rendered here, the measured tables and questions copied from the
# English page (tests/test_zh_pages.py holds the two languages' blocks equal)
CHINESE = {
    REPO / "README.zh-CN.md": README,
    **{
        REPO / folder / "README.zh-CN.md": REPO / folder / "README.md"
        for folder in FOLDERS.values()
    },
    **{
        REPO / "docs" / f"{name}.zh-CN.md": REPO / "docs" / f"{name}.md"
        for name in ("teaching", "your-own-setup")
    },
}
ENGLISH = [
    README,
    *(REPO / folder / "README.md" for folder in FOLDERS.values()),
    REPO / "docs" / "invariants.md",
    REPO / "docs" / "teaching.md",
    REPO / "docs" / "classroom.md",
]
PAGES = [*ENGLISH, *(page for page, english in CHINESE.items() if english in ENGLISH)]
BLOCK = re.compile(r"(<!-- BEGIN diff (\S+) (\S+) -->\n)(.*?)(<!-- END diff -->)", re.S)
WHATIF = re.compile(r"(<!-- BEGIN whatif (\d) -->\n)(.*?)(<!-- END whatif -->)", re.S)
INVARIANTS = re.compile(r"(<!-- BEGIN invariants (\d) -->\n)(.*?)(<!-- END invariants -->)", re.S)
LINKS = re.compile(r"(<!-- BEGIN links -->\n)(.*?)(<!-- END links -->)", re.S)
POINTS = re.compile(r"(<!-- BEGIN points -->\n)(.*?)(<!-- END points -->)", re.S)
QUESTIONS = re.compile(r"(<!-- BEGIN questions (\d) -->\n)(.*?)(<!-- END questions -->)", re.S)


def step_diff(earlier, later):
    """Return the lesson from step folder `earlier` to the next, `later`, as a unified diff (3
    lines of context; accelerate_course/steps.py's lesson_diff)."""
    step = next(n for n, folder in FOLDERS.items() if folder == later)
    assert FOLDERS[step - 1] == earlier, f"{earlier} is not the step before {later}"
    return lesson_diff(step)


def cell(text):
    """Return text for a Markdown table cell (its own | escaped)."""
    return text.replace("|", "\\|")


def whatif_block(step, rows, with_time=True):
    """Return a step's what-if table (lab.Rows) as its lesson page shows it, then its
    variants' notes."""
    header = "| variant | the change | measured | against the lesson |" + (
        " time |" if with_time else ""
    )
    lines = [header, "|" + "---|" * (5 if with_time else 4)]
    for row in rows:
        change = [f"`{line}`" for line in row.change] + (
            [f"and {row.more} more lines"] if row.more else []
        )
        change = "<br>".join(change) or ("-" if not row.setting else "the lesson")
        if row.setting:
            change += f", with {row.setting}"
        cells = [
            f"**{row.variant}**" if row.variant == "lesson" else row.variant,
            change,
            cell(", ".join(row.measured)),
            cell(row.verdict),
        ]
        if with_time:
            cells.append(f"{row.seconds:.1f} s")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n" + whatif_notes(step)


def whatif_notes(step, lang="en"):
    """Return a what-if block's end: its variants' notes, in English or (lang "zh-CN", on the
    Chinese pages) in Chinese, both from the variants' patches (patches.Variant.note_in)."""
    notes = [f"- **{v.name}**: {v.note_in(lang)}" for v in patches.variants(step) if v.note]
    return "\n" + "\n".join(notes) + "\n" if notes else ""


def whatif_table(body):
    """Return a what-if block's table, without the notes under it."""
    return body.split("\n\n", 1)[0].rstrip("\n") + "\n"


def invariants_block(step, rows):
    """Return a step's invariants table (invariants.InvariantRows), then what each of its
    patches adds."""
    lines = ["| invariant | compared | measured | verdict |", "|---|---|---|---|"]
    for row in rows:
        lines.append(
            "| "
            + " | ".join(
                cell(text)
                for text in (
                    row.invariant,
                    row.compared,
                    "; ".join(row.measured),
                    row.verdict + ("" if row.holds else " (**does not hold**)"),
                )
            )
            + " |"
        )
    notes = [f"- **{v.name}**: {v.title}. {v.note}" for v in patches.variants(step, "invariants")]
    return "\n".join(lines) + "\n" + ("\n" + "\n".join(notes) + "\n" if notes else "")


def questions_block(step, rows):
    """Return the questions to ask before a step's what-ifs run (their patches' titles), each
    with what the run measured (its row's verdict)."""
    titles = {variant.name: variant.title for variant in patches.variants(step)}
    return "".join(
        f"- *What if {titles[row.variant]}?* Measured: {row.verdict}.\n"
        for row in rows
        if row.variant in titles and not row.setting
    )


def links_block():
    """Return the README's badges: the whole course in a Codespace and on Colab or Kaggle
    (docs/course_on_colab.ipynb), and step 4's notebook."""
    unpublished = (
        ""
        if published.named_repository()
        else " (they open once the course is published: docs/publishing.md, then make readme)"
    )
    return (
        f"The whole course{unpublished}: {published.codespaces_link()} "
        f"{published.notebook_links(REPO / 'docs' / 'course_on_colab.ipynb')}  \n"
        f"Step 4's notebook: "
        f"{published.notebook_links(REPO / FOLDERS[4] / 'tpu_training.ipynb')}\n"
    )


def points_block():
    """Return what each check is worth, lesson by lesson and task by task (check.points_table)."""
    return check.points_table()


def render(text, results=None):
    """Return a page's text with every diff block regenerated, and the what-if and invariants
    blocks of the steps in results ({step: lab.WhatIf}) replaced."""

    def diff(match):
        head, earlier, later, _, tail = match.groups()
        return f"{head}```diff\n{step_diff(earlier, later)}```\n{tail}"

    def table(block):
        def replace(match):
            head, step, _, tail = match.groups()
            result = (results or {}).get(int(step))
            if result is None:
                return match.group(0)
            body = (
                whatif_block(int(step), result.rows)
                if block is WHATIF
                else questions_block(int(step), result.rows)
                if block is QUESTIONS
                else invariants_block(int(step), result.invariant_rows)
            )
            return head + body + tail

        return replace

    text = BLOCK.sub(diff, text)
    text = LINKS.sub(lambda match: match.group(1) + links_block() + match.group(3), text)
    text = POINTS.sub(lambda match: match.group(1) + points_block() + match.group(3), text)
    for block in (WHATIF, INVARIANTS, QUESTIONS):
        text = block.sub(table(block), text)
    return text


MEASURED = (WHATIF, INVARIANTS, QUESTIONS)


def copy_measured(text, english):
    """Return a Chinese page's text with each measured block (what-if, invariants, questions)
    replaced by the English page's block of the same kind and step: one measurement, written
    once, shown in both languages. A what-if block's notes, written by hand, come in Chinese
    (whatif_notes)."""
    for pattern in MEASURED:
        blocks = {match.group(2): match.group(3) for match in pattern.finditer(english)}
        if pattern is WHATIF:  # the measured table, and the notes in Chinese
            blocks = {
                step: whatif_table(body) + whatif_notes(int(step), "zh-CN")
                for step, body in blocks.items()
            }

        def replace(match):
            head, step, body, tail = match.groups()
            return head + blocks.get(step, body) + tail  # noqa: B023 (used in this iteration)

        text = pattern.sub(replace, text)
    return text


def rendered_pages(results=None):
    """Return {page: its text with every generated block written (see render)}: the English
    pages first, then each Chinese page, its measured blocks copied from its English page."""
    pages = {page: render(page.read_text(), results) for page in PAGES if page not in CHINESE}
    for page in PAGES:
        if page in CHINESE:
            english = pages.get(CHINESE[page]) or render(CHINESE[page].read_text(), results)
            pages[page] = copy_measured(render(page.read_text(), results), english)
    return pages


def shown(pattern, pages=PAGES):
    """Return the blocks of one kind (BLOCK, WHATIF, INVARIANTS or QUESTIONS) on the pages (all
    of them unless given), as matches."""
    return [match for page in pages for match in pattern.finditer(page.read_text())]


def write_pages(results=None):
    """Regenerate every page's blocks (see render); return the names of the pages changed."""
    changed = []
    for page, new in rendered_pages(results).items():
        if new != page.read_text():
            page.write_text(new)
            changed.append(str(page.relative_to(REPO)))
    return changed


def main():
    parser = argparse.ArgumentParser(
        prog="python -m accelerate_course.maintain.update_readme",
        description=__doc__.splitlines()[0],
    )
    parser.add_argument("--check", action="store_true")
    parser.add_argument(
        "--whatif",
        type=int,
        nargs="*",
        choices=list(FOLDERS),
        help="measure the what-if and invariants tables of these steps (all "
        "when none is named) and write them too",
    )
    args = parser.parse_args()
    if args.check:
        stale = [
            str(page.relative_to(REPO))
            for page, text in rendered_pages().items()
            if text != page.read_text()
        ]
        if stale:
            sys.exit(
                f"error: stale diffs in {', '.join(stale)}; run python -m "
                "accelerate_course.maintain.update_readme"
            )
        return
    results = {}
    if args.whatif is not None:
        folder = Path(tempfile.mkdtemp(prefix="readme-whatif-"))
        for step in args.whatif or list(FOLDERS):
            print(f"measuring step {step}'s what-if lab ...", flush=True)
            results[step] = lab.what_if(step, folder / f"step{step}")
    changed = write_pages(results)
    print(f"updated: {', '.join(changed) or 'nothing (the pages were up to date)'}")


if __name__ == "__main__":
    main()
