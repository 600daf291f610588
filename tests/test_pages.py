"""The pages a student reads are written plainly: short sentences, one idea each.

Measured on the prose alone: generated blocks, tables, headings and code blocks are left out;
sentences end at `.`, `!` and `?` and at paragraph and list-item breaks; inline code counts as
one word, and a link as the words of its text. The goal (issue 45): at most 20 words per
sentence on average, none over 40, on the README and every lesson's page.

    python tests/test_pages.py README.md step1_plain_loop/README.md ...   prints the table
"""

import re
import sys
from pathlib import Path

import pytest

from accelerate_course.steps import FOLDERS

REPO = Path(__file__).resolve().parent.parent
# the front door and each lesson's page (the step folders: accelerate_course/steps.py)
PAGES = ["README.md", *(f"{folder}/README.md" for folder in FOLDERS.values())]
MEAN, LONGEST = 20, 40
# idioms a plain word says better, as they were found on the pages and in the grader
IDIOMS = [
    "one voice",
    "left the group",
    "unseen setting",
    "rubber stamp",
    "under the hood",
    "out of the box",
    "for free",
]


def prose(text):
    """Return the page's prose: generated blocks, code blocks, tables, headings and HTML
    comments taken out."""
    text = re.sub(r"<!-- BEGIN (\w+).*?<!-- END \1 -->", "\n\n", text, flags=re.S)
    text = re.sub(r"```.*?```", "\n\n", text, flags=re.S)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    kept = [
        line
        for line in text.splitlines()
        if not line.lstrip().startswith(("#", "|", "![", "[![")) and "badge" not in line
    ]
    return "\n".join(kept)


def sentences(text):
    """Return the prose's sentences, each a list of words."""
    text = re.sub(r"`[^`]*`", "CODE", prose(text))  # inline code: one word
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link: its text
    # paragraph and list-item breaks end a sentence too
    blocks = re.split(r"\n\s*\n|\n\s*(?:[-*]|\d+\.)\s+", "\n" + text)
    found = []
    for block in blocks:
        for sentence in re.split(r"(?<=[.!?])\s+", " ".join(block.split())):
            words = [word for word in sentence.split() if re.search(r"\w", word)]
            if words:
                found.append(words)
    return found


def measure(path):
    """Return (sentences, mean words per sentence, longest, over 40) for a page."""
    found = sentences(Path(path).read_text())
    lengths = [len(words) for words in found] or [0]
    return (
        len(found),
        sum(lengths) / len(lengths),
        max(lengths),
        sum(1 for n in lengths if n > LONGEST),
    )


def table(pages):
    rows = [
        "| page | sentences | mean words per sentence | longest | over 40 words |",
        "|---|---|---|---|---|",
    ]
    for page in pages:
        count, mean, longest, over = measure(REPO / page)
        rows.append(f"| {page} | {count} | {mean:.1f} | {longest} | {over} |")
    return "\n".join(rows)


@pytest.mark.parametrize("page", PAGES)
def test_the_page_reads_in_short_sentences(page):
    count, mean, longest, over = measure(REPO / page)
    long_ones = [
        " ".join(words) for words in sentences((REPO / page).read_text()) if len(words) > LONGEST
    ]
    assert mean <= MEAN and not long_ones, (
        f"{page}: {mean:.1f} words per sentence on average "
        f"(goal {MEAN}); over {LONGEST}: {long_ones}"
    )


@pytest.mark.parametrize("page", PAGES)
def test_the_page_uses_no_idiom(page):
    text = prose((REPO / page).read_text()).lower()
    assert not [idiom for idiom in IDIOMS if idiom in text]


def test_the_measure_counts_as_the_issue_says():
    text = (
        "# A heading that is not counted\n\nOne two three. Four `a long piece of code` five!"
        "\n\n- an item [with a link](https://example.com)\n- another\n\n| a | table |\n"
        "\n```bash\nnot counted either\n```\n"
    )
    assert [len(words) for words in sentences(text)] == [3, 3, 5, 1]


if __name__ == "__main__":
    print(table(sys.argv[1:] or PAGES))
