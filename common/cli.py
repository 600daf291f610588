"""The command line shared by every step: the same flags, defaults and checks in each."""

import argparse
import math
import os
import re
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

from common.errors import fail

# a negative number as a flag's value (-5e-5, -1, -inf): argparse reads a word that starts
# with "-" and is not a plain negative integer or decimal as a flag of its own
NEGATIVE_NUMBER = re.compile(r"-(\d+\.?\d*|\.\d+)(e[-+]?\d+)?|-inf(inity)?|-nan", re.I)


class OneLineErrorParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr (no usage block), exit code 2;
    a negative number after a flag is read as its value, so that the flag's own check says
    what is wrong with it (not "expected one argument")."""

    def parse_known_args(self, args=None, namespace=None):
        words = []
        for word in sys.argv[1:] if args is None else args:
            if (
                words
                and NEGATIVE_NUMBER.fullmatch(word)
                and words[-1].startswith("--")
                and "=" not in words[-1]
            ):
                words[-1] += f"={word}"
            else:
                words.append(word)
        return super().parse_known_args(words, namespace)

    def error(self, message):
        sys.exit(f"error: {message} (see --help)")


def positive_int(text):
    """Return text as an int > 0, or raise the error argparse reports on one line."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive whole number, got {value}")
    return value


def positive_float(text):
    """Return text as a finite float > 0, or raise the error argparse reports on one line."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {value}")
    return value


def seed_number(text):
    """Return text as a seed, a whole number from 0 to 2**32 - 1 (what numpy, and so
    transformers' set_seed, accepts), or raise argparse's error."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not 0 <= value <= 2**32 - 1:
        raise argparse.ArgumentTypeError(f"a seed is between 0 and 4294967295, got {value}")
    return value


def learning_rate_note(lr):
    """Return a note on a learning rate above 1 ("" for any other): fine-tuning uses about
    5e-5, and at such a rate the loss soon turns NaN; 5e5 for 5e-5 is the likely slip."""
    if lr <= 1:
        return ""
    meant = lr / 10 ** (2 * math.floor(math.log10(lr)))
    guess = f" (did you mean {meant:g}?)".replace("e-0", "e-") if meant < 1 else ""
    return (
        f"note: --lr {lr:g} is above 1: fine-tuning uses about 5e-5, and at this rate the "
        f"loss will likely turn NaN{guess}"
    )


def port_number(text):
    """Return text as a TCP port (0 to 65535; 0: a free one), or raise argparse's error."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is between 0 and 65535, got {value}")
    return value


# the settings a notebook's settings cell gave parse_args, for the later calls in the same
# Jupyter kernel that give none: step 4's main(), a cell of train.py that the notebook copies
# unchanged, parses again, and a kernel has no command line of its own to read them from
KERNEL_SETTINGS = {}


def parse_args(argv=None, description=None, settings=None):
    """Return the parsed arguments (an argparse.Namespace) of the course's command line.

    argv=None reads sys.argv, except where settings are given, or in a Jupyter kernel (whose
    own arguments are not the course's).
    settings: {setting: value}, as a notebook holds them, instead of a command line (see
    flags). In a Jupyter kernel, a call without argv or settings takes the settings of the
    kernel's last call that gave some (the defaults when none did), and there the flags of
    the environment variable COURSE_ARGS, e.g. COURSE_ARGS="--max-train-steps 20", come
    after them and so win: a user's (or a test's) own override, typed as in a shell.
    """
    in_kernel = "ipykernel" in sys.modules
    if settings is not None and in_kernel:
        KERNEL_SETTINGS.clear()
        KERNEL_SETTINGS.update(settings)
    if argv is None and (settings is not None or in_kernel):
        argv = flags(KERNEL_SETTINGS if settings is None else settings)
        if in_kernel:
            argv += shlex.split(os.environ.get("COURSE_ARGS", ""))
    parser = OneLineErrorParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--checkpoint",
        default="embedded",
        help="'embedded' (the tiny BERT shipped in common/), a hub id such as "
        "bert-base-cased, or a local folder saved with save_pretrained",
    )
    parser.add_argument(
        "--dataset",
        default="embedded",
        help="'embedded' (the MRPC-shaped pairs shipped in common/), "
        "'embedded-sst2' (SST-2-shaped single sentences, shipped too), "
        "'glue' or 'glue-mrpc' (the hub's nyu-mll/glue, config mrpc), "
        "'glue-sst2' (config sst2), or a local folder with train and "
        "validation files (csv, json/jsonl or parquet), or GLUE's own "
        "train.tsv and dev.tsv",
    )
    parser.add_argument("--epochs", type=positive_int, default=3)
    parser.add_argument(
        "--lr",
        type=positive_float,
        default=5e-5,
        help="peak learning rate, falling linearly to 0 (no warm-up)",
    )
    parser.add_argument("--train-batch-size", type=positive_int, default=8, help="per process")
    parser.add_argument("--eval-batch-size", type=positive_int, default=8, help="per process")
    parser.add_argument("--seed", type=seed_number, default=42)
    parser.add_argument(
        "--deterministic",
        action="store_true",
        help="deterministic kernels only (torch.use_deterministic_algorithms), "
        "so that two runs on a CUDA GPU give the same numbers; there, set "
        "CUBLAS_WORKSPACE_CONFIG=:4096:8 in the environment too, as make "
        "course does (on the CPU the course's kernels are deterministic "
        "already)",
    )
    parser.add_argument(
        "--max-train-steps",
        type=positive_int,
        default=None,
        help="stop after this many optimizer steps (short runs for tests)",
    )
    parser.add_argument("--output-dir", default="outputs", help="where metrics.json is written")
    parser.add_argument(
        "--num-processes",
        type=positive_int,
        default=2,
        help="step 4 only: how many processes notebook_launcher starts (steps "
        "1-3 get theirs from the launcher: accelerate launch "
        "--num_processes N)",
    )
    parser.add_argument(
        "--port",
        type=port_number,
        default=0,
        help="step 4 only: the port notebook_launcher's processes meet on "
        "(default 0: a free one; 29500 may be another user's)",
    )
    args = parser.parse_args(argv)
    if learning_rate_note(args.lr) and os.environ.get("RANK", "0") == "0":  # once per launch
        print(learning_rate_note(args.lr), file=sys.stderr, flush=True)
    # before any data or model is loaded: fail fast, in one line, and lose nothing
    check_dataset_name(args.dataset)
    check_cache_folders()
    check_output_dir(args.output_dir, args.checkpoint)
    check_port(args.port)
    if args.dataset not in SHIPPED_DATASETS:
        # a dataset the course does not ship is read and checked now, by every process before
        # any joins the others: a bad row then stops each of them in one line, where inside
        # main_process_first the main process would stop alone and its peers lose it
        from common.data import load_splits

        load_splits(args.dataset)
    return args


# the datasets --dataset names (besides a local folder): the embedded MRPC-shaped pairs and
# SST-2-shaped sentences, and GLUE's from the Hugging Face Hub (common/data.py loads them)
SHIPPED_DATASETS = ("embedded", "embedded-sst2")  # in common/embedded, checked by the tests
DATASET_NAMES = (*SHIPPED_DATASETS, "glue", "glue-mrpc", "glue-sst2")


def flags(settings):
    """Return the course's flags, a list of words, from {setting: value} (the notebook's
    settings: "train_batch_size": 8 is --train-batch-size 8); a None or False value is left
    out, True is a flag without a value."""
    words = []
    for name, value in settings.items():
        if value is None or value is False:
            continue
        words.append("--" + name.replace("_", "-"))
        if value is not True:
            words.append(str(value))
    return words


def check_dataset_name(name):
    """Exit with one error line unless name is one of DATASET_NAMES or an existing folder."""
    if name in DATASET_NAMES or Path(name).is_dir():
        return
    if Path(name).exists():
        fail(
            f"--dataset {name} is a file, not a folder; pass the folder that holds the train "
            "and validation files (csv, json/jsonl or parquet, or GLUE's train.tsv and dev.tsv)"
        )
    fail(
        f"unknown dataset {name!r}: use 'embedded' (the default), 'embedded-sst2', 'glue' "
        "('glue-mrpc'), 'glue-sst2', or a folder with train and validation files (csv, "
        "json/jsonl or parquet, or GLUE's .tsv)"
    )


def check_cache_folders():
    """Exit with one error line unless the Hugging Face caches that every run writes to (the
    datasets cache, where the tokenized pairs go, and the modules cache, where evaluate and
    datasets copy the metric's module) can be created and written: a shared machine's broken
    HF_HOME would otherwise end the run in a traceback, after the model has loaded."""
    import datasets.config
    import evaluate.config

    for folder, variable in (
        (datasets.config.HF_DATASETS_CACHE, "HF_DATASETS_CACHE"),
        (evaluate.config.HF_MODULES_CACHE, "HF_MODULES_CACHE"),
    ):
        folder = Path(folder)
        name = next(
            (name for name in (variable, "HF_HOME", "XDG_CACHE_HOME") if os.environ.get(name)), None
        )
        setting = f"{name}={os.environ[name]}" if name else "the default"
        fix = (
            f"set {name} to a folder you can write to, or unset it"
            if name
            else "set HF_HOME to a folder you can write to"
        )
        blocker = next((p for p in [folder, *folder.parents] if p.exists()), None)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            tempfile.TemporaryFile(dir=folder).close()
        except OSError as error:
            why = (
                f"{blocker} is a file"
                if blocker is not None and not blocker.is_dir()
                else error.strerror or str(error)
            )
            fail(
                f"the Hugging Face cache folder {folder} (from {setting}) cannot be used: "
                f"{why}; {fix}"
            )


# the space a run's results may take besides the model: metrics.json of a full default run is
# about 45 KiB (its 1,377 losses and 408 predictions), a course run's log about as much, the
# saved tokenizer about as much; with a margin
NEEDED_SPACE = 1024 * 1024


def weights_size(checkpoint):
    """Return the size in bytes of the weights --checkpoint names, where they are on this
    machine (the embedded tiny BERT, a local folder, the hub's cache), else 0: the trained
    model a step saves is about as big (in float32, without the pretraining heads)."""
    from common.embedded import CHECKPOINT as EMBEDDED_CHECKPOINT

    folder = EMBEDDED_CHECKPOINT if checkpoint == "embedded" else Path(checkpoint)
    if folder.is_dir():
        return sum(
            f.stat().st_size
            for f in folder.iterdir()
            if f.suffix in (".safetensors", ".bin") and f.is_file()
        )
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(checkpoint, "model.safetensors")
    except Exception:  # not a hub id: resolve_checkpoint says so, in its own line
        return 0
    return Path(cached).stat().st_size if isinstance(cached, str) else 0


def free_port() -> int:
    """Return a TCP port nothing listens on now (29500, the launchers' default, may be another
    user's)."""
    import socket

    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def check_port(port):
    """Exit with one error line if port (not 0) is one that another program listens on."""
    if not port:
        return  # 0: a free one, chosen at the launch
    import socket

    with socket.socket() as probe:
        # as torch's store binds: a port that a closed connection still holds is free to it
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("", port))
        except OSError:
            fail(
                f"port {port} is taken on this machine (another run, or another user's, "
                "listens on it); run again with --port 0 to use a free port"
            )


def check_output_dir(folder, checkpoint="embedded"):
    """Exit with one error line unless the trained model and metrics.json can be written into
    folder (its disk has room for them: weights_size(checkpoint) and NEEDED_SPACE): a run that
    could not save its results is not started. Nothing is left behind: a folder that does not
    exist yet is tried in its nearest existing parent (write_metrics makes it at the end)."""
    path = Path(folder)
    if path.exists() and not path.is_dir():
        fail(f"--output-dir {folder} is a file, not a folder; pass a folder for metrics.json")
    existing = next(p for p in [path, *path.absolute().parents] if p.exists())
    if not existing.is_dir():
        fail(
            f"--output-dir {folder} cannot be made: {existing} is a file; pass a folder you "
            "can write to, such as outputs/run1"
        )
    try:
        if existing == path:
            tempfile.TemporaryFile(dir=path).close()
        else:  # a folder of a unique name, removed at once (other processes may try too)
            os.rmdir(tempfile.mkdtemp(dir=existing, prefix=".course-check-"))
    except OSError as error:
        fail(
            f"--output-dir {folder} cannot be written ({error.strerror or error}); pass a "
            "folder you can write to, such as outputs/run1"
        )
    free, needed = shutil.disk_usage(existing).free, NEEDED_SPACE + weights_size(checkpoint)
    if free < needed:
        fail(
            f"--output-dir {folder} has {free // 1024} KiB free, and a run's results (the "
            f"trained model and metrics.json) need up to {needed // 1024} KiB; free some space "
            "or pass a folder on another disk"
        )
    if (path / "metrics.json").is_dir():
        fail(f"{path / 'metrics.json'} is a folder; remove it or pass another --output-dir")
