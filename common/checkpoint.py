"""Which checkpoint a run uses: the embedded tiny BERT, a local folder, or a hub id."""

from pathlib import Path

from huggingface_hub import try_to_load_from_cache
from transformers import AutoTokenizer

from common.cli import fail
from common.hub import hub_out_of_reach

EMBEDDED_CHECKPOINT = Path(__file__).resolve().parent / "embedded_checkpoint"


def resolve_checkpoint(name):
    """Return what from_pretrained should load for --checkpoint name: the embedded folder's
    path for 'embedded', a local folder's path, or the hub id itself. Exits with one error
    line when it cannot be loaded here."""
    if name == "embedded":
        return str(EMBEDDED_CHECKPOINT)
    path = Path(name)
    if path.is_dir():
        if not (path / "config.json").is_file():
            fail(f"checkpoint folder {name} has no config.json: "
                 "save one there with model.save_pretrained() and tokenizer.save_pretrained()")
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


def load_tokenizer(checkpoint):
    """Return AutoTokenizer.from_pretrained(checkpoint), or exit with one error line."""
    try:
        return AutoTokenizer.from_pretrained(checkpoint)
    except (OSError, ValueError) as error:
        fail(f"cannot load a tokenizer from {checkpoint!r}: {str(error).splitlines()[0]}")
