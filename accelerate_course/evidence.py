"""What a graded run left behind, measured from outside it, in the grader's own process.

A graded file runs in processes of its own (accelerate_course/sandbox.py: as a user of their
own, where the grader has root). Whatever those processes report about themselves, they could
have made up. What is measured here they could not: while they run, the grader's process
counts the writes into their output folder (Linux's inotify); once they have ended, it reads
the metrics.json they left, and loads the model they saved in <output-dir>/model and evaluates
it alone on the whole validation split, with the course's own tokenizer and data. The grade's
points rest on these (accelerate_course/check.py; docs/classroom.md lists which check rests on
what).
"""

import ctypes
import ctypes.util
import functools
import json
import math
import os
import struct
import threading
from pathlib import Path
from typing import NamedTuple

# inotify's events (linux/inotify.h)
IN_CLOSE_WRITE, IN_MOVED_TO, IN_CREATE, IN_DELETE_SELF, IN_ISDIR = (
    0x008,
    0x080,
    0x100,
    0x400,
    0x40000000,
)
IN_NONBLOCK = 0o4000
EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (then len bytes of name)
METRICS = "metrics.json"
MODEL = "model"


class Writes:
    """Count, from this process, the writes a run makes into its output folder while it runs:
    metrics.json written (a file closed after writing, or renamed into place: the course's
    write-aside-then-replace), and the model saved (a folder `model` made or renamed into
    place, or its config.json written again into an existing one). Linux only: elsewhere, and
    where the output folder was removed during the run, the counts are None (not measured)."""

    def __init__(self, output):
        self.output = Path(output)
        self.metrics = 0
        self.model_folders = 0  # `model` made, or renamed into place
        self.model_configs = 0  # config.json written inside `model`
        self.lost = False  # the output folder itself was removed or replaced
        self.libc = None
        libc_name = ctypes.util.find_library("c") if os.name == "posix" else None
        if libc_name and hasattr(ctypes.CDLL(libc_name), "inotify_init1"):
            self.libc = ctypes.CDLL(libc_name, use_errno=True)

    def __enter__(self):
        if self.libc is None:
            return self
        self.output.mkdir(parents=True, exist_ok=True)
        self.fd = self.libc.inotify_init1(IN_NONBLOCK)
        self.top = self.watch(
            self.output, IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_DELETE_SELF
        )
        self.model_watch = None
        self.watch_model()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.read_events, daemon=True)
        self.thread.start()
        return self

    def watch(self, path, mask):
        return self.libc.inotify_add_watch(self.fd, os.fsencode(path), mask)

    def watch_model(self):
        """Watch <output>/model for config.json written into it (a save over an existing one)."""
        folder = self.output / MODEL
        if folder.is_dir() and not folder.is_symlink():
            self.model_watch = self.watch(folder, IN_CLOSE_WRITE | IN_MOVED_TO)

    def read_events(self):
        import select

        while not self.stop.is_set():
            ready, _, _ = select.select([self.fd], [], [], 0.05)
            if ready:
                self.take(os.read(self.fd, 65536))

    def take(self, data):
        offset = 0
        while offset < len(data):
            wd, mask, _, length = EVENT.unpack_from(data, offset)
            name = (
                data[offset + EVENT.size : offset + EVENT.size + length]
                .rstrip(b"\0")
                .decode(errors="replace")
            )
            offset += EVENT.size + length
            if wd == self.top:
                if mask & IN_DELETE_SELF:
                    self.lost = True
                elif name == METRICS and mask & (IN_CLOSE_WRITE | IN_MOVED_TO):
                    self.metrics += 1
                elif name == MODEL and mask & IN_ISDIR and mask & (IN_CREATE | IN_MOVED_TO):
                    self.model_folders += 1
                    self.watch_model()
            elif wd == self.model_watch and name == "config.json":
                self.model_configs += 1

    def __exit__(self, *exc):
        if self.libc is None:
            return
        self.stop.set()
        self.thread.join()
        with_more = True
        while with_more:  # what arrived after the last look
            try:
                self.take(os.read(self.fd, 65536))
            except BlockingIOError:
                with_more = False
        os.close(self.fd)

    @property
    def counted(self):
        """(metrics.json writes, model saves), or (None, None) where not measured."""
        if self.libc is None or self.lost:
            return None, None
        return self.metrics, max(self.model_folders, self.model_configs)


class Evidence(NamedTuple):
    """What a run left, measured from outside it."""

    written: dict | None  # the metrics.json it left (None: none, or not readable: problem says)
    written_problem: str  # "" or why metrics.json could not be read ("missing", "a link", ...)
    predictions: list | None  # its saved model's, evaluated alone on the whole split
    labels: list  # the split's labels, in its order (read by the grader from the course's data)
    loss: float | None  # the mean of each example's own loss under that model
    weights: str | None  # the saved model's fingerprint (measuring.fingerprint)
    model_problem: str  # "" or why its model could not be loaded ("no <output-dir>/model", ...)
    metrics_writes: int | None  # metrics.json writes counted while it ran (None: not counted)
    model_saves: int | None  # model saves counted while it ran (None: not counted)
    # the tensors of the weights file it saved, read as they are (a `module.` that a wrapper's
    # state_dict put in front of each name left out), hashed; None: none could be read
    saved_tensors: str | None = None


def links_in(folder):
    """Return the paths under folder that are symbolic links (the grader reads none)."""
    return [p for p in [folder, *folder.rglob("*")] if p.is_symlink()]


def read_written(output):
    """Return (the metrics.json a run left in output, or None; "" or why not)."""
    path = Path(output) / METRICS
    if path.is_symlink():
        return None, "link"
    if not path.is_file():
        return None, "missing"
    try:
        written = json.loads(path.read_text(encoding="utf-8"), parse_constant=lambda name: math.nan)
    except (ValueError, UnicodeDecodeError):
        return None, "not_json"
    return (written, "") if isinstance(written, dict) else (None, "not_json")


def evaluate_alone(model, loader):
    """Return (predictions, labels, mean of each example's own loss) of model on loader, in
    this process alone, in eval mode (its mode put back after), on the model's device."""
    import torch

    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    predictions, labels, losses = [], [], []
    with torch.no_grad():
        for batch in loader:
            batch = {k: v.to(device) for k, v in batch.items()}
            logits = model(**batch).logits
            predictions += logits.argmax(dim=-1).tolist()
            labels += batch["labels"].tolist()
            losses.append(
                torch.nn.functional.cross_entropy(logits.float(), batch["labels"], reduction="none")
            )
    model.train(was_training)
    return predictions, labels, torch.cat(losses).double().mean().item()


@functools.cache
def validation_loader(flags):
    """Return the validation dataloader a run with these flags (a tuple) evaluates on, made
    here: the course's data and the tokenizer of the run's checkpoint (not one the run
    saved)."""
    import contextlib
    import io

    from common.checkpoint import load_tokenizer, resolve_checkpoint
    from common.cli import parse_args
    from common.data import get_dataloaders, load_splits

    args = parse_args([str(f) for f in flags])
    with contextlib.redirect_stdout(io.StringIO()):  # its notes are not the grade's output
        tokenizer = load_tokenizer(resolve_checkpoint(args.checkpoint))
        raw = load_splits(args.dataset)
    return get_dataloaders(raw, tokenizer, args)[1]


def measured(output, flags, writes=(None, None)):
    """Return the Evidence of the run whose output folder is output (the run has ended), run
    with these flags; writes: the (metrics.json writes, model saves) counted while it ran."""
    from accelerate_course.measuring import fingerprint

    output = Path(output)
    written, written_problem = read_written(output)
    folder = output / MODEL
    predictions = loss = weights = None
    labels = [
        label
        for batch in validation_loader(tuple(map(str, flags)))
        for label in batch["labels"].tolist()
    ]  # the split's, whatever the run saved
    if not folder.exists():
        model_problem = "missing"
    elif links_in(folder):
        model_problem = "link"
    else:
        from transformers import AutoModelForSequenceClassification
        from transformers.utils import logging

        verbosity = logging.get_verbosity()
        logging.set_verbosity_error()
        logging.disable_progress_bar()
        try:
            model = AutoModelForSequenceClassification.from_pretrained(folder)
            predictions, _, loss = evaluate_alone(model, validation_loader(tuple(map(str, flags))))
            weights, model_problem = fingerprint(model), ""
        except Exception as error:  # noqa: BLE001 (whatever the folder holds: said, not raised)
            first = (str(error).strip().splitlines() or [""])[0]
            model_problem = first.replace(str(folder), "<output-dir>/model")
        finally:
            logging.set_verbosity(verbosity)
            logging.enable_progress_bar()
    return Evidence(
        written,
        written_problem,
        predictions,
        labels,
        loss,
        weights,
        model_problem,
        *writes,
        saved_tensors=None if links_in(output) else saved_tensors(folder),
    )


def saved_tensors(folder):
    """Return a hash of the tensors in a saved model's weights file (model.safetensors, else
    pytorch_model.bin), by name, a leading `module.` left out: equal weights, equal hash,
    whether or not the file loads into the model; None where there is no file to read."""
    import hashlib

    import torch

    folder = Path(folder)
    try:
        if (folder / "model.safetensors").is_file():
            from safetensors.torch import load_file

            tensors = load_file(folder / "model.safetensors")
        elif (folder / "pytorch_model.bin").is_file():
            tensors = torch.load(
                folder / "pytorch_model.bin", weights_only=True, map_location="cpu"
            )
        else:
            return None
    except Exception:  # noqa: BLE001 (a file that does not read: nothing to compare)
        return None
    if not isinstance(tensors, dict):
        return None
    digest = hashlib.sha1()
    for name in sorted(tensors, key=lambda n: n.removeprefix("module.")):
        tensor = tensors[name]
        if isinstance(tensor, torch.Tensor):
            digest.update(name.removeprefix("module.").encode())
            digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:12]
