"""Which checkpoint a run uses: the embedded tiny BERT, a local folder, or a hub id."""

import json
from pathlib import Path

from huggingface_hub import try_to_load_from_cache
from transformers import AutoTokenizer

from common.errors import fail
from common.hub import hub_out_of_reach

EMBEDDED_CHECKPOINT = Path(__file__).resolve().parent / "embedded" / "checkpoint"
WEIGHT_FILES = {"model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json"}
TOKENIZER_FILES = {"tokenizer.json", "vocab.txt", "vocab.json", "tokenizer.model",
                   "spiece.model", "sentencepiece.bpe.model"}


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
    if name.startswith((".", "/", "~")) or path.suffix or name.count("/") > 1:
        fail(f"checkpoint folder {name} does not exist; pass a folder saved with "
             "save_pretrained, a hub id such as bert-base-cased, or leave --checkpoint out "
             "for the embedded tiny BERT")
    cached = isinstance(try_to_load_from_cache(name, "config.json"), str)
    if not cached and hub_out_of_reach():
        fail(f"checkpoint {name!r} is a Hugging Face Hub id, but the hub cannot be reached "
             "and it is not in the local cache; leave --checkpoint out to use the embedded "
             "tiny BERT, or pass a local folder saved with save_pretrained")
    return name


def check_checkpoint_folder(path, name):
    """Exit with one error line unless the folder holds what a run needs: config.json, the
    weights, and tokenizer files whose vocabulary fits the model's embeddings. (Without
    tokenizer files, transformers would build a tokenizer of a handful of special tokens, turn
    every word into [UNK], and the run would train to the end on nothing.)"""
    files = {p.name for p in path.iterdir()}
    save = f"model.save_pretrained({name!r}) and tokenizer.save_pretrained({name!r})"
    if "config.json" not in files:
        fail(f"checkpoint folder {name} has no config.json: save the model there with {save}")
    if not files & WEIGHT_FILES:
        fail(f"checkpoint folder {name} has a config.json but no weights ({', '.join(sorted(WEIGHT_FILES))}): "
             f"save them with model.save_pretrained({name!r})")
    if not files & TOKENIZER_FILES:
        fail(f"checkpoint folder {name} has no tokenizer files (tokenizer.json, vocab.txt, ...): "
             f"save the tokenizer that goes with the model there with tokenizer.save_pretrained({name!r})")
    tokenizer = load_tokenizer(str(path))
    try:
        rows = json.loads((path / "config.json").read_text())["vocab_size"]
    except (ValueError, KeyError):
        return  # a config without vocab_size: nothing to compare
    if not rows // 2 <= len(tokenizer) <= rows:
        fail(f"checkpoint folder {name}: its tokenizer has {len(tokenizer)} tokens but the model "
             f"has {rows} embedding rows, so they do not belong together; save the tokenizer the "
             f"model was trained with, with tokenizer.save_pretrained({name!r})")


def load_tokenizer(checkpoint):
    """Return AutoTokenizer.from_pretrained(checkpoint), or exit with one error line."""
    try:
        return AutoTokenizer.from_pretrained(checkpoint)
    except (OSError, ValueError) as error:
        fail(f"cannot load a tokenizer from {checkpoint!r}: {str(error).splitlines()[0]}")
