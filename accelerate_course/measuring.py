"""What a run measured: the reports its processes wrote (accelerate_course/lab_driver.py's
rank<R>.json and run0.json) read into one record, Run. What the processes printed
(rank<R>.out) is for people to read: nothing here parses it.
"""

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from common.embedded import DATA

# the embedded validation split's pairs, one per line of its file: 408
VALIDATION_PAIRS = sum(1 for line in (DATA / "validation.jsonl").open() if line.strip())


@dataclass(frozen=True)
class Run:
    """What one run of a step (or of a variant, an exercise, a mistake) measured, from the
    reports its processes wrote (accelerate_course/lab_driver.py). "rank 0" is the process of
    global rank 0; a list "by process" has one entry per process that reported."""

    error: str | None  # the line the run stopped with (an `error:` line, or an exception), or None
    processes_reporting: (
        int  # how many processes reported (those that got as far as an Accelerator)
    )
    processes_started: int  # how many processes the launch started
    processes_alone: int  # of several started, how many said they were 1 of 1 (not joined)
    accelerator_processes: int | None  # how many processes rank 0's Accelerator said there are
    distributed_type: str | None  # rank 0's, e.g. "DistributedType.MULTI_CPU"
    scored: list  # pairs each call of the metric's compute saw, by process
    accuracy: list  # each of those computes' accuracy (rounded to 4 places)
    f1: list  # and F1
    writes: int  # metrics.json writes, all processes together
    printed: int  # processes that printed the result line ("validation: accuracy ...")
    bars: int  # processes that showed a progress bar of the script's own to its end
    weights_equal: bool  # every process ended with the same weights
    left_group: bool | None  # every process left the process group (None: no Accelerator)
    losses: list | None  # the training losses of the metrics.json rank 0 wrote
    predictions: list | None  # the predictions rank 0 wrote
    alone_predictions: list | None  # rank 0's final weights evaluated once more, alone
    alone_labels: list | None  # the validation split's labels, in the order of those predictions
    alone_loss: float | None  # the mean of each validation example's own loss, evaluated alone
    written_accuracy: float | None  # the accuracy in the metrics.json rank 0 wrote
    written_f1: float | None  # and its F1
    written_eval_loss: float | None  # and its validation loss (a take-home task writes one)
    error_line: int | None  # the line of the run's own script where its error was raised
    # (rank 0's, else the first other process's that has one)
    grad_norm: float | None  # rank 0's gradient norm at its first optimizer step
    learning_rates: list  # rank 0's learning rate at each optimizer step
    gathered: int | None  # how many predictions were gathered (eval_gathered), when written
    models_created_inside: int  # models created inside the launched processes
    models_created_before: int  # models created before the launch (in the launching process)
    lengths: list  # the distinct token lengths of the training batches
    eval_forwarded: list  # pairs each process put through the model in eval mode, by rank
    weights: str | None  # rank 0's final weights, hashed
    seconds: float  # training time (rank 0's train_seconds), else the run's wall time
    eval_seconds: float | None  # evaluation time (rank 0's eval_seconds), when written
    mixed_precision: str | None  # what rank 0's Accelerator ran in ("no", "bf16", "fp16")
    grad_scaler: str | None  # the loss scaler rank 0's Accelerator made (fp16: GradScaler)
    # what it saved, read from outside the run once it ended (saved_model): the files in its
    # model folder (None: it saved none), the first name in its weights file, and the weights
    # from_pretrained gives back (their fingerprint, or "cannot load: <why>")
    saves: int = 0  # model saves (common.output.saving_model), all processes together
    saved_files: list | None = None
    saved_first_name: str | None = None
    reloaded: str | None = None
    state_files: list | None = None  # the files save_state wrote (None: none), all processes'
    # what the grader measured from outside the run once it ended (accelerate_course/
    # evidence.py's Evidence), for a graded run; None elsewhere
    outside: object = None
    folder: str | None = None  # the run's folder (its reports; its output in folder/output)


def fingerprint(model):
    """Return a short hash of every weight of the model (equal weights, equal hash)."""
    digest = hashlib.sha1()
    for parameter in model.parameters():
        digest.update(parameter.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:12]


def saved_model(output):
    """Return (files, first weight name, reloaded) for the model a run saved in <output>/model,
    read in this process after the run: the folder's files, the first tensor name in its
    weights file, and the fingerprint of what from_pretrained loads from it (or "cannot
    load: <its first line>"); (None, None, None) when there is no such folder."""
    folder = Path(output) / "model"
    if not folder.is_dir():
        return None, None, None
    files = sorted(p.name for p in folder.iterdir())
    first_name = None
    if "model.safetensors" in files:
        from safetensors import safe_open

        with safe_open(folder / "model.safetensors", "pt") as weights:
            first_name = sorted(weights.keys())[0]
    elif "pytorch_model.bin" in files:
        import torch

        first_name = sorted(torch.load(folder / "pytorch_model.bin", weights_only=True))[0]
    from transformers import AutoModelForSequenceClassification
    from transformers.utils import logging

    verbosity, bars = logging.get_verbosity(), logging.is_progress_bar_enabled()
    logging.set_verbosity_error()  # its load report and bar: what it found is measured instead
    logging.disable_progress_bar()
    try:
        reloaded = fingerprint(AutoModelForSequenceClassification.from_pretrained(folder))
    except (OSError, ValueError, RuntimeError) as error:  # RuntimeError: a head of another size
        reloaded = f"cannot load: {str(error).splitlines()[0]}"
    finally:
        logging.set_verbosity(verbosity)
        if bars:
            logging.enable_progress_bar()
    return files, first_name, reloaded


def first_error(run_folder, error):
    """Return the error a run stopped with: rank 0's, and where rank 0 lost its connection to
    another process, what that process stopped with ("...; process R stopped with: ..."); the
    run's output folder written as <output-dir>."""
    if error and "Connection closed by peer" in error:
        for path in sorted(run_folder.glob("run*.json")):
            other = json.loads(path.read_text()).get("error")
            if path.stem != "run0" and other and "Connection closed by peer" not in other:
                error += f"; process {path.stem.removeprefix('run')} stopped with: {other}"
                break
    return error.replace(str(run_folder / "output"), "<output-dir>") if error else error


def measure(run_folder, processes_launched):
    """Return the Run that a run's reports (rank<R>.json, run0.json) describe."""
    ranks = sorted(
        (json.loads(p.read_text()) for p in run_folder.glob("rank*.json")), key=lambda r: r["rank"]
    )
    outcome = (
        json.loads((run_folder / "run0.json").read_text())
        if (run_folder / "run0.json").exists()
        else {"error": "no report", "seconds": 0}
    )
    accelerate_ranks = [r for r in ranks if r["num_processes"] is not None]
    rank0 = next((r for r in ranks if r["rank"] == 0), ranks[0] if ranks else {})
    writes = [w for r in ranks for w in r.get("writes", [])]
    written = rank0.get("writes") or [{}]
    results = [m for r in ranks for m in r.get("metric_results", [])]
    return Run(
        error=first_error(run_folder, outcome["error"]),
        processes_reporting=len(accelerate_ranks) or len(ranks),
        processes_started=processes_launched,
        processes_alone=sum(1 for r in ranks if r["num_processes"] == 1)
        if processes_launched > 1
        else 0,
        accelerator_processes=rank0.get("num_processes"),
        distributed_type=rank0.get("distributed_type"),
        scored=[m["pairs"] for m in results],
        accuracy=[round(m["accuracy"], 4) for m in results],
        f1=[round(m["f1"], 4) for m in results],
        writes=len(writes),
        saves=sum(r.get("saves", 0) for r in ranks),
        printed=sum(1 for r in ranks if r.get("results_printed")),
        bars=sum(1 for r in ranks if any(bar["n"] == bar["total"] for bar in r.get("bars", []))),
        weights_equal=len({r["weights"] for r in ranks if r.get("weights")}) <= 1,
        left_group=all(r.get("left_process_group") for r in accelerate_ranks)
        if accelerate_ranks
        else None,
        losses=written[-1].get("train_losses"),
        predictions=written[-1].get("predictions"),
        alone_predictions=rank0.get("alone_predictions"),
        alone_labels=rank0.get("alone_labels"),
        alone_loss=rank0.get("alone_loss"),
        written_accuracy=written[-1].get("accuracy"),
        written_f1=written[-1].get("f1"),
        written_eval_loss=written[-1].get("eval_loss"),
        error_line=next((r["error_line"] for r in ranks if r.get("error_line")), None)
        if outcome["error"]
        else None,
        grad_norm=(rank0.get("grad_norms") or [None])[0],
        learning_rates=rank0.get("learning_rates") or [],
        gathered=written[-1].get("eval_gathered"),
        models_created_inside=sum(sum(r.get("created_inside", [])) for r in ranks),
        # made before the launch: in the launching process, whose record every forked
        # process inherits (so it shows in each of their reports: counted once)
        models_created_before=max(
            (len(r.get("created_inside", [])) - sum(r.get("created_inside", [])) for r in ranks),
            default=0,
        ),
        lengths=sorted({n for r in ranks for n in r.get("lengths", [])}),
        eval_forwarded=[r.get("eval_forwarded", 0) for r in ranks],
        weights=rank0.get("weights"),
        seconds=written[-1].get("train_seconds", outcome.get("seconds")),
        eval_seconds=written[-1].get("eval_seconds"),
        mixed_precision=rank0.get("mixed_precision"),
        grad_scaler=rank0.get("grad_scaler"),
        **dict(
            zip(("saved_files", "saved_first_name", "reloaded"), saved_model(run_folder / "output"))
        ),
        state_files=sorted(p.name for p in (run_folder / "output" / "state").iterdir())
        if (run_folder / "output" / "state").is_dir()
        else None,
        folder=str(run_folder),
    )


def train_steps(flags):
    """Return the number of optimizer steps a run with these flags makes (--max-train-steps),
    or None for a full run."""
    flags = [str(f) for f in flags]
    return (
        int(flags[flags.index("--max-train-steps") + 1]) if "--max-train-steps" in flags else None
    )


def measure_batch(batch_path, processes):
    """Return {name: measure(...)} for every run of a batch the driver has run."""
    batch = json.loads(Path(batch_path).read_text())
    return {
        run["name"]: measure(Path(batch["folder"]) / run["name"], processes)
        for run in batch["runs"]
    }
