"""Generate the embedded MRPC-shaped paraphrase corpus: the .jsonl files beside this file.

Run:  python -m accelerate_course.maintain.embedded.build_data             (rewrites the three .jsonl files)
      python -m accelerate_course.maintain.embedded.build_data --check     (exit 1 if the committed files differ)
      python -m accelerate_course.maintain.embedded.build_data --out DIR   (writes them into DIR instead)

The corpus imitates GLUE MRPC: news-style sentence pairs, columns sentence1, sentence2,
label (1 = paraphrase) and idx, split sizes 3,668 / 408 / 1,725 and the real MRPC's label
counts (2,474 / 279 / 1,147 paraphrases, about 68 %).

Every pair describes one or two news events drawn from a dozen event frames (a takeover,
an appointment, a lawsuit, a match result, ...). A frame fills its slots (names, companies,
numbers, dates, places) and renders them through one of several templates, with synonyms
and optional details. So:
- a paraphrase (label 1) renders the same event twice, with a different template (active
  or passive voice, another word order), other synonyms, or an optional detail added or
  dropped;
- a non-paraphrase (label 0) is graded: "easy" pairs describe two unrelated events;
  "medium" pairs share the frame and change two slots; "hard" pairs are near misses that
  change one name, number or date, swap the roles of two participants, or negate or
  reverse the verb.

The generator is deterministic: the same seed gives the same files, byte for byte
(tests/test_embedded_data.py checks it).
"""

import argparse
import json
import random
import re
import sys
from pathlib import Path

from common.embedded import DATA as DATA_DIR  # noqa: E402

SEED = 20240917
# (split, pairs, paraphrases): the sizes and label counts of the real GLUE MRPC
SPLITS = [("train", 3668, 2474), ("validation", 408, 279), ("test", 1725, 1147)]
# how the non-paraphrases are drawn: one changed slot, a swap or a negation is "hard"
NEGATIVE_KINDS = [("easy", 0.30), ("medium", 0.25), ("hard", 0.45)]

# ---------------------------------------------------------------------------- slot values
FIRST = """James Mary Robert Patricia John Jennifer Michael Linda David Elizabeth William Barbara
Richard Susan Joseph Jessica Thomas Sarah Charles Karen Daniel Nancy Matthew Lisa Anthony Betty
Mark Margaret Donald Sandra Steven Ashley Paul Kimberly Andrew Emily Joshua Donna Kenneth Michelle
Kevin Carol Brian Amanda George Melissa Edward Deborah Ronald Stephanie Timothy Rebecca Jason
Laura Jeffrey Helen Ryan Sharon Jacob Cynthia Gary Kathleen Nicholas Amy Eric Shirley Frank Angela
Scott Anna Walter Ruth Raymond Brenda Gregory Pamela Samuel Nicole Patrick Katherine Henry Virginia
Peter Rachel Carl Janet Arthur Maria Ahmed Priya Hiroshi Olga Pierre Ingrid Mateo Chen""".split()
LAST = """Smith Johnson Williams Brown Jones Garcia Miller Davis Rodriguez Martinez Hernandez Lopez
Gonzalez Wilson Anderson Thomas Taylor Moore Jackson Martin Lee Perez Thompson White Harris Sanchez
Clark Ramirez Lewis Robinson Walker Young Allen King Wright Scott Torres Nguyen Hill Flores Green
Adams Nelson Baker Hall Rivera Campbell Mitchell Carter Roberts Gomez Phillips Evans Turner Diaz
Parker Cruz Edwards Collins Reyes Stewart Morris Morales Murphy Cook Rogers Gutierrez Ortiz Morgan
Cooper Peterson Bailey Reed Kelly Howard Ramos Kim Cox Ward Richardson Watson Brooks Chavez Wood
James Bennett Gray Mendoza Ruiz Hughes Price Alvarez Castillo Sanders Patel Myers Long Ross Foster
Kowalski Lindqvist Okafor Tanaka Dubois Rossi Novak Becker""".split()
ORG_HEAD = """Northwind Halcyon Bluestone Meridian Redwood Silverline Crescent Pinnacle Ironbridge
Summit Harbor Granite Evergreen Lakeshore Sterling Atlas Beacon Cobalt Falcon Horizon Keystone
Liberty Magnolia Oakmont Pioneer Quantum Riverside Sapphire Titan Vanguard Westfield Yellowstone
Ardent Brightwater Cedar Dunmore Emberly Foxglove Glenmore Highgate""".split()
ORG_TAIL = """Energy Bank Motors Systems Pharmaceuticals Airlines Foods Networks Insurance Holdings
Steel Media Semiconductor Telecom Retail Chemicals Software Mining Capital Logistics""".split()
CITIES = """Boston Chicago Denver Seattle Houston Atlanta Phoenix Dallas Detroit Miami Portland
Baltimore Cleveland Pittsburgh Sacramento Nashville Memphis Toronto Montreal Vancouver London
Manchester Dublin Paris Berlin Munich Madrid Rome Milan Vienna Zurich Tokyo Osaka Seoul Sydney
Melbourne Auckland Singapore Mumbai Delhi Cairo Nairobi Lagos Lima Bogota""".split()
DAYS = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()
MONTHS = """January February March April May June July August September October November
December""".split()
QUARTERS = ["first quarter", "second quarter", "third quarter", "fourth quarter"]
ROLES = [
    "chief executive",
    "chief financial officer",
    "president",
    "chairman",
    "head of research",
    "general counsel",
    "chief operating officer",
    "head of sales",
]
ISSUES = [
    "a patent dispute",
    "unpaid royalties",
    "a breach of contract",
    "unfair dismissal",
    "a product defect",
    "misleading advertising",
    "a failed merger",
    "pension payments",
    "a data breach",
    "copyright infringement",
]
CRIMES = [
    "a bank robbery",
    "a series of burglaries",
    "an arson attack",
    "a fraud scheme",
    "a car theft ring",
    "a jewelry heist",
    "a hit-and-run crash",
    "an insurance scam",
]
TEAMS = """Lions Tigers Eagles Hawks Bears Wolves Sharks Falcons Rangers Rockets Pirates
Giants Comets Storm Thunder Royals Knights Vikings Panthers Stallions""".split()
PLANS = [
    "a new stadium",
    "a budget increase",
    "a tax cut",
    "a housing plan",
    "a ban on plastic bags",
    "a new bus line",
    "a hotel project",
    "a school merger",
    "a water treatment plant",
]
DISEASES = [
    "heart disease",
    "diabetes",
    "asthma",
    "stroke",
    "lung cancer",
    "dementia",
    "high blood pressure",
    "kidney disease",
]
HABITS = [
    "smoking",
    "regular exercise",
    "eating red meat",
    "drinking coffee",
    "air pollution",
    "a diet rich in fish",
    "lack of sleep",
    "long working hours",
]
PRODUCTS = [
    "smartphone",
    "electric car",
    "laptop",
    "tablet",
    "video game console",
    "smart watch",
    "cancer drug",
    "vaccine",
    "search engine",
    "streaming service",
]


def person(rng):
    return f"{rng.choice(FIRST)} {rng.choice(LAST)}"


def org(rng):
    return f"{rng.choice(ORG_HEAD)} {rng.choice(ORG_TAIL)}"


def money(rng):
    if rng.random() < 0.5:
        return f"${rng.randint(11, 99) / 10:.1f} billion"
    return f"${rng.randint(12, 950)} million"


def percent(rng):
    return f"{rng.randint(2, 39)} percent"


def count(rng):
    return str(rng.choice([rng.randint(12, 99), rng.randint(100, 990), rng.randint(1, 19) * 500]))


def date(rng):
    return f"{rng.choice(MONTHS)} {rng.randint(1, 28)}"


def score(rng):
    a = rng.randint(1, 7)
    return f"{a}-{rng.randint(0, a - 1)}"


def price(rng):
    return f"${rng.randint(5, 180)}.{rng.randint(0, 99):02d}"


def year(rng):
    return str(rng.randint(1998, 2024))


SAMPLERS = {
    "person": person,
    "org": org,
    "money": money,
    "percent": percent,
    "count": count,
    "date": date,
    "day": lambda r: r.choice(DAYS),
    "city": lambda r: r.choice(CITIES),
    "quarter": lambda r: r.choice(QUARTERS),
    "role": lambda r: r.choice(ROLES),
    "issue": lambda r: r.choice(ISSUES),
    "crime": lambda r: r.choice(CRIMES),
    "team": lambda r: r.choice(TEAMS),
    "score": score,
    "plan": lambda r: r.choice(PLANS),
    "disease": lambda r: r.choice(DISEASES),
    "habit": lambda r: r.choice(HABITS),
    "product": lambda r: r.choice(PRODUCTS),
    "price": price,
    "year": year,
}

# ---------------------------------------------------------------------------- event frames
# Template syntax: {slot} is a slot value, [a|b|c] picks one synonym, <...> is an optional
# detail that each rendering keeps or drops. "same" templates state the event; "flip"
# templates state its negation or opposite. "swap" lists slot pairs whose exchange changes
# the meaning; "free_swap" lists pairs whose exchange does not (a meeting of A and B).
FRAMES = [
    {
        "name": "takeover",
        "slots": {"buyer": "org", "target": "org", "money": "money", "day": "day"},
        "swap": [("buyer", "target")],
        "same": [
            "{buyer} [said|announced] <on {day}> that it [had agreed to buy|would acquire|will purchase] {target} for {money}.",
            "{buyer} [agreed to buy|will acquire|is buying] [rival|smaller rival|competitor] {target} for {money}<, the company said on {day}>.",
            "{target} [will be acquired|is being bought|will be taken over] by {buyer} in a deal worth {money}<, the two companies said>.",
            "In a {money} deal <announced on {day}>, {buyer} [agreed to take over|will acquire|is buying] {target}.",
            "{buyer} [will pay|has agreed to pay|is paying] {money} for {target}<, according to a statement released on {day}>.",
        ],
        "flip": [
            "{buyer} [said|announced] <on {day}> that it [had dropped its plan to buy|would not acquire|has abandoned its bid for] {target}.",
            "{buyer} [denied|rejected reports] that it [would buy|was buying|plans to acquire] {target} for {money}<, the company said on {day}>.",
        ],
    },
    {
        "name": "appointment",
        "slots": {"org": "org", "person": "person", "role": "role", "year": "year", "city": "city"},
        "swap": [],
        "same": [
            "{org} [has named|has appointed|named] {person} as its new {role}<, the {city}-based company said>.",
            "{person} [has been named|was appointed|has been appointed] {role} of {org}<, a post he has wanted since {year}>.",
            "{org} [said|announced] that {person}<, who joined the company in {year},> [will become|would become|is to become] its {role}.",
            "The {city}-based {org} [picked|chose|selected] {person} to [serve as|become|be] its next {role}.",
        ],
        "flip": [
            "{org} [has fired|has dismissed|ousted] {person} as its {role}<, the {city}-based company said>.",
            "{person} [has resigned|stepped down|has quit] as {role} of {org}<, a post held since {year}>.",
        ],
    },
    {
        "name": "earnings",
        "slots": {"org": "org", "money": "money", "quarter": "quarter", "percent": "percent"},
        "swap": [],
        "same": [
            "{org} [reported|posted|announced] a {quarter} profit of {money}<, up {percent} from a year earlier>.",
            "{org}'s {quarter} [profit|net income|earnings] [rose|climbed|grew] to {money}<, an increase of {percent}>.",
            "[Profit|Net income|Earnings] at {org} [rose|climbed|grew] to {money} in the {quarter}<, the company said>.",
            "In the {quarter}, {org} [earned|made|booked] {money}<, {percent} more than a year ago>.",
        ],
        "flip": [
            "{org} [reported|posted|announced] a {quarter} loss of {money}<, down {percent} from a year earlier>.",
            "{org}'s {quarter} [profit|net income|earnings] [fell|dropped|slid] to {money}<, a decline of {percent}>.",
        ],
    },
    {
        "name": "shares",
        "slots": {"org": "org", "percent": "percent", "price": "price", "day": "day"},
        "swap": [],
        "same": [
            "Shares of {org} [rose|climbed|gained] {percent} <on {day}> to close at {price}.",
            "{org} shares [rose|climbed|gained] {percent} <in trading on {day}><, ending the day at {price}>.",
            "{org}'s stock [closed|ended] {percent} higher at {price} <on {day}>.",
            "<On {day},> {org} stock [jumped|rose|advanced] {percent}, [closing|finishing|ending] at {price}.",
        ],
        "flip": [
            "Shares of {org} [fell|dropped|slid] {percent} <on {day}> to close at {price}.",
            "{org}'s stock [closed|ended] {percent} lower at {price} <on {day}>.",
        ],
    },
    {
        "name": "lawsuit",
        "slots": {
            "plaintiff": "person",
            "defendant": "org",
            "issue": "issue",
            "city": "city",
            "money": "money",
        },
        "swap": [],
        "same": [
            "{plaintiff} [sued|has sued|filed a lawsuit against] {defendant} over {issue}<, seeking {money} in damages>.",
            "{defendant} [was sued|has been sued] by {plaintiff} over {issue} <in a federal court in {city}>.",
            "<In a complaint filed in {city},> {plaintiff} [accused {defendant} of|blamed {defendant} for] {issue}<, asking for {money}>.",
            "A lawsuit [brought|filed] by {plaintiff} [accuses|charges] {defendant} [over|in connection with] {issue}.",
        ],
        "flip": [
            "{plaintiff} [dropped|withdrew|settled] a lawsuit against {defendant} over {issue}<, court papers in {city} show>.",
            "A judge [dismissed|threw out|rejected] the lawsuit [brought|filed] by {plaintiff} against {defendant} over {issue}.",
        ],
    },
    {
        "name": "arrest",
        "slots": {
            "city": "city",
            "suspect": "person",
            "crime": "crime",
            "day": "day",
            "count": "count",
        },
        "swap": [],
        "same": [
            "Police in {city} [arrested|detained|took into custody] {suspect} <on {day}> in connection with {crime}.",
            "{suspect} was [arrested|detained|taken into custody] by {city} police <on {day}> [over|in connection with|after] {crime}.",
            "<On {day},> {city} police [said|announced] they had [arrested|detained] {suspect}, [a suspect|the main suspect] in {crime}.",
            "[Officers|Detectives|Police] in {city} [arrested|detained] {suspect} after {crime}<, one of {count} cases this year>.",
        ],
        "flip": [
            "Police in {city} [released|freed|cleared] {suspect} <on {day}> after questioning in connection with {crime}.",
            "{city} police said <on {day}> that {suspect} was [not a suspect|no longer a suspect|not involved] in {crime}.",
        ],
    },
    {
        "name": "layoffs",
        "slots": {"org": "org", "count": "count", "city": "city", "year": "year"},
        "swap": [],
        "same": [
            "{org} [will cut|plans to cut|is eliminating] {count} jobs at its {city} [plant|factory|site]<, the company said>.",
            "{count} jobs [will be cut|are being eliminated|will go] at the {city} [plant|factory|site] of {org}.",
            "<Citing weak demand,> {org} [said|announced] it would [lay off|cut|shed] {count} workers in {city}.",
            "About {count} workers at {org}'s {city} [plant|factory|site] will [lose their jobs|be laid off]<, the first cuts since {year}>.",
        ],
        "flip": [
            "{org} [will hire|plans to hire|is adding] {count} workers at its {city} [plant|factory|site]<, the company said>.",
            "{org} [said|announced] it would not [cut|eliminate] any of the {count} jobs at its {city} [plant|factory|site].",
        ],
    },
    {
        "name": "meeting",
        "slots": {"a": "person", "b": "person", "city": "city", "day": "day", "issue": "issue"},
        "swap": [],
        "free_swap": [("a", "b")],
        "same": [
            "{a} [met with|held talks with|sat down with] {b} in {city} <on {day}>.",
            "{a} and {b} [met|held talks] in {city} <on {day}><, officials said>.",
            "<On {day},> {a} and {b} [discussed|talked about] {issue} at a meeting in {city}.",
            "In {city}<, on {day}>, {a} [met|talked with] {b} to [discuss|talk about] {issue}.",
        ],
        "flip": [
            "{a} [cancelled|called off|postponed] a meeting with {b} in {city} <on {day}>.",
            "{a} [refused|declined] to meet {b} in {city} <on {day}>.",
        ],
    },
    {
        "name": "match",
        "slots": {
            "winner": "team",
            "loser": "team",
            "score": "score",
            "city": "city",
            "day": "day",
        },
        "swap": [("winner", "loser")],
        "same": [
            "The {winner} [beat|defeated|edged] the {loser} {score} in {city} <on {day}>.",
            "The {loser} [lost|fell] {score} to the {winner} <on {day}> in {city}.",
            "<Playing in {city},> the {winner} [won|claimed] a {score} [victory|win] over the {loser}<, on {day}>.",
            "The {winner} [earned|secured|picked up] a {score} win against the {loser} in {city}.",
        ],
        "flip": [
            "The {winner} and the {loser} [tied|drew|played to a draw] in {city} <on {day}>.",
            "The game between the {winner} and the {loser} in {city} was [cancelled|postponed|called off] <on {day}>.",
        ],
    },
    {
        "name": "vote",
        "slots": {"city": "city", "plan": "plan", "count": "count", "date": "date"},
        "swap": [],
        "same": [
            "The {city} city council [voted to approve|approved|passed] {plan} <on {date}>.",
            "{plan} was [approved|passed|backed] by the {city} city council<, in a vote on {date}>.",
            "<On {date},> council members in {city} [voted in favor of|backed|approved] {plan}<, which had drawn {count} letters of support>.",
            "[Lawmakers|Council members|Officials] in {city} [gave final approval to|approved] {plan} <on {date}>.",
        ],
        "flip": [
            "The {city} city council [voted against|rejected|blocked] {plan} <on {date}>.",
            "{plan} was [rejected|voted down|blocked] by the {city} city council<, in a vote on {date}>.",
        ],
    },
    {
        "name": "study",
        "slots": {"habit": "habit", "disease": "disease", "percent": "percent", "count": "count"},
        "swap": [],
        "same": [
            "A [study|report|survey] <of {count} adults> found that {habit} [raises|increases] the risk of {disease} by {percent}.",
            "{habit} [raises|increases|pushes up] the risk of {disease} by {percent}<, according to a study of {count} adults>.",
            "[Researchers|Scientists] found that people exposed to {habit} were {percent} more likely to develop {disease}.",
            "The risk of {disease} is {percent} higher [among|for] people exposed to {habit}<, a new study says>.",
        ],
        "flip": [
            "A [study|report|survey] <of {count} adults> found that {habit} [lowers|reduces|cuts] the risk of {disease} by {percent}.",
            "[Researchers|Scientists] found no link between {habit} and {disease}<, in a study of {count} adults>.",
        ],
    },
    {
        "name": "launch",
        "slots": {
            "org": "org",
            "product": "product",
            "price": "price",
            "date": "date",
            "city": "city",
        },
        "swap": [],
        "same": [
            "{org} [will launch|plans to release|is set to unveil] its new {product} on {date}<, priced at {price}>.",
            "The new {product} from {org} [will go on sale|will be released|hits stores] on {date}<, at a price of {price}>.",
            "<At an event in {city},> {org} said it [would launch|will release|plans to unveil] a new {product} on {date}.",
            "On {date}, {org} [will start selling|will launch|will release] a new {product}<, the company said in {city}>.",
        ],
        "flip": [
            "{org} [has delayed|has postponed|has cancelled] the launch of its new {product}<, planned for {date}>.",
            "{org} [will stop selling|will recall|will withdraw] its {product} after {date}<, the company said in {city}>.",
        ],
    },
]

TOKEN = re.compile(r"<[^>]*>|\[[^\]]*\]|\{[a-z]+\}|[^<\[{]+")


def render(template, slots, rng, keep_optional, top=True):
    """Return the template with slots filled, one synonym picked per [..] group, and each
    <optional detail> kept with probability keep_optional."""
    out = []
    for piece in TOKEN.findall(template):
        if piece.startswith("<"):
            if rng.random() < keep_optional:
                out.append(render(piece[1:-1], slots, rng, 1.0, top=False))
        elif piece.startswith("["):
            out.append(render(rng.choice(piece[1:-1].split("|")), slots, rng, 1.0, top=False))
        elif piece.startswith("{"):
            out.append(slots[piece[1:-1]])
        else:
            out.append(piece)
    text = "".join(out)
    if not top:
        return text
    text = re.sub(r"\s+", " ", text).replace(" ,", ",").replace(" .", ".").replace(",.", ".")
    text = text.replace("s's ", "s' ").strip()
    return text[0].upper() + text[1:]


def fill(frame, rng):
    """Return fresh values for every slot of a frame, distinct for slots of the same kind."""
    slots = {}
    for name, kind in frame["slots"].items():
        value = SAMPLERS[kind](rng)
        while value in slots.values():
            value = SAMPLERS[kind](rng)
        slots[name] = value
    return slots


def change(frame, slots, names, rng):
    """Return a copy of slots with each slot in names given a new, different value."""
    new = dict(slots)
    for name in names:
        kind = frame["slots"][name]
        value = SAMPLERS[kind](rng)
        while value in new.values():
            value = SAMPLERS[kind](rng)
        new[name] = value
    return new


def shows(sentence, value):
    """Return True if the slot value appears in the sentence as whole words."""
    return re.search(r"(?<![\w$])" + re.escape(value) + r"(?!\w)", sentence) is not None


def two_renderings(
    frame, slots1, slots2, rng, same_template_p, templates2=None, visible=(), mirror=False
):
    """Render an event twice; the second from templates2 if given. The two strings differ,
    and the slots named in visible appear in both (a changed detail that one sentence
    leaves out would not make the pair a non-paraphrase). mirror=True renders a shared
    template with the same synonyms and details, so that only the slots differ."""
    for _ in range(50):
        t1 = rng.choice(frame["same"])
        if templates2 is not None:
            t2 = rng.choice(templates2)
        elif rng.random() < same_template_p:
            t2 = t1
        else:
            t2 = rng.choice([t for t in frame["same"] if t != t1])
        state = rng.getstate()
        s1 = render(t1, slots1, rng, 0.6)
        if mirror and t2 == t1:
            rng.setstate(state)
        s2 = render(t2, slots2, rng, 0.6)
        if s1 != s2 and all(shows(s1, slots1[v]) and shows(s2, slots2[v]) for v in visible):
            return s1, s2
    return None, None  # these slots cannot show in both sentences: the caller draws again


def paraphrase(rng):
    """Return (sentence1, sentence2, kind) stating the same event in two ways."""
    frame = rng.choice(FRAMES)
    slots = fill(frame, rng)
    slots2 = dict(slots)
    for a, b in frame.get("free_swap", []):
        if rng.random() < 0.5:
            slots2[a], slots2[b] = slots[b], slots[a]
    s1, s2 = two_renderings(frame, slots, slots2, rng, same_template_p=0.5)
    return s1, s2, "paraphrase"


def non_paraphrase(rng, difficulty):
    """Return (sentence1, sentence2, kind) for two sentences that do not say the same."""
    while True:
        s1, s2, kind = draw_non_paraphrase(rng, difficulty)
        if s1 is not None:
            return s1, s2, kind


def draw_non_paraphrase(rng, difficulty):
    """Return one attempt at a non-paraphrase; sentences are None if it failed."""
    frame = rng.choice(FRAMES)
    slots = fill(frame, rng)
    if difficulty == "easy":
        other = rng.choice([f for f in FRAMES if f is not frame])
        s1, _ = two_renderings(frame, slots, slots, rng, 0.0)
        s2, _ = two_renderings(other, fill(other, rng), fill(other, rng), rng, 0.0)
        return s1, s2, "easy: unrelated event"
    if difficulty == "medium":
        names = rng.sample(sorted(frame["slots"]), 2)
        s1, s2 = two_renderings(
            frame, slots, change(frame, slots, names, rng), rng, 0.5, visible=names
        )
        return s1, s2, "medium: two slots changed"
    moves = ["slot", "slot", "flip"] + (["swap"] if frame["swap"] else [])
    move = rng.choice(moves)
    if move == "slot":
        name = rng.choice(sorted(frame["slots"]))
        kind = frame["slots"][name]
        s1, s2 = two_renderings(
            frame, slots, change(frame, slots, [name], rng), rng, 0.5, visible=[name], mirror=True
        )
        return s1, s2, f"hard: one {kind} changed"
    if move == "swap":
        a, b = rng.choice(frame["swap"])
        swapped = dict(slots)
        swapped[a], swapped[b] = slots[b], slots[a]
        s1, s2 = two_renderings(frame, slots, swapped, rng, 0.5, visible=[a, b], mirror=True)
        return s1, s2, "hard: roles swapped"
    s1, s2 = two_renderings(frame, slots, slots, rng, 0.0, templates2=frame["flip"])
    return s1, s2, "hard: negated or reversed"


def generate(seed=SEED):
    """Return {split: [row, ...]}; each row has sentence1, sentence2, label, idx and kind
    (kind says how the pair was made; it is not written to the data files)."""
    rng = random.Random(seed)
    seen = set()
    splits = {}
    for split, size, positives in SPLITS:
        labels = [1] * positives + [0] * (size - positives)
        rng.shuffle(labels)
        rows = []
        for label in labels:
            while True:
                if label == 1:
                    s1, s2, kind = paraphrase(rng)
                else:
                    difficulty = rng.choices(
                        [k for k, _ in NEGATIVE_KINDS], [w for _, w in NEGATIVE_KINDS]
                    )[0]
                    s1, s2, kind = non_paraphrase(rng, difficulty)
                if rng.random() < 0.5:  # either sentence may come first
                    s1, s2 = s2, s1
                if (s1, s2) not in seen and (s2, s1) not in seen:
                    break
            seen.add((s1, s2))
            rows.append(
                {"sentence1": s1, "sentence2": s2, "label": label, "idx": len(rows), "kind": kind}
            )
        splits[split] = rows
    return splits


def as_jsonl(rows):
    """Return the rows as JSON Lines text, columns in MRPC's order, without 'kind'."""
    return "".join(
        json.dumps(
            {k: r[k] for k in ("sentence1", "sentence2", "label", "idx")}, ensure_ascii=False
        )
        + "\n"
        for r in rows
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check",
        action="store_true",
        help="compare with the committed files instead of writing them",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=DATA_DIR,
        help="the folder to write (default: this file's own folder)",
    )
    args = parser.parse_args()
    write_splits(
        {split: as_jsonl(rows) for split, rows in generate().items()},
        args.out,
        args.check,
        "accelerate_course.maintain.embedded.build_data",
    )


def write_splits(texts, out, check, builder):
    """Write each split's JSON Lines text ({split: text}) as out/<split>.jsonl, or, with
    check, exit with one line naming the files that differ from it (builder: the module to
    run to write them)."""
    out.mkdir(parents=True, exist_ok=True)
    stale = []
    for split, text in texts.items():
        path = out / f"{split}.jsonl"
        if check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(path.name)
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path} ({text.count(chr(10))} rows)")
    if stale:
        sys.exit(f"error: {', '.join(stale)} differ from the generator; run python -m {builder}")


if __name__ == "__main__":
    main()
