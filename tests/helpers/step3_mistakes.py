"""Step 3 as a student might hand it in wrong: the cheats a grader must not pass, and the
mistakes that crash, each made from the course's own step 3 by replacing exact lines (so a
change of step 3 that moves those lines fails loudly here, instead of testing nothing).

    step3_mistakes.write_all(folder) -> {name: path}
"""

from pathlib import Path

from accelerate_course.steps import TRAIN_PY

STEP3 = TRAIN_PY[3]
CUT = "[: eval_dataloader.total_dataset_length]"
GATHER_PREDICTIONS = "all_predictions.append(accelerator.gather(predictions))"
GATHER_LABELS = 'all_labels.append(accelerator.gather(batch["labels"]))'

# name -> [(old, new), ...]: each old must occur in step 3
MISTAKES = {
    # the cut hard-coded for 2 processes x batches of 8 x 408 pairs
    "hardcoded_cut": [(CUT, "[:-8]"), (CUT, "[:-8]")],
    # the writer chosen per machine: right on one machine only
    "local_main_writes": [
        ("if accelerator.is_main_process:", "if accelerator.is_local_main_process:")
    ],
    # no training (the bar advanced by hand), and every process evaluates the whole split on
    # its own, unprepared loader, without gathering
    "no_training_whole_split": [
        (
            "    for epoch in range(args.epochs):\n",
            "    progress_bar.update(num_training_steps)\n    for epoch in range(0):\n",
        ),
        (
            "    train_dataloader, eval_dataloader, model, optimizer = accelerator.prepare(",
            "    train_dataloader, _, model, optimizer = accelerator.prepare(",
        ),
        (GATHER_PREDICTIONS, "all_predictions.append(predictions)"),
        (GATHER_LABELS, 'all_labels.append(batch["labels"])'),
        (CUT, "[: len(eval_dataloader.dataset)]"),  # a plain loader: the split's own length
        (CUT, "[: len(eval_dataloader.dataset)]"),
    ],
    # trains, then copies the predictions of a metrics.json found near its output folder (an
    # earlier run's) instead of evaluating; its own metric is computed on the copy
    "copied_predictions": [
        (
            "    for batch in eval_dataloader:\n",
            "    import json, pathlib\n"
            "    found = sorted(pathlib.Path(args.output_dir).parents[1].rglob('metrics.json'))\n"
            "    copied = json.loads(found[0].read_text())['predictions'] if found else [0] * 408\n"
            "    all_predictions.append(torch.tensor(copied))\n"
            "    all_labels.append(eval_dataloader.dataset['labels'][:])\n"
            "    for batch in []:\n",
        ),
    ],
    # evaluates and gathers, but writes one class for every pair instead of the model's
    # predictions (after a short run the model itself predicts one class: check.PREDICTING_RUN)
    "fixed_predictions": [
        (
            "predictions = torch.argmax(outputs.logits, dim=-1)",
            'predictions = torch.ones_like(batch["labels"])',
        )
    ],
    # a crash (the labels left ungathered is a what-if variant: labels_not_gathered): the
    # predictions made a list before the gather
    "tolist_before_gather": [
        (
            GATHER_PREDICTIONS,
            "all_predictions.append(torch.tensor(accelerator.gather(predictions.tolist())))",
        )
    ],
    # a collective only one process joins
    "gather_on_main_only": [
        (GATHER_PREDICTIONS, "if accelerator.is_main_process:\n            " + GATHER_PREDICTIONS)
    ],
}


def mistake(name):
    """Return step 3's text with mistake `name` made."""
    text = STEP3.read_text()
    for old, new in MISTAKES[name]:
        assert old in text, f"{name}: step 3 no longer has {old!r}"
        text = text.replace(old, new, 1)
    return text


def write_all(folder, names=None):
    """Write each mistake (all, or those named) as folder/<name>/train.py; return {name: path}."""
    paths = {}
    for name in names or MISTAKES:
        path = Path(folder) / name / "train.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(mistake(name))
        paths[name] = path
    return paths
