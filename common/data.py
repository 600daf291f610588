"""The data for every step: load the raw splits, tokenize them, and wrap them in dataloaders.

Nothing here is a lesson: every step calls the same functions with the same settings, and a
step that needs a different setting (step 4's fixed-length padding) passes it visibly. Two
shapes of GLUE task are read: sentence pairs, as MRPC (sentence1, sentence2, label: is the
second a paraphrase of the first?), and single sentences, as SST-2 (sentence, label: is it
positive?).
"""

import csv
from pathlib import Path

from datasets import ClassLabel, Dataset, DatasetDict, disable_progress_bars, load_dataset
from torch.utils.data import DataLoader
from transformers import DataCollatorWithPadding

from common.cli import SHIPPED_DATASETS, check_dataset_name
from common.embedded import DATA as EMBEDDED_DATA  # noqa: E402
from common.embedded import SST2 as EMBEDDED_SST2
from common.errors import fail
from common.hub import hub_address, hub_out_of_reach

# the text columns of each shape of task, and the label
PAIRS = ("sentence1", "sentence2")
SENTENCES = ("sentence",)
NEEDED_SPLITS = ("train", "validation")
# GLUE's own downloads of MRPC and SST-2 (GLUE's download script, the original BERT repository)
GLUE_TSV = {"train": "train.tsv", "validation": "dev.tsv", "test": "test.tsv"}

# datasets' own bars (generating splits, tokenizing) would bury the training bar and turn
# a one-line error into a page; the steps' tqdm bar is the one a student watches
disable_progress_bars()


def text_columns(raw_split):
    """Return the text columns of a split: MRPC's pair, or SST-2's one sentence (None: neither)."""
    names = raw_split.column_names
    return PAIRS if all(c in names for c in PAIRS) else SENTENCES if "sentence" in names else None


def load_splits(name):
    """Return the raw DatasetDict for --dataset name, with at least the splits train and
    validation, a label column (0 or 1) and either MRPC's sentence1 and sentence2 or SST-2's
    sentence (non-empty text), maybe idx.

    name: 'embedded' (the MRPC-shaped pairs of common/embedded/data), 'embedded-sst2' (the
    SST-2-shaped sentences of common/embedded/sst2), 'glue' or 'glue-mrpc' (the hub's
    nyu-mll/glue, config mrpc), 'glue-sst2' (config sst2), or a local folder: train.* and
    validation.* files (csv, json/jsonl or parquet) with those columns, or GLUE's own MRPC or
    SST-2 files (train.tsv, dev.tsv, optionally test.tsv). Every row of train and validation
    is checked before anything is tokenized; exits with one error line that names the split,
    the row and the value when something cannot be used.
    """
    if name in SHIPPED_DATASETS:
        folder = EMBEDDED_DATA if name == "embedded" else EMBEDDED_SST2
        return check_splits(load_dataset(str(folder)), f"the {name} dataset")
    if name in ("glue", "glue-mrpc", "glue-sst2"):
        task = "sst2" if name == "glue-sst2" else "mrpc"
        if hub_out_of_reach():
            fail(
                f"--dataset {name} loads nyu-mll/glue ({task}) from the Hugging Face Hub at "
                f"{hub_address()}, which cannot be reached; leave --dataset out to use the "
                "embedded MRPC-shaped pairs (or embedded-sst2), pass a local folder (GLUE's own "
                "train.tsv and dev.tsv too), set HF_ENDPOINT to a Hub mirror this machine can "
                "reach, or set HF_HUB_OFFLINE=1 to use a copy downloaded before"
            )
        try:
            return check_splits(load_dataset("nyu-mll/glue", task), f"nyu-mll/glue {task}")
        except (OSError, ValueError) as error:
            fail(
                f"cannot load nyu-mll/glue ({task}) from {hub_address()}: "
                f"{str(error).splitlines()[0]}"
            )
    check_dataset_name(name)
    folder = Path(name).resolve()
    what = f"dataset folder {name}"
    check_files(folder, what)
    if any((folder / GLUE_TSV[split]).is_file() for split in NEEDED_SPLITS):
        return check_splits(load_glue_tsv(folder, what), what, read_as_glue_reads)
    try:
        raw = load_dataset(str(folder))
    except Exception as error:  # the library's reasons vary: no files, unknown format, bad rows
        # datasets wraps the parser's own error ("An error occurred while generating the
        # dataset"): that one says what is wrong with the file
        reason = error.__cause__ or error
        first_line = (str(reason).splitlines() or [type(reason).__name__])[0]
        fail(
            f"cannot load {what}: {first_line}; it needs train and validation files (csv, "
            "json/jsonl or parquet) with columns sentence1, sentence2, label (or sentence, "
            "label), or GLUE's train.tsv and dev.tsv"
        )
    return check_splits(raw, what, lambda split, row: locate_row(folder, split, row))


# the files a folder's splits are read from, by their names' start (datasets' own patterns)
SPLIT_NAMES = {
    "train": ("train",),
    "validation": ("validation", "valid", "dev", "val"),
    "test": ("test",),
}
DATA_SUFFIXES = (".csv", ".json", ".jsonl", ".parquet", ".tsv")
TEXT_SUFFIXES = (".csv", ".json", ".jsonl", ".tsv")


def check_files(folder, what):
    """Exit with one error line when a folder's files would be read other than as they look:
    two files for one split (datasets would read one and ignore the other), splits in two
    formats (datasets reads one format per folder), or a text file that is not UTF-8 (a
    spreadsheet's export)."""
    by_split = {}
    for path in sorted(folder.iterdir()):
        stem = path.name.split(".")[0].lower()
        split = next((s for s, names in SPLIT_NAMES.items() if stem in names), None)
        if split and path.suffix.lower() in DATA_SUFFIXES and path.is_file():
            by_split.setdefault(split, []).append(path)
    for split, paths in by_split.items():
        if len(paths) > 1:
            fail(
                f"{what} has {len(paths)} files for the {split} split "
                f"({', '.join(p.name for p in paths)}): only one would be read; keep one "
                "file per split"
            )
    formats = {p.suffix.lower().replace(".jsonl", ".json") for ps in by_split.values() for p in ps}
    if len(formats) > 1 and not all(p.suffix == ".tsv" for p in by_split.get("train", [])):
        names = ", ".join(p.name for ps in by_split.values() for p in ps)
        fail(
            f"{what} holds its splits in several formats ({names}): datasets reads one format "
            "per folder; save every split in the same format (csv, json lines or parquet)"
        )
    for path in (p for ps in by_split.values() for p in ps if p.suffix.lower() in TEXT_SUFFIXES):
        data = path.read_bytes()
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as error:
            line = data[: error.start].count(b"\n") + 1
            fail(
                f"{what}: {path.name} is not UTF-8 (byte 0x{data[error.start]:02x} on line "
                f"{line}); save it as UTF-8 (in a spreadsheet: CSV UTF-8)"
            )


def load_glue_tsv(folder, what):
    """Return a DatasetDict from GLUE's own MRPC or SST-2 files in folder (train.tsv, dev.tsv
    as the validation split, test.tsv if there): tab-separated, a header line; MRPC's columns
    Quality, #1 ID, #2 ID, #1 String, #2 String (test.tsv: index instead of Quality, label
    -1), SST-2's sentence and label (test.tsv: index and sentence). They are read as GLUE's
    and BERT's processors read them, without quote processing: a sentence may hold an
    unbalanced quote."""
    splits = {}
    for split, file_name in GLUE_TSV.items():
        path = folder / file_name
        if not path.is_file():
            continue
        with open(path, encoding="utf-8-sig", newline="") as f:
            lines = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
        header = lines[0] if lines else []
        if "sentence" in header:  # SST-2
            texts, label = {"sentence": "sentence"}, "label"
        elif "#1 String" in header and "#2 String" in header:  # MRPC
            texts, label = {"sentence1": "#1 String", "sentence2": "#2 String"}, "Quality"
        else:
            fail(
                f"{what}: {file_name} has neither MRPC's '#1 String' and '#2 String' columns "
                f"nor SST-2's 'sentence' in its first line ({' | '.join(header) or 'empty file'})"
                "; GLUE's MRPC files start with Quality, #1 ID, #2 ID, #1 String, #2 String"
            )
        columns = {name: i for i, name in enumerate(header)}
        rows = {**{column: [] for column in texts}, "label": [], "idx": []}
        for number, fields in enumerate(lines[1:], start=2):
            if len(fields) != len(header):
                fail(
                    f"{what}: {file_name} line {number} has {len(fields)} tab-separated "
                    f"fields, its header has {len(header)}"
                )
            for column, field in texts.items():
                rows[column].append(fields[columns[field]])
            rows["label"].append(fields[columns[label]] if label in columns else "-1")
            rows["idx"].append(number - 2)
        splits[split] = Dataset.from_dict(rows)
    return DatasetDict(splits)


def read_as_glue_reads(split, row):
    """Return where a row of GLUE's MRPC files is: its line (the header is line 1)."""
    return f"line {row + 2} of {GLUE_TSV[split]}"


def locate_row(folder, split, row):
    """Return where a row of a split loaded from folder is, for an error message: its line
    in the one csv or json lines file of that split, else its row number."""
    names = {"train": ("train",), "validation": ("validation", "valid", "dev", "val")}[split]
    files = [p for p in sorted(folder.iterdir()) if p.stem in names]
    if len(files) == 1 and files[0].suffix in (".csv", ".jsonl", ".json"):
        line = row + (2 if files[0].suffix == ".csv" else 1)
        return f"line {line} of {files[0].name}"
    return f"row {row + 1}"


def check_splits(raw, what, locate=None):
    """Return raw with the labels of train and validation as the integers 0 and 1, if it has
    the splits and columns the course needs (MRPC's pair or SST-2's sentence, and a label) and
    every row of those splits has non-empty text and a label 0 or 1 (also accepted: the text
    "0"/"1", 0.0/1.0, True/False); else exit with one error line that names the split, the
    row (where locate(split, row) says it is, else its idx) and the value."""
    missing_splits = [s for s in NEEDED_SPLITS if s not in raw]
    if missing_splits:
        fail(
            f"{what} has no {' or '.join(missing_splits)} split; name its files "
            "train.* and validation.* (test.* is optional), or use GLUE's train.tsv and dev.tsv"
        )
    texts = text_columns(raw["train"])
    for split in NEEDED_SPLITS:
        wanted = (*(texts or PAIRS), "label")
        missing = [c for c in wanted if c not in raw[split].column_names]
        if missing:
            fail(
                f"{what}: the {split} split lacks column(s) {', '.join(missing)}; the course "
                "reads sentence pairs (sentence1, sentence2, label, as MRPC) or single "
                f"sentences (sentence, label, as SST-2) (it has "
                f"{', '.join(raw[split].column_names)})"
            )
        if raw[split].num_rows == 0:
            fail(f"{what}: the {split} split has no rows")
    checked = {}
    for split in NEEDED_SPLITS:
        data = raw[split]
        # whole columns as lists ([:]): iterating over a column reads it row by row, slowly
        ids = data["idx"][:] if "idx" in data.column_names else None

        def where(row):
            if locate:  # (where is called in this iteration only)
                return locate(split, row)  # noqa: B023
            return f"row with idx {ids[row]}" if ids is not None else f"row {row + 1}"  # noqa: B023

        for column in texts:
            for row, text in enumerate(data[column][:]):
                if not isinstance(text, str) or not text.strip():
                    problem = (
                        "is empty"
                        if isinstance(text, str) or text is None
                        else f"is {text!r}, not text"
                    )
                    need = (
                        "every pair needs two sentences"
                        if texts == PAIRS
                        else "every row needs its sentence"
                    )
                    fail(f"{what}: {split} split, {where(row)}: {column} {problem}; {need}")
        values = data["label"][:]
        labels = [label_value(value) for value in values]
        for row, (value, label) in enumerate(zip(values, labels)):
            if label is None:
                meaning = (
                    "MRPC's labels: 1 = paraphrase, 0 = not"
                    if texts == PAIRS
                    else "SST-2's labels: 1 = positive, 0 = negative"
                )
                fail(
                    f"{what}: {split} split, {where(row)}: label {value!r} is not 0 or 1 "
                    f"({meaning}); write every label as 0 or 1"
                )
        feature = data.features["label"]
        if not isinstance(feature, ClassLabel) and not feature.dtype.startswith("int"):
            checked[split] = data.remove_columns("label").add_column("label", labels)
            given = {"bool": "True/False, read as 1/0", "string": "text, read as 0/1"}.get(
                feature.dtype, "numbers 0.0/1.0, read as 0/1"
            )
    if checked:
        if locate is not read_as_glue_reads:  # GLUE's files always hold their labels as text
            print(f"note: {what}: labels given as {given}", flush=True)
        raw = type(raw)({**raw, **checked})
    return raw


def label_value(value):
    """Return a label as the integer 0 or 1 (from an int, a bool, the text "0"/"1" or the
    number 0.0/1.0), or None when it is anything else."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int) and value in (0, 1):
        return value
    if isinstance(value, str) and value.strip() in ("0", "1"):
        return int(value.strip())
    if isinstance(value, float) and value in (0.0, 1.0):  # a csv column with a gap reads as floats
        return int(value)
    return None


def tokenize(raw_datasets, tokenizer, pad_to_max_length=None):
    """Return the train and validation splits tokenized for the model: columns input_ids,
    (token_type_ids,) attention_mask and labels, as torch tensors. A pair is one sequence,
    [CLS] sentence1 [SEP] sentence2 [SEP] for BERT; a single sentence, [CLS] sentence [SEP].

    pad_to_max_length=None keeps each row at its own length (the collator pads per batch);
    an int pads (and truncates) every row to that many tokens.
    """
    texts = list(text_columns(raw_datasets["train"]))

    def tokenize_function(examples):
        padding = (
            dict(padding="max_length", max_length=pad_to_max_length) if pad_to_max_length else {}
        )
        return tokenizer(*(examples[column] for column in texts), truncation=True, **padding)

    splits = raw_datasets.select_columns([*texts, "label"])
    splits = type(raw_datasets)({s: splits[s] for s in NEEDED_SPLITS})
    tokenized = splits.map(tokenize_function, batched=True)
    tokenized = tokenized.remove_columns(texts)
    tokenized = tokenized.rename_column("label", "labels")
    tokenized.set_format("torch")
    return tokenized


def get_dataloaders(raw_datasets, tokenizer, args, pad_to_max_length=None):
    """Return (train_dataloader, eval_dataloader) over the tokenized train and validation
    splits, in batches of args.train_batch_size and args.eval_batch_size: train shuffled,
    validation in order, batches padded by DataCollatorWithPadding (to the longest pair of the
    batch, or to pad_to_max_length)."""
    tokenized = tokenize(raw_datasets, tokenizer, pad_to_max_length)
    if pad_to_max_length:
        collator = DataCollatorWithPadding(
            tokenizer, padding="max_length", max_length=pad_to_max_length
        )
    else:
        collator = DataCollatorWithPadding(tokenizer)
    train_dataloader = DataLoader(
        tokenized["train"], shuffle=True, batch_size=args.train_batch_size, collate_fn=collator
    )
    eval_dataloader = DataLoader(
        tokenized["validation"], shuffle=False, batch_size=args.eval_batch_size, collate_fn=collator
    )
    return train_dataloader, eval_dataloader
