"""Which checkpoint a run uses: the embedded tiny BERT, a local folder, or a hub id."""

import json
import os
from pathlib import Path

from huggingface_hub import try_to_load_from_cache
from transformers import AutoTokenizer

from common.embedded import CHECKPOINT as EMBEDDED_CHECKPOINT  # noqa: E402
from common.errors import fail
from common.hub import hub_address, hub_out_of_reach

WEIGHT_FILES = {
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
}
TOKENIZER_FILES = {
    "tokenizer.json",
    "vocab.txt",
    "vocab.json",
    "tokenizer.model",
    "spiece.model",
    "sentencepiece.bpe.model",
}


def resolve_checkpoint(name):
    """Return what from_pretrained should load for --checkpoint name: the embedded folder's
    path for 'embedded', a local folder's path, or the hub id itself. Exits with one error
    line when it cannot be loaded here."""
    if name == "embedded":
        return str(EMBEDDED_CHECKPOINT)
    path = Path(name)
    if path.is_dir():
        check_checkpoint_folder(path, name)
        return str(path.resolve())
    if path.exists():
        fail(
            f"--checkpoint {name} is a file, not a folder; pass the folder that holds "
            "config.json, the weights and the tokenizer files (saved with save_pretrained)"
        )
    if name.startswith((".", "/", "~")) or path.suffix or name.count("/") > 1:
        fail(
            f"checkpoint folder {name} does not exist; pass a folder saved with "
            "save_pretrained, a hub id such as bert-base-cased, or leave --checkpoint out "
            "for the embedded tiny BERT"
        )
    cached = try_to_load_from_cache(name, "config.json")
    if not isinstance(cached, str) and hub_out_of_reach():
        fail(
            f"checkpoint {name!r} is a Hugging Face Hub id, but the hub at {hub_address()} "
            "cannot be reached and it is not in the local cache; leave --checkpoint out to use "
            "the embedded tiny BERT, pass a local folder saved with save_pretrained, or set "
            "HF_ENDPOINT to a Hub mirror this machine can reach"
        )
    if isinstance(cached, str):
        check_classification_head(Path(cached), name)
        check_half_precision(Path(cached), name)
    return name


def check_classification_head(config_file, name):
    """Exit with one error line unless transformers has a sequence-classification head for the
    checkpoint's kind of model (its config's model_type): BERT, RoBERTa, DistilBERT, GPT-2,
    BART, T5, Llama and about 120 more have one; an image model, a speech model or a bare
    encoder-decoder pairing ("encoder-decoder") has none."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES,
    )

    try:
        kind = json.loads(Path(config_file).read_text()).get("model_type")
    except (OSError, ValueError):
        return  # an unreadable config: transformers' own error says why, when it loads it
    if kind and kind not in MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES:
        fail(
            f"checkpoint {name}: its model_type is {kind!r}, for which transformers has no "
            "sequence-classification head (AutoModelForSequenceClassification); pass a "
            "checkpoint of a text model that has one, such as bert-base-cased, roberta-base, "
            "distilbert-base-cased or gpt2"
        )


def check_checkpoint_folder(path, name):
    """Exit with one error line unless the folder holds what a run needs: config.json, the
    weights, and tokenizer files whose vocabulary fits the model's embeddings. (Without
    tokenizer files, transformers would build a tokenizer of a handful of special tokens, turn
    every word into [UNK], and the run would train to the end on nothing.)"""
    files = {p.name for p in path.iterdir()}
    save = f"model.save_pretrained({name!r}) and tokenizer.save_pretrained({name!r})"
    if "config.json" not in files:
        fail(f"checkpoint folder {name} has no config.json: save the model there with {save}")
    check_classification_head(path / "config.json", name)
    check_half_precision(path / "config.json", name)
    if not files & WEIGHT_FILES:
        fail(
            f"checkpoint folder {name} has a config.json but no weights "
            f"({', '.join(sorted(WEIGHT_FILES))}): save them with model.save_pretrained({name!r})"
        )
    for weights in sorted(path.glob("*.safetensors")):  # a download that stopped half way
        unreadable_weights(weights, name)
    missing_shards(path, name)
    check_head_size(path, name)
    if not files & TOKENIZER_FILES:
        fail(
            f"checkpoint folder {name} has no tokenizer files (tokenizer.json, vocab.txt, ...): "
            "save the tokenizer that goes with the model there with "
            f"tokenizer.save_pretrained({name!r})"
        )
    tokenizer = open_tokenizer(str(path))
    try:
        rows = json.loads((path / "config.json").read_text())["vocab_size"]
    except (ValueError, KeyError):
        return  # a config without vocab_size: nothing to compare
    if not rows // 2 <= len(tokenizer) <= rows:
        fail(
            f"checkpoint folder {name}: its tokenizer has {len(tokenizer)} tokens but the model "
            f"has {rows} embedding rows, so they do not belong together; save the tokenizer the "
            f"model was trained with, with tokenizer.save_pretrained({name!r})"
        )


def unreadable_weights(weights, name):
    """Exit with one error line if a safetensors weights file cannot be read whole (its
    header names more bytes than the file holds: a download or copy that stopped)."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(weights, "pt"):
            pass
    except (SafetensorError, OSError) as error:
        fail(
            f"checkpoint folder {name}: {weights.name} cannot be read "
            f"({str(error).splitlines()[0]}); it is likely cut short: download or copy it again"
        )


def check_half_precision(config, name):
    """Exit with one error line if the checkpoint's weights are float16 or bfloat16 (its
    config's dtype): transformers 5 loads a model in the dtype it was saved in, and the steps
    train in it. Measured here with the embedded BERT saved so, step 1: in float16 (no loss
    scaling) the loss turns NaN within 5 optimizer steps; in bfloat16 (8 significant bits)
    AdamW's updates at 5e-5 are mostly rounded away, and the whole run (1,377 steps) ends at
    accuracy 0.7672 and F1 0.8545, against 0.8922 and 0.9252 in float32. Refused, not converted: the
    course does not change a checkpoint behind the student's back; the line says how to make a
    float32 copy."""
    try:
        settings = json.loads(Path(config).read_text())
    except (OSError, ValueError):
        return
    dtype = settings.get("dtype") or settings.get("torch_dtype")
    why = {
        "float16": "a float16 training without loss scaling turns NaN within a few steps",
        "bfloat16": "in bfloat16 most of the optimizer's small updates are rounded away",
    }
    if dtype in why:
        fail(
            f"checkpoint {name} holds {dtype} weights (its config.json's dtype), which "
            f"transformers loads and the steps train as they are, and {why[dtype]}; save a "
            "float32 copy and pass that: AutoModelForSequenceClassification.from_pretrained("
            f"{name!r}, dtype=torch.float32).save_pretrained(<a new folder>), and its "
            "tokenizer beside it"
        )


# the names a sequence-classification head's output weight ends with (BERT's, RoBERTa's,
# DistilBERT's, GPT-2's and Llama's, BART's)
HEAD_WEIGHTS = (
    "classifier.weight",
    "classifier.out_proj.weight",
    "score.weight",
    "classification_head.out_proj.weight",
)
HEAD_SUFFIXES = tuple(f".{name}" for name in HEAD_WEIGHTS)  # (not DistilBERT's pre_classifier)


def check_head_size(path, name):
    """Exit with one error line if the checkpoint holds a classification head for another
    number of labels than MRPC's 2 (fine-tuned on another task): from_pretrained(...,
    num_labels=2) stops on its size. Refused, not replaced by a new head (as
    ignore_mismatched_sizes=True would, silently): the line says how to keep the encoder
    alone, to which the steps add a new two-class head."""
    from safetensors import safe_open

    for weights in sorted(path.glob("*.safetensors")):
        with safe_open(weights, "pt") as tensors:
            for tensor in tensors.keys():
                if tensor in HEAD_WEIGHTS or tensor.endswith(HEAD_SUFFIXES):
                    labels = tensors.get_slice(tensor).get_shape()[0]
                    if labels != 2:
                        fail(
                            f"checkpoint folder {name} holds a classification head for "
                            f"{labels} labels ({tensor}), and MRPC has 2: save its encoder "
                            f"alone and pass that: AutoModel.from_pretrained({name!r})"
                            ".save_pretrained(<a new folder>), and its tokenizer beside it "
                            "(the steps add a new two-class head)"
                        )


def missing_shards(path, name):
    """Exit with one error line if a sharded checkpoint's index names a weights file the
    folder lacks (a download that stopped between shards)."""
    for index in sorted(path.glob("*.index.json")):
        try:
            shards = set(json.loads(index.read_text())["weight_map"].values())
        except (ValueError, KeyError, AttributeError):
            fail(
                f"checkpoint folder {name}: {index.name} is not a weights index (download it again)"
            )
        missing = sorted(shard for shard in shards if not (path / shard).is_file())
        if missing:
            fail(
                f"checkpoint folder {name}: {index.name} names {len(shards)} weights files, "
                f"and {', '.join(missing)} is not there: download the checkpoint again"
            )


def load_tokenizer(checkpoint):
    """Return AutoTokenizer.from_pretrained(checkpoint), or exit with one error line. A
    tokenizer without a padding token (GPT-2's) pads with its end-of-text token, as the
    Hugging Face docs do for GPT-2, and says so in one note line; the steps then give the
    model that token's id (model.config.pad_token_id)."""
    tokenizer = open_tokenizer(checkpoint)
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            fail(
                f"the tokenizer of {checkpoint!r} has neither a padding token nor an "
                "end-of-text token to pad with; save one with tokenizer.add_special_tokens("
                "{'pad_token': '[PAD]'}) and a model whose embeddings include it"
            )
        tokenizer.pad_token = tokenizer.eos_token
        if os.environ.get("RANK", "0") == "0":  # one note per run, not one per process
            print(
                f"note: the tokenizer of {Path(checkpoint).name} has no padding token: it pads "
                f"with its end-of-text token {tokenizer.eos_token!r} (id "
                f"{tokenizer.eos_token_id}), and the model is told so",
                flush=True,
            )
    return tokenizer


def open_tokenizer(checkpoint):
    """Return AutoTokenizer.from_pretrained(checkpoint) as it is, or exit with one error line."""
    try:
        return AutoTokenizer.from_pretrained(checkpoint)
    except (OSError, ValueError) as error:
        fail(f"cannot load a tokenizer from {checkpoint!r}: {str(error).splitlines()[0]}")
