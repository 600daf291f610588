"""Bad input: one clear error line, a non-zero exit, no traceback, and no metrics file."""

import json

import pytest

from conftest import run_step

BAD_INPUTS = {
    "unknown dataset": (["--dataset", "no-such-dataset"], "unknown dataset 'no-such-dataset'"),
    "hub dataset offline": (["--dataset", "glue"], "cannot be reached"),
    "hub checkpoint offline": (["--checkpoint", "bert-base-cased"], "cannot be reached"),
    "missing checkpoint folder": (["--checkpoint", "./no/such/folder"], "does not exist"),
    "zero batch size": (["--train-batch-size", "0"], "must be a positive whole number"),
    "negative eval batch size": (["--eval-batch-size", "-8"], "must be a positive whole number"),
    "zero epochs": (["--epochs", "0"], "must be a positive whole number"),
    "zero steps": (["--max-train-steps", "0"], "must be a positive whole number"),
    "text learning rate": (["--lr", "fast"], "expected a number"),
    "zero learning rate": (["--lr", "0"], "must be a positive number"),
}


def check_refused(result, output_dir, expected):
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode != 0
    assert "Traceback" not in result.stderr + result.stdout
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and expected in lines[0], lines[0]
    assert not (output_dir / "metrics.json").exists()


@pytest.mark.parametrize("name", BAD_INPUTS)
def test_step1_refuses(tmp_path, name):
    args, expected = BAD_INPUTS[name]
    check_refused(run_step(1, tmp_path, *args), tmp_path, expected)


@pytest.mark.parametrize("name", ["unknown dataset", "hub checkpoint offline", "zero batch size"])
def test_step2_refuses(tmp_path, name):
    args, expected = BAD_INPUTS[name]
    check_refused(run_step(2, tmp_path, *args), tmp_path, expected)


def test_dataset_folder_missing_columns_is_refused_and_old_results_are_kept(tmp_path):
    folder = tmp_path / "my-mrpc"
    folder.mkdir()
    for split in ("train", "validation"):
        rows = [{"sentence1": "Shares rose.", "sentence2": "Stocks rose.", "quality": 1}] * 4
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    out.mkdir()
    (out / "metrics.json").write_text('{"accuracy": 0.5}\n')  # an earlier run's results
    result = run_step(1, out, "--dataset", str(folder))
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert len(lines) == 1 and "lacks column(s) label" in lines[0]
    assert (out / "metrics.json").read_text() == '{"accuracy": 0.5}\n'
