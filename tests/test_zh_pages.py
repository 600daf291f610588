"""The Chinese pages (issue 47) hold what their English pages hold: the same generated blocks,
the same numbers, a heading for each English heading, links that resolve; they use the
glossary's terms, one word per idea; and they read in short sentences.

The pairs are accelerate_course/maintain/update_readme.py's CHINESE (a Chinese page: the English
page it mirrors). The generated blocks (diffs, what-if and invariants tables, the teacher's
questions, the badges) are written into both languages by that one generator, from the same
runs, and stay as they are there: English, as the Hugging Face course's Chinese edition keeps
code and outputs in English. The notes under a what-if table are prose, written by hand in
both languages in the variant's patch (stepN_*/whatif/*.patch: the English note, then a line
"zh-CN: ..."): the Chinese page shows the Chinese note, with the English note's numbers.

    python tests/test_zh_pages.py      prints each Chinese page's sentence lengths
"""

import re
import sys
from pathlib import Path

import pytest

from accelerate_course.maintain import update_readme

REPO = Path(__file__).resolve().parent.parent
PAIRS = {
    str(zh.relative_to(REPO)): str(en.relative_to(REPO)) for zh, en in update_readme.CHINESE.items()
}
GLOSSARY = "docs/glossary.zh-CN.md"
CHINESE_PAGES = [*PAIRS, GLOSSARY]
# English sections a Chinese page does not mirror: one Chinese section links to them instead
# (none today: the teacher's page's grading is translated too)
NOT_MIRRORED = {}
# each English heading's Chinese counterpart (the same level, the same order, on every page)
HEADINGS = {
    "From a plain PyTorch loop to distributed training with 🤗 Accelerate": (
        "从普通 PyTorch 训练循环到 🤗 Accelerate 分布式训练"
    ),
    "Start here: two commands": "从这里开始：两条命令",
    "Where is my model": "我的模型在哪里",
    "What `make course` prints": "`make course` 输出什么",
    "How to read a lesson": "怎样读一课",
    "The lessons": "四课",
    "Exercises, and grading them": "练习和评分",
    "More": "更多",
    "Layout": "目录结构",
    "Step 1 — the plain PyTorch loop": "第 1 步：普通 PyTorch 训练循环",
    "Step 2 — Accelerate": "第 2 步：Accelerate",
    "Step 3 — several processes": "第 3 步：多个进程",
    "Step 4 — the TPU notebook: `notebook_launcher`": (
        "第 4 步：TPU Notebook 与 `notebook_launcher`"
    ),
    "What it does": "它做什么",
    "What changes": "改了什么",
    "Why": "为什么这样写",
    "Run it": "运行",
    "What breaks without it": "去掉会怎样",
    "Try it: one sentence instead of a pair (SST-2)": "试一试：用单个句子代替句子对（SST-2）",
    "The exercise": "练习",
    "Going further": "延伸阅读",
    "Teaching with the course: a 2-hour lab": "用这门课教学：一个 2 小时的实验课",
    "What each lesson teaches": "每一课教什么",
    "The agenda": "课程安排",
    "Each lesson's commands in class, timed": "课堂上每一课的命令和用时",
    "Questions to ask before a run": "运行之前要问的问题",
    "What a class hands in, and how it is graded": "学生交什么、怎样评分",
    "What a student can see": "学生能看到什么",
    "GitHub Classroom": "GitHub Classroom",
    "Gradescope": "Gradescope",
    "Where a class can run it": "全班可以在哪里运行",
    "Your own setup: flags, files, checkpoints, machines": (
        "你自己的设置：参数、文件、checkpoint 和机器"
    ),
    "Your own dataset": "你自己的数据集",
    "Your own checkpoint": "你自己的 checkpoint",
    "The course's own setup, from the Hub": "从 Hub 获取课程原本的设置",
    "Where the Hub cannot be reached": "访问不了 Hub 时",
    "What a run writes, and what a bad input or Ctrl-C leaves": (
        "一次运行写出什么，以及错误输入或 Ctrl-C 之后留下什么"
    ),
    "Installing torch": "安装 torch",
    "Your machine": "你的机器",
    "A class in mainland China": "在中国大陆上课",
}
# Chinese prose, measured as the English pages' is (tests/test_pages.py): a unit is a Chinese
# character, a word or number in Latin letters, or a piece of inline code; sentences end at
# 。！？ and at paragraph and list-item breaks. The goal: at most 25 units a sentence on
# average, none over 55, as the English pages' 20 and 40 words (when it was set, the Chinese
# pages measured 18 to 24 units on average, 52 the longest: python tests/test_zh_pages.py)
MEAN, LONGEST = 25, 55

GENERATED = re.compile(r"<!-- BEGIN (\w+)([^>]*?) -->\n(.*?)<!-- END \1 -->", re.S)
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def read(page):
    return (REPO / page).read_text()


def mirrored(page):
    """Return an English page's text without the sections its Chinese page does not mirror
    (each such section's heading kept: the Chinese page has one in its place)."""
    text = read(page)
    for title in NOT_MIRRORED.get(page, []):
        heading = f"## {title}\n"
        start = text.index(heading) + len(heading)
        after = re.search(r"^## ", text[start:], re.M)
        text = text[:start] + "\n" + (text[start + after.start() :] if after else "")
    return text


def blocks(text):
    """Return the page's generated blocks, in order: (kind, its arguments, its text)."""
    return [(kind, args.strip(), body) for kind, args, body in GENERATED.findall(text)]


def without_code(text):
    """Return the text without its generated blocks, fenced code blocks and HTML comments."""
    text = GENERATED.sub("\n", text)
    text = FENCE.sub("\n", text)
    return re.sub(r"<!--.*?-->", "", text, flags=re.S)


def numbers(text):
    """Return the set of numbers written outside the generated blocks and code blocks (link
    targets left out, thousands' commas dropped: 1,377 is 1377): times, sizes, counts,
    versions, learning rates ("5e-5"), clock times ("0:35")."""
    text = re.sub(r"\]\([^)]*\)", "]", without_code(text))
    found = re.findall(r"(?<![\w.\-/#:])\d[\d,]*(?:\.\d+)*(?:e-?\d+)?(?::\d\d)?(?![\w])", text)
    return {number.replace(",", "").rstrip(".") for number in found}


def headings(text):
    """Return the page's headings outside code blocks: (level, text)."""
    return [
        (len(marks), title.strip())
        for marks, title in re.findall(r"^(#{1,6}) (.*)$", FENCE.sub("", text), re.M)
    ]


def english_headings(page):
    """Return an English page's headings, less the subsections of a section its Chinese page
    does not mirror."""
    found, skipping = [], False
    for level, title in headings(read(page)):
        if level <= 2:
            skipping = title in NOT_MIRRORED.get(page, [])
        elif skipping:
            continue
        found.append((level, title))
    return found


def slug(title):
    """Return GitHub's anchor for a heading: lower case, punctuation dropped (letters of any
    script, digits, spaces, hyphens and underscores kept), spaces made hyphens."""
    title = re.sub(r"`", "", title.strip().lower())
    return re.sub(r"[^\w\- ]", "", title).replace(" ", "-")


def anchors(page):
    seen, found = {}, set()
    for _, title in headings(read(page)):
        base = slug(title)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(text):
    """Return the relative links of a page's Markdown, outside its code blocks."""
    return [
        target
        for target in re.findall(r"\]\(([^)\s]+)\)", FENCE.sub("", text))
        if not re.match(r"[a-z]+:", target)
    ]


def glossary_variants():
    """Return {a variant the glossary says not to use: the glossary's term}, from the last
    column of the glossary's table ("不用"), each note in brackets taken off."""
    variants = {}
    for row in re.findall(r"^\|(.*)\|$", read(GLOSSARY), re.M):
        cells = [cell.strip() for cell in row.split("|")]
        if len(cells) != 4 or cells[0] in ("English", "---"):
            continue
        for variant in filter(None, re.split(r"、", cells[3])):
            variants[re.sub(r"（.*?）", "", variant).strip()] = cells[1]
    return variants


# where a variant is part of an allowed word: "笔记本电脑" is a laptop, not a notebook
ALLOWED_AROUND = {"笔记本": r"笔记本(?!电脑)"}


def zh_prose(text):
    """Return a Chinese page's prose, as tests/test_pages.py takes an English page's: no
    generated blocks, code blocks, tables, headings or comments."""
    from test_pages import prose

    return prose(text)


def zh_sentences(text):
    """Return the Chinese prose's sentences, each a list of its units."""
    text = re.sub(r"`[^`]*`", " CODE ", zh_prose(text))
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    found = []
    for block in re.split(r"\n\s*\n|\n\s*(?:[-*]|\d+\.)\s+", "\n" + text):
        for sentence in re.split(r"(?<=[。！？])", " ".join(block.split())):
            units = re.findall(r"[\u4e00-\u9fff]|[A-Za-z0-9][\w.\-/+]*", sentence)
            if units:
                found.append(units)
    return found


@pytest.mark.parametrize("page", PAIRS)
def test_every_generated_block_is_the_english_pages(page):
    chinese, english = blocks(read(page)), blocks(mirrored(PAIRS[page]))
    assert [b[:2] for b in chinese] == [b[:2] for b in english], (
        f"{page} and {PAIRS[page]} hold other blocks: run make readme"
    )
    for (kind, args, body), (_, _, theirs) in zip(chinese, english):
        if kind == "whatif":  # the measured table the same; the notes in Chinese
            assert body == update_readme.whatif_table(theirs) + update_readme.whatif_notes(
                int(args), "zh-CN"
            ), f"{page}: its whatif {args} block is not the English table with the Chinese notes"
            continue
        differ = [
            (ours, english_line)
            for ours, english_line in zip(body.splitlines(), theirs.splitlines())
            if ours != english_line
        ]
        assert body == theirs, (
            f"{page}: its {kind} {args} block differs from "
            f"{PAIRS[page]}'s (run make readme); first at\n  "
            + "\n  ".join(differ[0] if differ else ["(a line more or less)"])
        )


def test_make_readme_writes_the_english_pages_measured_blocks_into_the_chinese_ones():
    # one measurement, written once: the generator copies a Chinese page's what-if, invariants
    # and questions blocks from its English page (the diffs and badges it renders for both)
    english = "<!-- BEGIN whatif 3 -->\n| measured here |\n<!-- END whatif -->\n"
    chinese = "中文。\n<!-- BEGIN whatif 3 -->\n| an older table |\n<!-- END whatif -->\n"
    assert (
        update_readme.copy_measured(chinese, english)
        == "中文。\n<!-- BEGIN whatif 3 -->\n| measured here |\n"
        + update_readme.whatif_notes(3, "zh-CN")
        + "<!-- END whatif -->\n"
    )
    stale = [
        str(page.relative_to(REPO))
        for page, text in update_readme.rendered_pages().items()
        if text != page.read_text()
    ]
    assert not stale, f"run make readme: {stale}"


@pytest.mark.parametrize("step", [1, 2, 3, 4])
def test_every_what_if_note_is_in_chinese_with_the_english_notes_numbers(step):
    from accelerate_course import patches

    for variant in patches.variants(step):
        assert bool(variant.note) == bool(variant.note_zh), (
            f"{variant.path.name}: a note in one language only (add the line 'zh-CN: ...')"
        )
        assert numbers(variant.note_zh) == numbers(variant.note), (
            f"{variant.path.name}: the Chinese note's numbers differ from the English note's"
        )
        assert not re.search(r"[a-z]{4,} [a-z]{4,} [a-z]{4,}", variant.note_zh), (
            f"{variant.path.name}: its Chinese note holds an English sentence"
        )


@pytest.mark.parametrize("page", PAIRS)
def test_every_number_is_the_english_pages(page):
    chinese, english = numbers(read(page)), numbers(mirrored(PAIRS[page]))
    assert chinese == english, (
        f"numbers only on {page}: {sorted(chinese - english)}; "
        f"only on {PAIRS[page]}: {sorted(english - chinese)}"
    )


@pytest.mark.parametrize("page", PAIRS)
def test_each_english_heading_has_its_chinese_counterpart(page):
    english = english_headings(PAIRS[page])
    missing = [title for _, title in english if title not in HEADINGS]
    assert not missing, f"{PAIRS[page]}: no Chinese heading for {missing} in HEADINGS"
    assert headings(read(page)) == [(level, HEADINGS[title]) for level, title in english]


@pytest.mark.parametrize("page", PAIRS)
def test_each_page_links_its_other_language_at_the_top(page):
    english, chinese = PAIRS[page], page
    top = lambda name: links("\n".join(read(name).splitlines()[:5]))
    assert Path(chinese).name in top(english), f"{english} does not link {chinese} at its top"
    assert Path(english).name in top(chinese), f"{chinese} does not link {english} at its top"


@pytest.mark.parametrize("page", [*CHINESE_PAGES, *PAIRS.values()])
def test_every_relative_link_of_a_chinese_page_resolves(page):
    # every link of a Chinese page; of an English page, its links to Chinese pages
    chinese = page in CHINESE_PAGES
    top = links("\n".join(read(page).splitlines()[:5]))
    for target in links(read(page)):
        path, _, anchor = target.partition("#")
        if not chinese and ".zh-CN." not in path:
            continue
        file = (REPO / page).parent / path if path else REPO / page
        assert file.exists(), f"{page}: {target} does not exist"
        if anchor and file.suffix == ".md":
            name = str(file.resolve().relative_to(REPO))
            assert anchor in anchors(name), f"{page}: {target}: no heading #{anchor} in {name}"
        # a Chinese page links the Chinese page where there is one: the language links at
        # its top and a section the Chinese page does not mirror aside
        english = str(file.resolve().relative_to(REPO)) if file.suffix == ".md" else None
        twin = next((zh for zh, en in PAIRS.items() if en == english), None)
        if chinese and twin and target not in top:
            unmirrored = {slug(title) for title in NOT_MIRRORED.get(english, [])}
            assert anchor in unmirrored, f"{page}: {target}: link the Chinese page, {twin}"


@pytest.mark.parametrize("page", PAIRS)
def test_the_glossary_terms_are_used_and_not_their_variants(page):
    variants = glossary_variants()
    assert {"收集", "进程群", "批次", "分词器", "检查点", "prepare", "gather"} <= set(variants)
    text = without_code(read(page))
    outside_code = re.sub(r"`[^`]*`", "", text)
    found = []
    for variant, term in variants.items():
        if re.fullmatch(r"[A-Za-z]+", variant):  # an English word: only in inline code
            if re.search(rf"\b{variant}\b", outside_code):
                found.append(f"{variant} (write {term})")
        elif re.search(ALLOWED_AROUND.get(variant, re.escape(variant)), outside_code):
            found.append(f"{variant} (write {term})")
    assert not found, f"{page} uses what the glossary ({GLOSSARY}) says not to: {found}"


@pytest.mark.parametrize("page", CHINESE_PAGES)
def test_the_chinese_page_reads_in_short_sentences(page):
    lengths = [len(units) for units in zh_sentences(read(page))]
    long_ones = ["".join(units) for units in zh_sentences(read(page)) if len(units) > LONGEST]
    mean = sum(lengths) / len(lengths)
    assert mean <= MEAN and not long_ones, (
        f"{page}: {mean:.1f} units per sentence on average (goal {MEAN}); "
        f"over {LONGEST}: {long_ones}"
    )


def test_the_measures_count_as_they_say():
    text = (
        "# 标题不算\n\n第一句很短。第二句有 `a long piece of code` 和 GPU！\n\n- 一个列表项"
        "[带链接](https://example.com)\n- 另一个\n\n| 表 | 格 |\n\n```bash\n不算 2\n```\n"
    )
    assert [len(units) for units in zh_sentences(text)] == [5, 7, 8, 3]
    assert numbers(
        "It took 2 min 34 s, 1,377 steps at 5e-5 from 0:35 ([link](a/3.md)).\n"
        "```\n99\n```\n<!-- BEGIN diff a b -->\n98\n<!-- END diff -->\n"
    ) == {"2", "34", "1377", "5e-5", "0:35"}
    assert slug("访问不了 Hub 时") == "访问不了-hub-时"
    assert slug("Why `--deterministic` on a GPU") == "why---deterministic-on-a-gpu"


if __name__ == "__main__":
    for page in sys.argv[1:] or CHINESE_PAGES:
        lengths = [len(units) for units in zh_sentences(read(page))]
        print(
            f"{page}: {len(lengths)} sentences, {sum(lengths) / len(lengths):.1f} units on "
            f"average, longest {max(lengths)}"
        )
