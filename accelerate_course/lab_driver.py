"""Run step scripts unchanged, one after the other, and report from inside every process.

    python -m accelerate_course.lab_driver BATCH.json                      (steps 1 and 4)
    ACCELERATE_USE_CPU=1 accelerate launch --config_file configs/cpu-2-processes.yaml \
        accelerate_course/lab_driver.py BATCH.json                         (steps 2 and 3)

BATCH.json (accelerate_course/lab_runs.py writes it) lists the runs: each a course step or a
patched copy, whose main() runs as `python script flags --output-dir <run folder>` would, in
the processes this driver was launched as, its Accelerate state reset between runs. Every
process writes into the run's folder rank<R>.out (what it printed) and rank<R>.json (what its
Accelerator says, what it computed with the metric, its share of the evaluation, its writes,
its first gradient norms, a fingerprint of its final weights; rank 0 also evaluates those
weights once more alone, when the batch asks), how far its progress bars went, how often
it printed the result line, and the line of the script its error was raised at; the process
that called main() writes run0.json (time, error). The spies only look: they wrap
from_pretrained, AdamW.step, the metric, write_metrics, the step's tqdm and print, and call
the originals (accelerate_course/measuring.py reads what they wrote, and only that).
"""

import builtins
import contextlib
import io
import json
import os
import re
import runpy
import sys
import time
import traceback
from pathlib import Path

import evaluate
import torch
from accelerate import PartialState
from accelerate.state import AcceleratorState, GradientState
from transformers import AutoModelForSequenceClassification

from accelerate_course import evidence
from accelerate_course.measuring import fingerprint

RANK = lambda: os.environ.get("RANK", "0")  # noqa: E731 (read when asked: launchers set it)
RESULT_LINE = "validation: accuracy"  # how the steps' result line starts (print's first words)


class Record:
    """What one process saw during one run."""

    def __init__(self, folder, script):
        self.folder = folder
        self.script = script  # the run's script, as its traceback frames name it
        self.models = []
        self.metric_results = []
        self.writes = []
        self.saves = 0  # how many times this process saved the model (common.output.saving_model)
        self.grad_norms = []
        self.learning_rates = []
        self.left_group = False
        self.created_inside = []
        self.lengths = []
        self.eval_forwarded = 0  # pairs this process put through the model in eval mode
        self.counting = True  # off once the step has returned (the driver's own evaluation)
        self.accelerators = []  # the Accelerators the step created
        self.bars = []  # the progress bars the step showed: {"n": done, "total": of how many}
        self.results_printed = 0  # calls of print with the result line (RESULT_LINE ...)
        self.error_line = None  # the script's line its exception was raised at (innermost)


def first_line(error):
    """Return an exception's first line as the tables and hints show it: without the C++
    source location a library prefixes (gloo's "[/__w/pytorch/.../pair.cc:553] ") and without
    the peer's port, which differs from run to run ("[127.0.0.1]:14361" -> "[127.0.0.1]")."""
    first = (str(error).strip().splitlines() or [""])[0]
    first = re.sub(r"^\[[^\]\s]+\.(?:cc|cpp|h):\d+\]\s*", "", first)
    return re.sub(r"(\[[0-9a-fA-F.:]+\]):\d+", r"\1", first)


def line_in_script(error, script):
    """Return the line of script in the innermost frame of error's traceback that is the
    script's own (where the script raised it, or called what did), or None."""
    lines = [
        frame.lineno
        for frame in traceback.extract_tb(error.__traceback__)
        if frame.filename == script
    ]
    return lines[-1] if lines else None


REFERENCE_LOADERS = {}  # the plain validation dataloaders, made once per launch and setting


def evaluate_alone(model, args):
    """Return the predictions of the model for the whole validation split, computed by this
    process alone on a plain dataloader (the reference for a distributed evaluation), with the
    split's labels and the mean of each example's own loss (the grader compares a run's
    written metric and loss with these)."""
    from common.checkpoint import load_tokenizer
    from common.data import get_dataloaders, load_splits

    key = (model.name_or_path, str(args.dataset), args.train_batch_size, args.eval_batch_size)
    if key not in REFERENCE_LOADERS:  # the runs of a launch share data and checkpoint
        with contextlib.redirect_stdout(io.StringIO()):  # its notes are not the run's output
            tokenizer = load_tokenizer(model.name_or_path)
            raw = load_splits(args.dataset)
        REFERENCE_LOADERS[key] = get_dataloaders(raw, tokenizer, args)[1]
    return evidence.evaluate_alone(model, REFERENCE_LOADERS[key])


def report_process(record, args, again_alone):
    """Write rank<R>.json for this process; rank 0 evaluates the final weights once more
    alone when again_alone (the batch's "evaluate_alone")."""
    record.counting = False
    state = PartialState._shared_state  # empty when the run stopped before its Accelerator
    model = record.models[-1] if record.models else None
    report = {
        "rank": int(RANK()),
        "process_index": state.get("process_index"),
        "num_processes": state.get("num_processes"),
        "distributed_type": str(state["distributed_type"]) if "distributed_type" in state else None,
        "backend": state.get("backend"),
        "left_process_group": record.left_group,
        "metric_results": record.metric_results,
        "writes": record.writes,
        "saves": record.saves,
        "grad_norms": record.grad_norms,
        "learning_rates": record.learning_rates,
        "created_inside": record.created_inside,
        "lengths": sorted(set(record.lengths)),
        "eval_forwarded": record.eval_forwarded,
        "weights": fingerprint(model) if model is not None else None,
        "mixed_precision": record.accelerators[-1].mixed_precision if record.accelerators else None,
        "grad_scaler": next(
            (
                type(a.scaler).__name__
                for a in record.accelerators
                if getattr(a, "scaler", None) is not None
            ),
            None,
        ),
        "bars": record.bars,
        "results_printed": record.results_printed,
        "error_line": record.error_line,
    }
    if report["rank"] == 0 and model is not None and args is not None and again_alone:
        report["alone_predictions"], report["alone_labels"], report["alone_loss"] = evaluate_alone(
            model, args
        )
    path = record.folder / f"rank{RANK()}.json"
    path.write_text(json.dumps(report))


@contextlib.contextmanager
def output_to(path):
    """Send this process's stdout and stderr (print, tqdm, warnings) to a file."""
    with (
        open(path, "a", buffering=1) as f,
        contextlib.redirect_stdout(f),
        contextlib.redirect_stderr(f),
    ):
        yield


def spy_on(step_globals, record):
    """Wrap what the step calls so that the record sees it; return a function that undoes it."""
    undo = []

    original_from_pretrained = AutoModelForSequenceClassification.from_pretrained.__func__

    def from_pretrained(cls, *a, **k):
        model = original_from_pretrained(cls, *a, **k)
        record.models.append(model)
        # created by a launched process (inside training_function), or before any launch
        record.created_inside.append(bool(PartialState._shared_state.get("num_processes")))
        model.register_forward_pre_hook(see_batch, with_kwargs=True)
        return model

    def see_batch(module, args, kwargs):
        """Note the length of the batches the model sees (the first 40 forward passes), and
        how many pairs this process evaluates (forward passes in eval mode)."""
        if "input_ids" not in kwargs:
            return
        if len(record.lengths) < 40:
            record.lengths.append(kwargs["input_ids"].shape[1])
        if not module.training and record.counting:
            record.eval_forwarded += kwargs["input_ids"].shape[0]

    AutoModelForSequenceClassification.from_pretrained = classmethod(from_pretrained)
    undo.append(
        lambda: setattr(
            AutoModelForSequenceClassification,
            "from_pretrained",
            classmethod(original_from_pretrained),
        )
    )

    original_compute = evaluate.EvaluationModule.compute

    def compute(self, *a, **k):
        result = original_compute(self, *a, **k)
        if result is not None:  # None: a process that is not the metric's main process
            pairs = len(k["predictions"]) if "predictions" in k else None
            record.metric_results.append(dict(result, pairs=pairs))
        return result

    original_add_batch = evaluate.EvaluationModule.add_batch
    added = []

    def add_batch(self, *a, **k):
        """The metric's add_batch, counting the predictions added."""
        added.append(len(k.get("predictions", [])))
        return original_add_batch(self, *a, **k)

    def compute_counting(self, *a, **k):
        """The metric's compute, recording its result and how many pairs it scored."""
        count = sum(added)
        added.clear()
        result = compute(self, *a, **k)
        if record.metric_results and record.metric_results[-1]["pairs"] is None:
            record.metric_results[-1]["pairs"] = count
        return result

    # (evaluate copies these functions when it loads a metric and appends to their
    # docstrings, which must therefore be written out, as they are above)
    evaluate.EvaluationModule.compute = compute_counting
    evaluate.EvaluationModule.add_batch = add_batch
    undo.append(lambda: setattr(evaluate.EvaluationModule, "compute", original_compute))
    undo.append(lambda: setattr(evaluate.EvaluationModule, "add_batch", original_add_batch))

    if "write_metrics" in step_globals:
        original_write = step_globals["write_metrics"]

        def write_metrics(output_dir, args, results):
            record.writes.append(
                {
                    k: results[k]
                    for k in (
                        "accuracy",
                        "f1",
                        "eval_loss",
                        "eval_samples",
                        "eval_gathered",
                        "predictions",
                        "train_losses",
                        "num_processes",
                        "train_seconds",
                        "eval_seconds",
                    )
                    if k in results
                }
            )
            return original_write(output_dir, args, results)

        step_globals["write_metrics"] = write_metrics

    if "saving_model" in step_globals:
        original_saving = step_globals["saving_model"]

        def saving_model(output_dir):
            record.saves += 1
            return original_saving(output_dir)

        step_globals["saving_model"] = saving_model

    if "Accelerator" in step_globals:
        original_accelerator = step_globals["Accelerator"]

        class Accelerator(original_accelerator):
            def __init__(self, *a, **k):
                super().__init__(*a, **k)
                record.accelerators.append(self)

        step_globals["Accelerator"] = Accelerator

    if "tqdm" in step_globals:  # the step's own bars (not the libraries', as the weights' loading)
        original_tqdm = step_globals["tqdm"]

        class tqdm(original_tqdm):
            def __init__(self, *a, **k):
                super().__init__(*a, **k)
                # a disabled bar (not the local main process) shows nothing and counts nothing
                self.seen = {"n": self.n, "total": self.total}
                if not self.disable:
                    record.bars.append(self.seen)

            def update(self, n=1):
                shown = super().update(n)
                self.seen["n"] = self.n
                return shown

            def close(self):
                if hasattr(self, "seen"):  # (not when its own __init__ failed)
                    self.seen["n"] = self.n  # a bar iterated over counts its steps at its end
                return super().close()

        step_globals["tqdm"] = tqdm

    original_print = builtins.print

    def print_counting(*a, **k):
        """print, counting the calls that print the result line (the steps print it with
        print or accelerator.print, which calls print on the processes that print)."""
        if record.counting and " ".join(map(str, a)).startswith(RESULT_LINE):
            record.results_printed += 1
        return original_print(*a, **k)

    builtins.print = print_counting
    undo.append(lambda: setattr(builtins, "print", original_print))

    if "AdamW" in step_globals:
        original_adamw = step_globals["AdamW"]

        class AdamW(original_adamw):
            def step(self, *a, **k):
                record.learning_rates.append(self.param_groups[0]["lr"])
                if len(record.grad_norms) < 3:
                    grads = [
                        p.grad.detach().double().norm() ** 2
                        for group in self.param_groups
                        for p in group["params"]
                        if p.grad is not None
                    ]
                    record.grad_norms.append(
                        float(torch.stack(grads).sum().sqrt()) if grads else 0.0
                    )
                return super().step(*a, **k)

        step_globals["AdamW"] = AdamW
    # the step leaves the process group at its end (end_training); the driver keeps it for the
    # next run and leaves it once, at its own end: a group cannot be set up twice in a launch
    # (the launcher's store still holds the first group's addresses). Noted, not done:
    original_destroy = torch.distributed.destroy_process_group

    def destroy_process_group(group=None):
        record.left_group = True

    torch.distributed.destroy_process_group = destroy_process_group
    undo.append(lambda: setattr(torch.distributed, "destroy_process_group", original_destroy))
    return lambda: [u() for u in reversed(undo)]


def run(entry, flags, folder, again_alone):
    """Run one script's main() in this process; write run<R>.json (and rank<R>.json, where
    the script stopped before its training function reported). again_alone: the batch's
    "evaluate_alone" (off where nothing compares with that evaluation)."""
    folder.mkdir(parents=True, exist_ok=True)
    record = Record(folder, entry["script"])
    os.environ.update(entry.get("env", {}))
    # a fresh start for Accelerate, as in a new process: no state (the process group, if
    # there is one, is kept: see spy_on)
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    # the steps are unchanged scripts whose main() calls parse_args() with no argument, which
    # reads sys.argv: their flags can reach them only there, set here and nowhere else
    sys.argv = [entry["script"], *entry.get("flags", flags), "--output-dir", str(folder / "output")]
    outcome = {"error": None}
    start = time.perf_counter()
    with output_to(folder / f"rank{RANK()}.out"):
        undo = lambda: None  # noqa: E731
        try:
            step = runpy.run_path(entry["script"], run_name="lab")
            step_globals = step["main"].__globals__
            undo = spy_on(step_globals, record)
            original_training_function = step_globals.get("training_function")

            def training_function(*args):
                # in the processes notebook_launcher starts, write to their own files
                with output_to(folder / f"rank{RANK()}.out"):
                    try:
                        return original_training_function(*args)
                    except Exception as error:  # its line, from the process that raised it
                        record.error_line = line_in_script(error, record.script)
                        raise
                    finally:
                        report_process(record, args[-1], again_alone)

            if original_training_function:  # a step (a helper script may have none)
                step_globals["training_function"] = training_function
            step["main"]()
        except SystemExit as stop:
            if stop.code not in (None, 0):
                outcome["error"] = str(stop.code)
        except Exception as error:  # a refusal is a result too: keep its first line
            outcome["error"] = f"{type(error).__name__}: {first_line(error)}"
            if record.error_line is None:  # raised outside the training function
                record.error_line = line_in_script(error, record.script)
            traceback.print_exc()
        finally:
            undo()
    outcome["seconds"] = time.perf_counter() - start
    if not (folder / f"rank{RANK()}.json").exists():  # main() stopped before training
        report_process(record, None, again_alone)
    (folder / f"run{RANK()}.json").write_text(json.dumps(outcome))


def main():
    batch = json.loads(Path(sys.argv[1]).read_text())
    for entry in batch["runs"]:
        saved_env = dict(os.environ)
        run(
            entry,
            batch["flags"],
            Path(batch["folder"]) / entry["name"],
            batch.get("evaluate_alone", True),
        )
        os.environ.clear()
        os.environ.update(saved_env)
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
