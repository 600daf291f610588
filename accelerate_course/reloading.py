"""The model a step saved, reloaded as a student would reload it: in a fresh process, with
transformers alone (no Accelerate, none of the step's code), predicting the validation pairs.

    python -m accelerate_course.reloading outputs/course/step1 outputs/course/step3
    python -m accelerate_course.reloading outputs/course/step4 --pad-to 128

It prints {run folder: predictions} as one line of JSON.
Its predictions are compared with those the run wrote into metrics.json: make course's table
shows the count that are equal per step (408 / 408 equal when the saved model is the model that
was evaluated). It reads the run's folder: model/ (saved by the step) and metrics.json (the
dataset, checkpoint and evaluation batch size the run used). The validation pairs are batched
as the run batched them (its eval batch size, padded to each batch's longest pair or to
--pad-to), since a batch's padded length can change a prediction's last bits.
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

from accelerate_course.steps import REPO


def reloaded_predictions(run_folder, pad_to=None):
    """Return the predictions of <run_folder>/model for the run's validation split (a list of
    ints), made in this process."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from common.data import get_dataloaders, load_splits

    run_folder = Path(run_folder)
    hyperparameters = json.loads((run_folder / "metrics.json").read_text())["hyperparameters"]
    model = AutoModelForSequenceClassification.from_pretrained(run_folder / "model")
    tokenizer = AutoTokenizer.from_pretrained(run_folder / "model")
    _, eval_dataloader = get_dataloaders(
        load_splits(hyperparameters["dataset"]),
        tokenizer,
        argparse.Namespace(**hyperparameters),
        pad_to_max_length=pad_to,
    )
    model.eval()
    predictions = []
    for batch in eval_dataloader:
        with torch.no_grad():
            logits = model(**batch).logits
        predictions += torch.argmax(logits, dim=-1).tolist()
    return predictions


def compare_reloaded(run_folders):
    """Reload the model of each run folder in fresh processes ({run folder: the length its
    step pads validation pairs to, or None}; one process for each length, side by side) and
    return {run folder: how many of its predictions equal the run's metrics.json predictions,
    as "408 / 408 equal", or the line that says why it did not reload}."""
    lengths = {}
    for folder, pad_to in run_folders.items():
        lengths.setdefault(pad_to, []).append(str(folder))
    processes = {
        pad_to: subprocess.Popen(
            [
                sys.executable,
                "-m",
                "accelerate_course.reloading",
                *folders,
                *(["--pad-to", str(pad_to)] if pad_to else []),
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for pad_to, folders in lengths.items()
    }
    said = {}
    try:
        for pad_to, process in processes.items():
            output, errors = process.communicate()
            if process.returncode != 0:
                lines = (output + errors).strip().splitlines()
                why = lines[-1] if lines else f"exit code {process.returncode}"
                said.update({folder: f"did not reload: {why}" for folder in lengths[pad_to]})
                continue
            for folder, reloaded in json.loads(output.strip().splitlines()[-1]).items():
                ran = json.loads((Path(folder) / "metrics.json").read_text())["predictions"]
                equal = (
                    sum(a == b for a, b in zip(reloaded, ran)) if len(reloaded) == len(ran) else 0
                )
                said[folder] = f"{equal} / {len(ran)} equal"
    finally:
        for process in processes.values():
            process.kill()  # none is left running, whatever ended the wait
            process.wait()
    return {folder: said[str(folder)] for folder in run_folders}


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "run_folders",
        nargs="+",
        metavar="run_folder",
        help="a step's --output-dir: model/ and metrics.json",
    )
    parser.add_argument(
        "--pad-to",
        type=int,
        default=None,
        help="pad every validation pair to this length, as step 4 does (128)",
    )
    args = parser.parse_args()
    for folder in args.run_folders:
        for name in ("model", "metrics.json"):
            if not (Path(folder) / name).exists():
                sys.exit(
                    f"error: {Path(folder) / name} does not exist; pass the --output-dir "
                    "of a step that finished"
                )
    print(
        json.dumps(
            {folder: reloaded_predictions(folder, args.pad_to) for folder in args.run_folders}
        )
    )


if __name__ == "__main__":
    main()
