"""MRPC for every step: load the raw pairs, tokenize them, and wrap them in dataloaders.

Nothing here is a lesson: every step calls the same functions with the same settings, and a
step that needs a different setting (step 4's fixed-length padding) passes it visibly.
"""

from pathlib import Path

from datasets import disable_progress_bars, load_dataset
from torch.utils.data import DataLoader
from transformers import DataCollatorWithPadding

from common.cli import check_dataset_name, fail
from common.hub import hub_out_of_reach

EMBEDDED_DATA = Path(__file__).resolve().parent / "embedded_data"
MRPC_COLUMNS = ("sentence1", "sentence2", "label")
NEEDED_SPLITS = ("train", "validation")

# datasets' own bars (generating splits, tokenizing) would bury the training bar and turn
# a one-line error into a page; the steps' tqdm bar is the one a student watches
disable_progress_bars()


def load_mrpc(name):
    """Return the raw MRPC DatasetDict for --dataset name, with at least the splits train and
    validation and the columns sentence1, sentence2, label (1 = paraphrase), maybe idx.

    name: 'embedded' (common/embedded_data), 'glue' (the hub's nyu-mll/glue, config mrpc), or
    a local folder of MRPC-shaped files. Exits with one error line when it cannot be loaded.
    """
    if name == "embedded":
        return check_mrpc(load_dataset(str(EMBEDDED_DATA)), "the embedded dataset")
    if name == "glue":
        if hub_out_of_reach():
            fail("--dataset glue loads nyu-mll/glue (mrpc) from the Hugging Face Hub, which "
                 "cannot be reached; leave --dataset out to use the embedded MRPC-shaped "
                 "pairs, pass a local folder of MRPC files, or set HF_HUB_OFFLINE=1 to use a "
                 "copy downloaded before")
        try:
            return check_mrpc(load_dataset("nyu-mll/glue", "mrpc"), "nyu-mll/glue mrpc")
        except (OSError, ValueError) as error:
            fail(f"cannot load nyu-mll/glue (mrpc): {str(error).splitlines()[0]}")
    check_dataset_name(name)
    try:
        raw = load_dataset(str(Path(name).resolve()))
    except Exception as error:  # the library's reasons vary: no files, unknown format, bad rows
        first_line = (str(error).splitlines() or [type(error).__name__])[0]
        fail(f"cannot load dataset folder {name}: {first_line}; it needs train and validation "
             "files (csv, json/jsonl or parquet) with columns sentence1, sentence2, label")
    return check_mrpc(raw, f"dataset folder {name}")


def check_mrpc(raw, what):
    """Return raw if it has the splits and columns the course needs; else exit with one line."""
    missing_splits = [s for s in NEEDED_SPLITS if s not in raw]
    if missing_splits:
        fail(f"{what} has no {' or '.join(missing_splits)} split; name its files "
             "train.* and validation.* (test.* is optional)")
    for split in NEEDED_SPLITS:
        missing = [c for c in MRPC_COLUMNS if c not in raw[split].column_names]
        if missing:
            fail(f"{what}: the {split} split lacks column(s) {', '.join(missing)}; MRPC files "
                 f"need sentence1, sentence2, label (it has {', '.join(raw[split].column_names)})")
    return raw


def tokenize_mrpc(raw_datasets, tokenizer, pad_to_max_length=None):
    """Return the train and validation splits tokenized for the model: columns input_ids,
    (token_type_ids,) attention_mask and labels, as torch tensors.

    pad_to_max_length=None keeps each pair at its own length (the collator pads per batch);
    an int pads (and truncates) every pair to that many tokens.
    """

    def tokenize_function(examples):
        if pad_to_max_length:
            return tokenizer(examples["sentence1"], examples["sentence2"], truncation=True,
                             padding="max_length", max_length=pad_to_max_length)
        return tokenizer(examples["sentence1"], examples["sentence2"], truncation=True)

    splits = raw_datasets.select_columns(list(MRPC_COLUMNS))
    splits = type(raw_datasets)({s: splits[s] for s in NEEDED_SPLITS})
    tokenized = splits.map(tokenize_function, batched=True)
    tokenized = tokenized.remove_columns(["sentence1", "sentence2"])
    tokenized = tokenized.rename_column("label", "labels")
    tokenized.set_format("torch")
    return tokenized


def get_dataloaders(raw_datasets, tokenizer, train_batch_size, eval_batch_size,
                    pad_to_max_length=None):
    """Return (train_dataloader, eval_dataloader) over the tokenized train and validation
    splits: train shuffled, validation in order, batches padded by DataCollatorWithPadding
    (to the longest pair of the batch, or to pad_to_max_length)."""
    tokenized = tokenize_mrpc(raw_datasets, tokenizer, pad_to_max_length)
    if pad_to_max_length:
        collator = DataCollatorWithPadding(tokenizer, padding="max_length",
                                           max_length=pad_to_max_length)
    else:
        collator = DataCollatorWithPadding(tokenizer)
    train_dataloader = DataLoader(tokenized["train"], shuffle=True, batch_size=train_batch_size,
                                  collate_fn=collator)
    eval_dataloader = DataLoader(tokenized["validation"], shuffle=False,
                                 batch_size=eval_batch_size, collate_fn=collator)
    return train_dataloader, eval_dataloader
