"""Build the embedded tiny BERT checkpoint: common/embedded/checkpoint/.

Run:  python -m accelerate_course.maintain.embedded.build_checkpoint              (about 15 minutes, one core)
      python -m accelerate_course.maintain.embedded.build_checkpoint --out DIR    (into DIR instead)
      python -m accelerate_course.maintain.embedded.build_checkpoint --seed 2     (another pretraining seed)
      python -m accelerate_course.maintain.embedded.build_checkpoint --steps 20   (a short one, to compare)
      make verify-embedded      (rebuilds data and checkpoint elsewhere and compares them)

What it does, like a (very) small version of BERT's own recipe:
1. learns a cased WordPiece vocabulary of 2,048 tokens from the sentences of the embedded
   train split (learn_wordpiece_vocabulary: the `tokenizers` library's merge procedure,
   with ties broken in a fixed order) and wraps it in a transformers BertTokenizer;
2. creates a BERT of 2 layers, hidden size 128 (BertForPreTraining: encoder, pooler, a
   masked-language-model head and a two-way pair head);
3. pretrains it on the train split's sentences only, never its labels, with two
   self-supervised objectives:
   - masked language modelling (15 % of the tokens, BERT's 80/10/10 rule);
   - a pair objective in the spirit of BERT's next-sentence prediction: does sentence B say
     the same as A (A itself, or A told with one detail less or more), or is it A with a word
     replaced, two words swapped, a "not" inserted, or another sentence altogether? And, for
     every token, does its word occur in the other sentence (a loss weighted 3 times)? A
     2-layer model does not learn to compare two segments word by word from 3,668 labelled
     pairs alone (see init_word_matching_head for the one shortcut taken);
4. saves model and tokenizer with save_pretrained (safetensors), so that they load like a hub
   checkpoint, and writes the build's trace (accelerate_course/maintain/embedded/trace.py) beside the folder.

The same bytes every time: the vocabulary is learned in a fixed order, every random draw
comes from the seed, and the pretraining runs on one thread with kernels that do not depend
on the processor: PyTorch's AVX2 kernels (ATEN_CPU_CAPABILITY=avx2, set before torch starts:
main() restarts the builder with it), MKL on its processor-independent path
(MKL_CBWR=COMPATIBLE), and oneDNN off (it picks its kernels by the processor's vector width).
docs/embedded-default.md says what was measured and on which processors.
"""

import argparse
import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy
import torch
from tokenizers import normalizers, pre_tokenizers
from transformers import BertConfig, BertForPreTraining, BertTokenizer, get_scheduler, set_seed

from accelerate_course.maintain.embedded.trace import (
    OP_STEPS,
    TRACE_FILE,
    OpRecorder,
    digest,
    processor,
)
from accelerate_course.maintain.embedded.trace import save as save_trace
from common.embedded import CHECKPOINT as CHECKPOINT_DIR
from common.embedded import DATA as DATA_DIR

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
VOCAB_SIZE = 2048
MODEL = dict(
    hidden_size=128,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=512,
    max_position_embeddings=160,
)
PRETRAIN = dict(steps=3000, batch_size=32, lr=1e-3, warmup=0.06, seed=1, token_weight=3.0)
# the CPU kernels every build uses (see the docstring); torch reads them when it starts, so
# main() restarts the builder with them set
PINNED_KERNELS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE"}


def train_sentences(data_dir=DATA_DIR):
    """Return every sentence of the embedded train split (both columns), labels unused."""
    sentences = []
    with open(Path(data_dir) / "train.jsonl", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            sentences += [row["sentence1"], row["sentence2"]]
    return sentences


def learn_wordpiece_vocabulary(sentences, vocab_size=VOCAB_SIZE, min_frequency=2):
    """Return a WordPiece vocabulary (a list of tokens, the special tokens first) learned from
    the sentences the way the `tokenizers` library's WordPieceTrainer learns one: split into
    words as BERT does, start from single characters ("##" marks a piece inside a word), and
    merge the most frequent adjacent pair again and again until the vocabulary is full or no
    pair occurs min_frequency times.

    Written out here instead of calling that trainer because the trainer breaks ties between
    equally frequent pairs by the order of a hash map, which changes from process to process
    (three runs gave three vocabularies, one with other tokens). Here a tie goes to the pair
    that comes first in alphabetical order, so the same sentences always give the same list.
    """
    normalizer = normalizers.BertNormalizer(lowercase=False, strip_accents=False)
    pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    counts = Counter()
    for sentence in sentences:
        for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(sentence)):
            counts[word] += 1
    words = sorted(counts)  # a fixed order for everything below
    pieces = {w: [w[0]] + ["##" + c for c in w[1:]] for w in words}
    vocabulary = list(SPECIAL_TOKENS)
    vocabulary += sorted({p for w in words for p in pieces[w]} - set(vocabulary))
    known = set(vocabulary)
    while len(vocabulary) < vocab_size:
        pairs = Counter()
        for w in words:
            split = pieces[w]
            for a, b in zip(split, split[1:]):
                pairs[a, b] += counts[w]
        if not pairs:
            break
        (a, b), count = min(pairs.items(), key=lambda item: (-item[1], item[0]))
        if count < min_frequency:
            break
        merged = a + b[2:]
        for w in words:
            split = pieces[w]
            i = 0
            while i < len(split) - 1:
                if split[i] == a and split[i + 1] == b:
                    split[i : i + 2] = [merged]
                i += 1
        if merged not in known:
            vocabulary.append(merged)
            known.add(merged)
    return vocabulary


def build_tokenizer(sentences):
    """Return a cased BERT WordPiece tokenizer (a transformers BertTokenizer) whose
    vocabulary learn_wordpiece_vocabulary learned from the sentences."""
    vocabulary = learn_wordpiece_vocabulary(sentences)
    # BertTokenizer builds the standard BERT pipeline around this vocabulary (cased here):
    # [CLS] A [SEP] B [SEP] with token_type_ids 0 and 1, exactly like bert-base-cased's
    return BertTokenizer(
        vocab={token: i for i, token in enumerate(vocabulary)},
        do_lower_case=False,
        strip_accents=False,
        model_max_length=MODEL["max_position_embeddings"],
    )


def bare(word):
    """Return a word without the punctuation around it, for comparing words."""
    return word.strip(".,;:'\"")


def clauses(sentence):
    """Return the parts of a sentence between its commas, the final period dropped:
    "A, b, c." gives ["A", "b", "c"]."""
    return sentence.rstrip(".").split(", ")


def restate(sentence, sentences, rng):
    """Return the words of the sentence told with one detail less or more, the way a
    paraphrase in MRPC often differs from its pair: half the time its shortest part after the
    first comma dropped, else the shortest such part of another sentence added at its end
    (one the sentence does not already have). Returns the sentence's own words if it has no
    part to drop and no other sentence offers one to add."""
    parts = clauses(sentence)
    if len(parts) > 1 and rng.random() < 0.5:
        shortest = min(range(1, len(parts)), key=lambda i: len(parts[i].split()))
        return (", ".join(parts[:shortest] + parts[shortest + 1 :]) + ".").split()
    for donor in rng.sample(sentences, min(50, len(sentences))):
        extra = clauses(donor)[1:]
        if extra:
            part = min(extra, key=lambda p: len(p.split()))
            if part not in parts:
                return (", ".join(parts + [part]) + ".").split()
    return sentence.split()


def corrupt(sentence, sentences, rng):
    """Return (words_b, different) for the pair objective. B is A itself a fifth of the
    time, A restated with one detail less or more (restate) as often, both "the same"; else
    A with one to three words replaced by random words of other sentences; A with one word
    replaced by the word at the same place in another sentence that starts with the same two
    words (a near miss: another name, number or city in the same frame); two words swapped;
    "not" inserted; or another sentence altogether. different is 1 unless B is A or A
    restated."""
    words = sentence.split()
    move = rng.random()
    if move < 0.2:
        return words, 0
    if move < 0.35:
        return restate(sentence, sentences, rng), 0
    if move < 0.5:
        for i in rng.sample(range(len(words)), min(len(words), rng.choice([1, 1, 1, 2, 3]))):
            words[i] = rng.choice(rng.choice(sentences).split())
    elif move < 0.7:
        # a near miss: a word from the same place in a sentence that starts the same way
        donors = [d for d in rng.sample(sentences, 200) if d.split()[:2] == words[:2]]
        for donor in donors:
            d = donor.split()
            places = [i for i in range(2, min(len(d), len(words))) if d[i] != words[i]]
            if places:
                i = rng.choice(places)
                words[i] = d[i]
                break
    elif move < 0.78:
        i, j = rng.sample(range(len(words)), 2)
        words[i], words[j] = words[j], words[i]
    elif move < 0.83:
        words.insert(rng.randrange(1, len(words)), "not")
    else:
        words = rng.choice(sentences).split()
    return words, int(words != sentence.split())


def pair_batch(tokenizer, firsts, seconds):
    """Return the tokenized pairs and, for every token, 1.0 if its word does not occur in
    the other sentence (-100 for special and padding tokens): the dense part of the pair
    objective, which shows the encoder where two sentences differ."""
    batch = tokenizer(firsts, seconds, is_split_into_words=True, padding=True, return_tensors="pt")
    labels = torch.full(batch["input_ids"].shape, -100.0)
    for row, (a, b) in enumerate(zip(firsts, seconds)):
        in_a, in_b = {bare(w) for w in a}, {bare(w) for w in b}
        sequence_ids = batch.sequence_ids(row)
        for position, word in enumerate(batch.word_ids(row)):
            if word is None:
                continue
            if sequence_ids[position] == 0:
                labels[row, position] = float(bare(a[word]) not in in_b)
            else:
                labels[row, position] = float(bare(b[word]) not in in_a)
    return batch, labels


def mask_tokens(input_ids, tokenizer, special_mask, gen):
    """Return (masked input_ids, labels) with BERT's masking: 15 % of the ordinary tokens are
    chosen; of those 80 % become [MASK], 10 % a random token, 10 % stay."""
    labels = input_ids.clone()
    chosen = (torch.rand(input_ids.shape, generator=gen) < 0.15) & ~special_mask
    labels[~chosen] = -100
    masked = input_ids.clone()
    to_mask = chosen & (torch.rand(input_ids.shape, generator=gen) < 0.8)
    masked[to_mask] = tokenizer.mask_token_id
    to_random = chosen & ~to_mask & (torch.rand(input_ids.shape, generator=gen) < 0.5)
    masked[to_random] = torch.randint(
        len(SPECIAL_TOKENS), len(tokenizer), input_ids.shape, generator=gen
    )[to_random]
    return masked, labels


def init_word_matching_head(model, scale=1.5, seed=0):
    """Set the query and key projections of the first attention head of layer 1 to the same
    random orthonormal map, so that from the start each word attends most to the words that
    equal it, in either sentence.

    BERT learns to line up equal words across its two segments from billions of words; a
    2-layer model pretrained for a few minutes on 7,000 sentences does not find it at all
    (its pair objective stays at chance). Starting one head there is the shortcut; every
    weight, this head's included, is then trained as usual.
    """
    attention = model.bert.encoder.layer[0].attention.self
    head = attention.attention_head_size
    hidden = model.config.hidden_size
    gen = torch.Generator().manual_seed(seed)
    rows = torch.linalg.qr(torch.randn(hidden, head, generator=gen))[0].T  # head x hidden
    with torch.no_grad():
        for projection in (attention.query, attention.key):
            projection.weight[:head] = scale * rows
            projection.bias[:head] = 0.0


def correctly_rounded_sqrt(tensor):
    """Return the square root of a float32 CPU tensor, each element correctly rounded (IEEE
    754), on every processor. NumPy's float32 sqrt is the processor's own square-root
    instruction, which IEEE 754 requires to round correctly; torch.sqrt on some processors
    is not (on AMD EPYC Zen 3 and Zen 4, about 1 element in 5 is one unit in the last place
    off: docs/embedded-default.md)."""
    return torch.from_numpy(numpy.sqrt(tensor.numpy()))


class AdamW(torch.optim.AdamW):
    """torch's AdamW, whose update it repeats operation for operation (torch 2.13's
    _single_tensor_adam, the one that runs on the CPU: decoupled weight decay, no amsgrad),
    except that the second moment's square root is correctly_rounded_sqrt's: the builder's
    weights then do not depend on how a processor rounds torch.sqrt."""

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            lr, (beta1, beta2) = group["lr"], group["betas"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self.state[param]
                if not state:  # as torch's AdamW starts its state
                    state["step"] = torch.tensor(0.0, dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(
                        param, memory_format=torch.preserve_format
                    )
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                state["step"] += 1
                param.mul_(1 - lr * group["weight_decay"])
                exp_avg.lerp_(param.grad, 1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(param.grad, param.grad, value=1 - beta2)
                step = state["step"].item()
                step_size = lr / (1 - beta1**step)
                bias_correction2_sqrt = (1 - beta2**step) ** 0.5
                denom = (correctly_rounded_sqrt(exp_avg_sq) / bias_correction2_sqrt).add_(
                    group["eps"]
                )
                param.addcdiv_(exp_avg, denom, value=-step_size)


def pretrain(model, tokenizer, sentences, seed, steps=PRETRAIN["steps"], trace=None):
    """Pretrain in place: masked LM on single sentences, plus the pair objective (the pair
    head on [CLS] and a token head that is thrown away afterwards, as ELECTRA's is).
    trace: a dict that gets the build's trace (accelerate_course/maintain/embedded/trace.py): the hashed
    operations of the first OP_STEPS steps and the parameters' hash after every step."""
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    token_head = torch.nn.Linear(model.config.hidden_size, 1)
    bs = PRETRAIN["batch_size"]
    parameters = list(model.parameters()) + list(token_head.parameters())
    optimizer = AdamW(parameters, lr=PRETRAIN["lr"], weight_decay=0.01)
    scheduler = get_scheduler("linear", optimizer, int(PRETRAIN["warmup"] * steps), steps)
    model.train()
    if trace is not None:
        trace.update(ops=[], steps=[digest(parameters)])
    start = time.time()
    for step in range(1, steps + 1):
        recorder = OpRecorder(model) if trace is not None and step <= OP_STEPS else None
        if recorder:
            recorder.__enter__()
        # masked language modelling on single sentences
        single = tokenizer(
            rng.sample(sentences, bs),
            padding=True,
            return_tensors="pt",
            return_special_tokens_mask=True,
        )
        special = single.pop("special_tokens_mask").bool() | (single["attention_mask"] == 0)
        single["input_ids"], mlm_labels = mask_tokens(single["input_ids"], tokenizer, special, gen)
        mlm = model(**single)
        mlm_loss = torch.nn.functional.cross_entropy(
            mlm.prediction_logits.view(-1, mlm.prediction_logits.shape[-1]), mlm_labels.view(-1)
        )
        # the pair objective on unmasked pairs: is B the same as A, and which words differ?
        firsts = [s.split() for s in rng.sample(sentences, bs)]
        seconds, different = zip(*(corrupt(" ".join(a), sentences, rng) for a in firsts))
        different = torch.tensor(different)
        pairs, token_labels = pair_batch(tokenizer, firsts, list(seconds))
        pair = model(**pairs, output_hidden_states=True)
        pair_loss = torch.nn.functional.cross_entropy(pair.seq_relationship_logits, different)
        token_logits = token_head(pair.hidden_states[-1]).squeeze(-1)
        counted = token_labels >= 0
        token_loss = torch.nn.functional.binary_cross_entropy_with_logits(
            token_logits[counted], token_labels[counted]
        )
        # the token loss weighted 3 times: with less, some seeds find the word matching late
        # and fine-tune poorly (docs/embedded-default.md)
        if recorder:
            recorder.phase = "backward"
        (mlm_loss + pair_loss + PRETRAIN["token_weight"] * token_loss).backward()
        if recorder:
            recorder.phase = "optimizer"
        torch.nn.utils.clip_grad_norm_(parameters, 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        if recorder:
            recorder.__exit__(None, None, None)
            recorder.remove_hooks()
            trace["ops"].append(recorder.ops)
        if trace is not None:
            trace["steps"].append(digest(parameters))
        if step % 250 == 0 or step == steps:
            acc = (pair.seq_relationship_logits.argmax(-1) == different).float().mean()
            tok_acc = ((token_logits[counted] > 0).float() == token_labels[counted]).float().mean()
            print(
                f"step {step:5d}/{steps}  mlm loss {mlm_loss.item():.3f}  "
                f"pair loss {pair_loss.item():.3f}  pair acc {acc.item():.2f}  "
                f"token acc {tok_acc.item():.2f}  {time.time() - start:.0f}s",
                flush=True,
            )


def kernels_in_force(kernels):
    """Return True if this process was started with the settings of the dict kernels."""
    return all(os.environ.get(k) == v for k, v in kernels.items())


def build(
    out,
    seed=PRETRAIN["seed"],
    data_dir=DATA_DIR,
    steps=PRETRAIN["steps"],
    kernels=PINNED_KERNELS,
    trace_file=None,
):
    """Build the checkpoint into the folder out (config, weights, tokenizer files) from the
    train split in data_dir, with the kernel settings kernels (which must be in force: main()
    restarts the builder with them). Writes the build's trace (accelerate_course/maintain/embedded/trace.py) to
    trace_file, when one is given. Prints the pretraining's progress."""
    # the same kernels on every machine (main() restarts the builder with them)
    wants_avx2 = kernels.get("ATEN_CPU_CAPABILITY") == "avx2"
    if not kernels_in_force(kernels) or (
        wants_avx2 and torch.backends.cpu.get_cpu_capability() != "AVX2"
    ):
        sys.exit(
            "error: the builder needs "
            + " ".join(f"{k}={v}" for k, v in kernels.items())
            + " set before it starts; run it as "
            "python -m accelerate_course.maintain.embedded.build_checkpoint, which sets them (this CPU offers "
            f"{torch.backends.cpu.get_cpu_capability()})"
        )
    # one thread, whatever the caller set: a sum of floats split over threads is added in
    # another order, so only one thread gives the same weights, bit for bit, on every run
    torch.set_num_threads(1)
    # oneDNN off: it picks its own kernels by the processor's vector width (GELU's forward
    # ran on its AVX512 kernel on an AVX512 machine, whatever ATEN_CPU_CAPABILITY says);
    # without it, GELU runs PyTorch's own kernel, which the pin above fixes
    torch.backends.mkldnn.enabled = False
    set_seed(seed)
    sentences = train_sentences(data_dir)
    tokenizer = build_tokenizer(sentences)
    config = BertConfig(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, **MODEL)
    model = BertForPreTraining(config)
    init_word_matching_head(model, seed=seed)
    print(
        f"tokenizer: {len(tokenizer)} tokens; model: "
        f"{sum(p.numel() for p in model.bert.parameters()) / 1e6:.2f} M encoder parameters; "
        f"kernels: PyTorch {torch.backends.cpu.get_cpu_capability()}, "
        + ", ".join(f"{k}={v}" for k, v in kernels.items() if k != "ATEN_CPU_CAPABILITY")
        + f", {torch.get_num_threads()} thread"
    )
    trace = {"processor": processor(), "kernels": kernels} if trace_file else None
    pretrain(model, tokenizer, sentences, seed, steps, trace)
    # save into a fresh folder, then move each file into place: an interrupted build leaves
    # the old files whole
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out, prefix=".checkpoint-"))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        for path in sorted(tmp.iterdir()):
            os.replace(path, out / path.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"saved {out}")
    if trace_file:
        # the saved weights' hash ties the trace to them; the processors on which a rebuild
        # gave these bytes: this one, so far
        trace["weights"] = hashlib.sha256((out / "model.safetensors").read_bytes()).hexdigest()
        trace["matched_on"] = [trace["processor"]]
        save_trace(trace, trace_file)
        print(f"trace written to {trace_file}")


def kernel_setting(text):
    """Return "NAME=VALUE" as a (name, value) pair, for --kernels."""
    name, equals, value = text.partition("=")
    if not equals or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=CHECKPOINT_DIR,
        help="the folder to write (default: common/embedded/checkpoint)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=PRETRAIN["seed"],
        help=f"the pretraining's seed (default: {PRETRAIN['seed']}, the committed checkpoint's)",
    )
    parser.add_argument(
        "--data",
        type=Path,
        default=DATA_DIR,
        help="the folder of the embedded data (default: common/embedded/data)",
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=PRETRAIN["steps"],
        help=f"pretraining steps (default: {PRETRAIN['steps']}; fewer for a quick "
        "check that two machines build the same bytes)",
    )
    parser.add_argument(
        "--trace",
        type=Path,
        default=None,
        help="write the build's trace to this file (default: "
        "common/embedded/checkpoint_trace.json when --out is the default, "
        "else none)",
    )
    parser.add_argument(
        "--kernels",
        type=kernel_setting,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="build with this setting instead of the pinned one, e.g. "
        "ATEN_CPU_CAPABILITY=default: a control build that must differ",
    )
    args = parser.parse_args()
    kernels = dict(PINNED_KERNELS, **dict(args.kernels))
    if not kernels_in_force(kernels):
        itself = ["-m", __spec__.name] if __spec__ else [sys.argv[0]]
        os.execve(
            sys.executable, [sys.executable, *itself, *sys.argv[1:]], {**os.environ, **kernels}
        )
    if args.trace is None and args.out == CHECKPOINT_DIR:
        args.trace = TRACE_FILE
    build(args.out, args.seed, args.data, args.steps, kernels, args.trace)


if __name__ == "__main__":
    main()
