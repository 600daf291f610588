"""The embedded MRPC-shaped corpus: reproducible, MRPC's shape, and pairs as designed."""

import json
import re
from collections import Counter

import pytest

from accelerate_course.maintain.embedded.build_data import DATA_DIR, as_jsonl, generate

EXPECTED = {"train": (3668, 2474), "validation": (408, 279), "test": (1725, 1147)}


@pytest.fixture(scope="module")
def generated():
    return generate()


def read_rows(split):
    with open(DATA_DIR / f"{split}.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_generator_reproduces_the_committed_files_byte_for_byte(generated):
    for split in EXPECTED:
        committed = (DATA_DIR / f"{split}.jsonl").read_bytes()
        assert as_jsonl(generated[split]).encode("utf-8") == committed, split


@pytest.mark.parametrize("split", EXPECTED)
def test_split_has_mrpc_columns_sizes_and_label_counts(split):
    rows = read_rows(split)
    size, paraphrases = EXPECTED[split]
    assert len(rows) == size
    assert all(list(r) == ["sentence1", "sentence2", "label", "idx"] for r in rows)
    assert [r["idx"] for r in rows] == list(range(size))
    assert Counter(r["label"] for r in rows) == {1: paraphrases, 0: size - paraphrases}
    assert 0.66 < paraphrases / size < 0.69  # about 68 %, as in GLUE MRPC


def test_no_pair_appears_in_two_splits():
    seen = {}
    for split in EXPECTED:
        for r in read_rows(split):
            key = frozenset((r["sentence1"], r["sentence2"]))
            assert key not in seen, f"{r} is also in {seen.get(key)}"
            seen[key] = split


def words(text):
    return set(re.findall(r"[\w$.-]+", text.lower()))


def test_non_paraphrases_are_graded_and_near_misses_share_most_words(generated):
    rows = generated["train"]
    kinds = Counter(r["kind"].split(":")[0] for r in rows if r["label"] == 0)
    negatives = sum(kinds.values())
    # the generator's mix is 30 / 25 / 45 %; a few points either way is sampling noise
    assert abs(kinds["easy"] / negatives - 0.30) < 0.05
    assert abs(kinds["hard"] / negatives - 0.45) < 0.05

    def overlap(r):
        a, b = words(r["sentence1"]), words(r["sentence2"])
        return len(a & b) / len(a | b)

    def mean_overlap(kind):
        values = [overlap(r) for r in rows if r["kind"].startswith(kind)]
        return sum(values) / len(values)

    # easy pairs share little; one-slot near misses share more than paraphrases do
    assert mean_overlap("easy") < 0.2
    assert mean_overlap("hard: one") > mean_overlap("paraphrase")


def test_vocabulary_and_structure_vary():
    rows = read_rows("train")
    sentences = [s for r in rows for s in (r["sentence1"], r["sentence2"])]
    vocabulary = set().union(*(words(s) for s in sentences))
    assert len(vocabulary) > 900
    assert len(set(sentences)) > 0.95 * len(sentences)
    first_words = Counter(s.split()[0] for s in sentences)
    assert len(first_words) > 150


def test_the_sst2_shaped_generator_reproduces_its_files_and_no_sentence_repeats():
    from accelerate_course.maintain.embedded import build_sst2

    generated = build_sst2.generate()
    sentences = []
    for split, size, positives in build_sst2.SPLITS:
        path = build_sst2.SST2_DIR / f"{split}.jsonl"
        assert build_sst2.as_jsonl(generated[split]).encode("utf-8") == path.read_bytes(), split
        rows = generated[split]
        assert len(rows) == size and sum(r["label"] for r in rows) == positives
        sentences += [r["sentence"] for r in rows]
    assert len(set(sentences)) == len(sentences)
    # a few are told with a negation, so that no single word gives the label
    assert any("would not cut jobs" in s for s in sentences)
    assert any("failed to" in s for s in sentences)
