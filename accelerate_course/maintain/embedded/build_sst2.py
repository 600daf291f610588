"""Generate the embedded SST-2-shaped split: common/embedded/sst2/{train,validation}.jsonl.

Run:  python -m accelerate_course.maintain.embedded.build_sst2             (rewrites the two .jsonl files)
      python -m accelerate_course.maintain.embedded.build_sst2 --check     (exit 1 if the committed files differ)

GLUE SST-2 is a single-sentence task: columns sentence, label (1 = positive, 0 = negative)
and idx. This split has its shape, not its size (SST-2 has 67,349 / 872 sentences; this one
1,600 / 400, positive as often as there: about 56 % and 51 %), and its sentences come from the
same news world as the embedded MRPC pairs (accelerate_course/maintain/embedded/build_data.py's names, companies,
places and numbers), so that the embedded tiny BERT, whose vocabulary was learned from
those, reads them: good and bad news, a few of them told with a negation ("did not cut jobs")
so that no single word decides the label. With --dataset embedded-sst2, every step fine-tunes
on it, as the Hugging Face course's "Try it out!" asks for SST-2. Deterministic: the same seed
gives the same files, byte for byte (tests/test_embedded_data.py checks it).
"""

import argparse
import json
import random
from pathlib import Path

from accelerate_course.maintain.embedded.build_data import SAMPLERS, render, write_splits
from common.embedded import SST2 as SST2_DIR

SEED = 20261203
SPLITS = [("train", 1600, 896), ("validation", 400, 204)]  # (split, sentences, positives)

# (slots, template) by label; {slot} a value, [a|b] a synonym, <...> an optional detail
TEMPLATES = {
    1: [
        (
            {"org": "org", "percent": "percent", "quarter": "quarter"},
            "Shares of {org} [rose|climbed|jumped] {percent} after [strong|record|better than expected] {quarter} results.",
        ),
        (
            {"org": "org", "money": "money", "quarter": "quarter"},
            "{org} [reported|posted] a [record|healthy|strong] profit of {money} <in the {quarter}>.",
        ),
        (
            {"person": "person", "plan": "plan", "city": "city"},
            "{person} [praised|welcomed|backed] {plan} <in {city}>, calling it a [great|real] success.",
        ),
        (
            {"team": "team", "other": "team", "score": "score", "day": "day"},
            "The {team} [beat|defeated|routed] the {other} {score} <on {day}> for a [famous|deserved] win.",
        ),
        (
            {"org": "org", "count": "count", "city": "city"},
            "{org} will hire {count} [new workers|engineers|staff] <at its {city} plant>, a welcome boost.",
        ),
        (
            {"product": "product", "org": "org"},
            "Doctors said {org}'s new {product} [works well|was a success|helped patients recover quickly].",
        ),
        (
            {"habit": "habit", "disease": "disease"},
            "Researchers found that {habit} [lowers|cuts|reduces] the risk of {disease}<, good news for millions>.",
        ),
        (
            {"org": "org", "city": "city"},
            "{org} [said|announced] it would not cut jobs <at its {city} plant> after all.",
        ),
        (
            {"person": "person", "role": "role", "org": "org"},
            "{person} was [praised|celebrated] for turning {org} around as its {role}.",
        ),
    ],
    0: [
        (
            {"org": "org", "percent": "percent", "quarter": "quarter"},
            "Shares of {org} [fell|dropped|slumped] {percent} after [weak|poor|disappointing] {quarter} results.",
        ),
        (
            {"org": "org", "money": "money", "quarter": "quarter"},
            "{org} [reported|posted] a [heavy|surprise|record] loss of {money} <in the {quarter}>.",
        ),
        (
            {"person": "person", "plan": "plan", "city": "city"},
            "{person} [criticized|attacked|condemned] {plan} <in {city}>, calling it a [costly|complete] failure.",
        ),
        (
            {"team": "team", "other": "team", "score": "score", "day": "day"},
            "The {team} [lost to|were beaten by|were routed by] the {other} {score} <on {day}> in a [painful|bitter] defeat.",
        ),
        (
            {"org": "org", "count": "count", "city": "city"},
            "{org} will cut {count} jobs <at its {city} plant>, a [hard|heavy] blow to the town.",
        ),
        (
            {"product": "product", "org": "org"},
            "{org} recalled its {product} after [complaints|reports of defects|safety problems].",
        ),
        (
            {"habit": "habit", "disease": "disease"},
            "Researchers found that {habit} [raises|increases|doubles] the risk of {disease}.",
        ),
        (
            {"org": "org", "quarter": "quarter"},
            "Shares of {org} failed to [recover|rise] after [weak|poor] {quarter} results.",
        ),
        (
            {"person": "person", "role": "role", "org": "org"},
            "{person} was [fired|forced out] as {role} of {org} after [a scandal|heavy losses].",
        ),
    ],
}


def sentence(label, rng):
    """Return one sentence of the label's kind."""
    slots_of, template = rng.choice(TEMPLATES[label])
    slots = {}
    for name, kind in slots_of.items():
        value = SAMPLERS[kind](rng)
        while value in slots.values():
            value = SAMPLERS[kind](rng)
        slots[name] = value
    return render(template, slots, rng, keep_optional=0.5)


def generate(seed=SEED):
    """Return {split: [row, ...]}, each row with sentence, label and idx; no sentence twice."""
    rng = random.Random(seed)
    seen, splits = set(), {}
    for split, size, positives in SPLITS:
        labels = [1] * positives + [0] * (size - positives)
        rng.shuffle(labels)
        rows = []
        for label in labels:
            text = sentence(label, rng)
            while text in seen:
                text = sentence(label, rng)
            seen.add(text)
            rows.append({"sentence": text, "label": label, "idx": len(rows)})
        splits[split] = rows
    return splits


def as_jsonl(rows):
    """Return the rows as JSON Lines text, in GLUE SST-2's column order."""
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check",
        action="store_true",
        help="compare with the committed files instead of writing them",
    )
    parser.add_argument("--out", type=Path, default=SST2_DIR)
    args = parser.parse_args()
    write_splits(
        {split: as_jsonl(rows) for split, rows in generate().items()},
        args.out,
        args.check,
        "accelerate_course.maintain.embedded.build_sst2",
    )


if __name__ == "__main__":
    main()
