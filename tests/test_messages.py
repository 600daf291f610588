"""The grader's words (accelerate_course/messages.toml): every message in English and in
Chinese with the same fields, every message the code says defined, the English in plain
words, the Chinese with the course's terms, and the language chosen by one setting."""

import re
from pathlib import Path

import pytest
from conftest import REPO

from accelerate_course import check, messages, takehome

# the course's terms (the Hugging Face course's zh-CN words): an English message that uses
# one says it with its Chinese term
GLOSSARY = {
    "process group": "进程组",
    "main process": "主进程",
    "duplicated tail": "重复的尾部样本",
    "validation split": "验证集",
    "optimizer step": "优化步",
    "learning rate": "学习率",
    "predictions": "预测结果",
    "hint": "提示",
    "gather()": "`gather()`",
}


def english_sentences(text):
    """Return the sentences of an English message (a field counts as one word)."""
    text = re.sub(r"\{\w+\}", "X", text)
    return [s for s in re.split(r"(?<=[.?!])\s+", text) if s.strip()]


def test_every_message_is_in_every_language_with_the_same_fields():
    table = messages.table()
    assert len(table) > 80
    for message, texts in table.items():
        assert set(texts) == set(messages.LANGUAGES), message
        assert all(texts[lang].strip() for lang in messages.LANGUAGES), message
        fields = {lang: messages.fields(text) for lang, text in texts.items()}
        assert fields["en"] == fields["zh-CN"], (message, fields)
        # the Chinese is written in Chinese, not left in English
        assert re.search(r"[\u4e00-\u9fff]", texts["zh-CN"]) or texts["zh-CN"] in ("{n} 对句子",), (
            message,
            texts["zh-CN"],
        )


def test_every_message_the_code_says_is_defined():
    table = messages.table()
    said = set()
    for path in [*(REPO / "accelerate_course").glob("*.py")]:
        text = path.read_text()
        said |= set(re.findall(r"""(?:say|refused)\(\s*["']([a-z_]+\.[a-z_0-9]+)["']""", text))
        said |= {f"check.{key}" for key in re.findall(r"""\bcheck\(\s*["'](\w+)["']""", text)}
    # the ones said by key: every check of every table, its kind, every unit
    for points in [*check.POINTS.values(), *(t.points for t in takehome.tasks().values())]:
        said |= {f"check.{key}" for key in points}
        said |= {f"grade.{worth.kind}" for worth in points.values()}
    said |= {"unit.pairs", *(f"unit.{t.unit}" for t in takehome.tasks().values())}
    said |= {f"grade.blocked_{kind}" for kind in (check.PREREQUISITE, check.CORE)}
    said |= {meaning for _, meaning in check.CRASH_MEANINGS}
    assert len(said) > 60
    assert said - set(table) == set()
    # and nothing is defined that nothing says
    assert set(table) - said == set(), set(table) - said


def test_the_english_is_plain_one_idea_per_sentence():
    # the house rule for students' words: mean at most 20 words a sentence, none over 40
    lengths = [
        len(sentence.split())
        for texts in messages.table().values()
        for sentence in english_sentences(texts["en"])
    ]
    longest = max(lengths)
    print(
        f"\n{len(lengths)} sentences: mean {sum(lengths) / len(lengths):.1f} words, "
        f"longest {longest}"
    )
    assert longest <= 40 and sum(lengths) / len(lengths) <= 20


def test_the_chinese_uses_the_courses_terms():
    for message, texts in messages.table().items():
        for english, chinese in GLOSSARY.items():
            if english in texts["en"].lower():
                assert chinese in texts["zh-CN"], (message, english, texts["zh-CN"])


def test_the_class_language_is_one_setting(monkeypatch):
    monkeypatch.delenv("COURSE_LANG", raising=False)
    assert check.check("one_writer", True).name == "One process writes metrics.json and the model"
    monkeypatch.setenv("COURSE_LANG", "zh-CN")
    failed = check.check("one_writer", False, messages.say("hint.writers", n=2))
    assert (failed.name, failed.hint) == (
        "只有一个进程写 metrics.json 和模型",
        "2 个进程写了 metrics.json",
    )
    assert messages.joined(["甲", "乙"]) == "甲；乙"
    monkeypatch.setenv("COURSE_LANG", "fr")
    with pytest.raises(SystemExit) as refused:
        messages.language()
    assert str(refused.value) == (
        "error: COURSE_LANG=fr is not a language of the grader; choose one of en, zh-CN"
    )


def test_results_json_carries_the_class_language(monkeypatch):
    # Gradescope's and GitHub Classroom's results are written from the same words
    monkeypatch.setenv("COURSE_LANG", "zh-CN")
    grading = check.grading_of("3")
    checks = [
        check.check("one_group", True, n=2),
        check.check("whole_split", False, messages.say("hint.writers", n=2), split="408"),
    ]
    results = check.results(grading, Path("train.py"), checks, 12.3)
    assert results["output"] == "train.py 按第 3 课评分：0 / 10 分。"
    gated = check.results(grading, Path("train.py"), checks, 12.3, core_gate=True)
    assert gated["output"].startswith("train.py 按第 3 课评分：0 / 10 分。不得分")
    assert results["tests"][0]["name"].endswith("（前提，不计分）") or results["tests"][0][
        "name"
    ].endswith("(前提，不计分)")
    assert [t["max_score"] for t in results["tests"]] == [0, 3]


def test_pass_and_fail_line_up_in_either_language(monkeypatch):
    # 通过 and 未通过 take 4 and 6 columns of a terminal: the shorter is padded to the longer
    import io

    grading = check.grading_of("3")
    for lang in messages.LANGUAGES:
        monkeypatch.setenv("COURSE_LANG", lang)
        out = io.StringIO()
        check.print_checks(
            grading,
            [check.check("one_writer", True), check.check("one_printer", False, "x")],
            out=out,
        )
        names = [line for line in out.getvalue().splitlines() if not line.startswith("        ")]
        starts = {
            messages.width(line.split(check.check("one_writer", True).name)[0])
            for line in names
            if check.check("one_writer", True).name in line
        } | {
            messages.width(line.split(check.check("one_printer", True).name)[0])
            for line in names
            if check.check("one_printer", True).name in line
        }
        assert len(starts) == 1, (lang, out.getvalue())
