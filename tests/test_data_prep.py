"""Data prep in common/data.py: splits, columns, label balance, tensor shapes, local folders."""

import argparse
import json

import pytest
import torch
from conftest import REPO, assert_ok, read_metrics, run_step
from transformers import AutoTokenizer

from common.checkpoint import EMBEDDED_CHECKPOINT
from common.data import get_dataloaders, load_splits, tokenize


@pytest.fixture(scope="module")
def raw():
    return load_splits("embedded")


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(EMBEDDED_CHECKPOINT)


def test_embedded_dataset_loads_through_load_dataset_with_mrpc_splits(raw):
    assert {s: raw[s].num_rows for s in raw} == {"train": 3668, "validation": 408, "test": 1725}
    for split in raw:
        assert raw[split].column_names == ["sentence1", "sentence2", "label", "idx"]
        share = sum(raw[split]["label"]) / raw[split].num_rows
        assert 0.66 < share < 0.69, split


def test_tokenized_columns_are_what_the_model_accepts(raw, tokenizer):
    tokenized = tokenize(raw, tokenizer)
    assert set(tokenized) == {"train", "validation"}
    for split in tokenized:
        assert tokenized[split].column_names == [
            "labels",
            "input_ids",
            "token_type_ids",
            "attention_mask",
        ]
        assert tokenized[split].format["type"] == "torch"
    assert list(tokenized["validation"]["labels"]) == list(raw["validation"]["label"])


def batch_sizes(train, evaluation):
    """The settings get_dataloaders reads: a run's arguments with these batch sizes."""
    return argparse.Namespace(train_batch_size=train, eval_batch_size=evaluation)


def test_dynamic_padding_pads_each_batch_to_its_longest_pair(raw, tokenizer):
    train_dl, eval_dl = get_dataloaders(raw, tokenizer, batch_sizes(8, 16))
    assert len(train_dl) == 459 and len(eval_dl) == 26  # ceil(3668 / 8), ceil(408 / 16)
    batch = next(iter(eval_dl))
    assert set(batch) == {"labels", "input_ids", "token_type_ids", "attention_mask"}
    assert batch["input_ids"].shape[0] == 16 and batch["labels"].shape == (16,)
    lengths = batch["attention_mask"].sum(dim=1)
    assert batch["input_ids"].shape[1] == lengths.max()  # no column is padding everywhere
    assert batch["labels"].tolist() == list(raw["validation"]["label"])[:16]  # in order


def test_fixed_length_padding_gives_every_batch_the_same_shape(raw, tokenizer):
    train_dl, eval_dl = get_dataloaders(raw, tokenizer, batch_sizes(8, 32), pad_to_max_length=128)
    shapes = {tuple(b["input_ids"].shape) for b in eval_dl}
    assert shapes == {(32, 128), (408 - 12 * 32, 128)}  # 12 full batches and the rest
    assert tuple(next(iter(train_dl))["input_ids"].shape) == (8, 128)


def test_train_loader_is_shuffled_by_the_seed(raw, tokenizer):
    def first_labels_and_ids(seed):
        torch.manual_seed(seed)
        train_dl, _ = get_dataloaders(raw, tokenizer, batch_sizes(8, 8))
        return next(iter(train_dl))["input_ids"][:, :6].tolist()

    assert first_labels_and_ids(1) == first_labels_and_ids(1)
    assert first_labels_and_ids(1) != first_labels_and_ids(2)


@pytest.mark.parametrize("suffix", ["csv", "jsonl", "parquet"])
def test_a_local_folder_of_mrpc_files_loads_like_the_embedded_one(tmp_path, raw, suffix):
    for split in ("train", "validation"):
        part = raw[split].select(range(20))
        path = tmp_path / f"{split}.{suffix}"
        if suffix == "csv":
            part.to_csv(path, index=False)
        elif suffix == "jsonl":
            part.to_json(path, lines=True)
        else:
            part.to_parquet(path)
    loaded = load_splits(str(tmp_path))
    assert loaded["train"].num_rows == 20
    assert loaded["validation"]["sentence1"] == raw["validation"]["sentence1"][:20]
    assert loaded["validation"]["label"] == raw["validation"]["label"][:20]


def test_a_folder_without_the_label_column_is_refused_with_one_line(tmp_path):
    for split in ("train", "validation"):
        rows = [{"sentence1": "a b", "sentence2": "a c"}] * 3
        (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(SystemExit) as exit_info:
        load_splits(str(tmp_path))
    message = str(exit_info.value)
    assert message.startswith("error: ") and "lacks column(s) label" in message
    assert "\n" not in message


# single sentences, as GLUE SST-2 ----------------------------------------------------------


def test_the_embedded_sst2_split_is_sst2_shaped(tokenizer):
    raw = load_splits("embedded-sst2")
    assert {s: raw[s].num_rows for s in raw} == {"train": 1600, "validation": 400}
    assert raw["train"].column_names == ["sentence", "label", "idx"]
    assert sum(raw["validation"]["label"]) == 204  # 51 % positive, as SST-2's validation
    tokenized = tokenize(raw, tokenizer)
    assert tokenized["train"].column_names == [
        "labels",
        "input_ids",
        "token_type_ids",
        "attention_mask",
    ]
    first = tokenizer.convert_ids_to_tokens(tokenized["validation"][0]["input_ids"])
    assert first[0] == "[CLS]" and first[-1] == "[SEP]" and first.count("[SEP]") == 1
    assert set(tokenized["validation"][0]["token_type_ids"].tolist()) == {0}  # one segment


def test_a_folder_of_sst2_shaped_files_and_glues_own_sst2_tsv_load(tmp_path):
    rows = [("Shares of Atlas Bank rose 5 percent.", 1), ("Atlas Bank cut 500 jobs.", 0)]
    jsonl, tsv = tmp_path / "jsonl", tmp_path / "tsv"
    jsonl.mkdir(), tsv.mkdir()
    for split in ("train", "validation"):
        (jsonl / f"{split}.jsonl").write_text(
            "".join(json.dumps({"sentence": s, "label": label}) + "\n" for s, label in rows)
        )
    for name in ("train.tsv", "dev.tsv"):  # GLUE's SST-2 download: sentence<TAB>label
        (tsv / name).write_text(
            "sentence\tlabel\n" + "".join(f"{s}\t{label}\n" for s, label in rows)
        )
    for folder in (jsonl, tsv):
        loaded = load_splits(str(folder))
        assert loaded["validation"]["sentence"] == [s for s, _ in rows]
        assert loaded["validation"]["label"] == [1, 0]


@pytest.mark.runs
@pytest.mark.step1
def test_step_1_on_the_sst2_shaped_split_gives_its_pages_numbers(tmp_path):
    # the "Try it" of step 1's page: the same loop on single sentences, its numbers as shown
    result = run_step(1, tmp_path, "--dataset", "embedded-sst2", OMP_NUM_THREADS="1")
    assert_ok(result)
    metrics = read_metrics(tmp_path)
    assert metrics["eval_samples"] == 400 and len(metrics["train_losses"]) == 600
    line = f"validation: accuracy {metrics['accuracy']:.4f}, f1 {metrics['f1']:.4f} (400 examples)"
    assert line in (REPO / "step1_plain_loop" / "README.md").read_text(), line
