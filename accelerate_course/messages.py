"""The grader's words, each defined once in every language of the course: messages.toml.

    say("check.one_group", n=2)       -> the check's name in the class's language

The class's language is the environment variable COURSE_LANG (`make check COURSE_LANG=zh-CN`,
and the lab's Makefile, GitHub Classroom workflow and Gradescope autograder set it when the
teacher chose it: docs/teaching.md); English when it is not set. A message is a
str.format template whose {fields} every language shares (tests/test_messages.py checks it).
"""

import os
import string
import sys
import tomllib
import unicodedata
from functools import cache
from pathlib import Path

MESSAGES = Path(__file__).resolve().parent / "messages.toml"
LANGUAGES = ("en", "zh-CN")
DEFAULT = "en"


@cache
def table():
    """Return {message id: {language: template}} (ids as "section.name")."""
    data = tomllib.loads(MESSAGES.read_text(encoding="utf-8"))
    return {
        f"{section}.{name}": texts
        for section, entries in data.items()
        for name, texts in entries.items()
    }


def language():
    """Return the class's language: COURSE_LANG, or English. An unknown one stops the command
    in one line naming the languages there are."""
    chosen = os.environ.get("COURSE_LANG", "").strip() or DEFAULT
    if chosen not in LANGUAGES:
        sys.exit(
            f"error: COURSE_LANG={chosen} is not a language of the grader; choose one of "
            f"{', '.join(LANGUAGES)}"
        )
    return chosen


def fields(template):
    """Return the names of a template's {fields}."""
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def say(message, lang=None, **values):
    """Return a message in the class's language (or `lang`), its fields filled."""
    return table()[message][lang or language()].format(**values)


def then(first, second, lang=None):
    """Return two sentences one after the other: a space between them in English, none in
    Chinese (a sentence there ends with its own full stop, 。)."""
    if not second:
        return first
    return first + ("" if (lang or language()) == "zh-CN" else " ") + second


def joined(parts, lang=None):
    """Return several sentences or clauses as one hint: "; " in English, "；" in Chinese."""
    separator = "；" if (lang or language()) == "zh-CN" else "; "
    return separator.join(part for part in parts if part)


def width(text):
    """Return the columns a terminal gives text: 2 for a wide character (Chinese), else 1."""
    return sum(2 if unicodedata.east_asian_width(char) in "WF" else 1 for char in text)


def padded(text, columns):
    """Return text with spaces after it to fill columns (width() counts them): 通过 and 未通过,
    pass and FAIL, line up."""
    return text + " " * max(0, columns - width(text))
