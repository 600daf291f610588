"""Writing a run's results: the trained model and metrics.json, each written whole or not at
all."""

import json
import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

from common.diverged import likely_causes, non_finite
from common.errors import fail
from common.settings import settings_that_change_the_numbers


def write_metrics(output_dir, args, results):
    """Write the results dict plus the hyperparameters in args, and the environment's settings
    that changed the numbers (common.settings: those the process's Accelerator read), to
    <output_dir>/metrics.json, and print where.
    The file is written to a temporary name in the same folder and renamed into place, so a
    crash never leaves half a file and an earlier metrics.json stays until the new one is
    whole. A folder that cannot take it (full, read-only) ends the run in one line. Returns
    the path written.
    """
    from accelerate.state import PartialState

    path = Path(output_dir) / "metrics.json"
    # the settings read by this process's Accelerator, if it made one (step 1 makes none)
    record = dict(
        results,
        hyperparameters=vars(args),
        environment=settings_that_change_the_numbers() if PartialState._shared_state else {},
    )
    diverged = non_finite(record)
    if diverged:  # strict JSON has no NaN: a run that diverged writes nothing, and says why
        fail(
            f"{diverged} is not a number: the training diverged, and no metrics.json was "
            f"written; {likely_causes(args)}"
        )
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".metrics-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=1, allow_nan=False)  # strict JSON
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # as an ordinary new file (mkstemp makes it private)
        os.replace(tmp, path)
    except OSError as error:
        if tmp:
            Path(tmp).unlink(missing_ok=True)
        fail(
            f"{path} could not be written ({error.strerror or error}): the run's results are "
            "lost, an earlier metrics.json there is as it was; free some space or pass another "
            "--output-dir"
        )
    except BaseException:
        if tmp:
            Path(tmp).unlink(missing_ok=True)
        raise
    print(f"metrics written to {path}", flush=True)
    return path


def finite_weights(folder):
    """Return False if a weights file saved in folder (*.safetensors) holds a NaN or an
    infinite value."""
    import torch
    from safetensors.torch import load_file

    return all(
        bool(torch.isfinite(tensor).all())
        for path in Path(folder).glob("*.safetensors")
        for tensor in load_file(path).values()
        if tensor.is_floating_point()
    )


@contextmanager
def saving_model(output_dir):
    """Yield a new, empty folder beside <output_dir>/model for the block to save the trained
    model and its tokenizer into; when the block ends, that folder becomes <output_dir>/model
    (an earlier one is replaced whole) and a line says where. A save that fails (a full disk,
    a read-only folder) ends the run in one line and leaves an earlier model as it was; the
    half-saved folder is removed; so do weights that hold NaN or infinite values (a training
    that diverged). Returns nothing: from_pretrained(<output_dir>/model) loads it.
    """
    from safetensors import SafetensorError

    target = Path(output_dir) / "model"
    folder = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(dir=target.parent, prefix=".model-"))
        yield folder
        if not finite_weights(folder):  # a diverged training's model is not put in place
            fail(
                f"{target} was not saved: the trained weights hold NaN or infinite values, so "
                "the training diverged; an earlier model there is as it was; look at the "
                "learning rate (--lr, about 5e-5 for fine-tuning)"
            )
        os.chmod(folder, 0o777 & ~_umask())  # as an ordinary new folder (mkdtemp's is private)
        replace_folder(folder, target)
        folder = None
    except (OSError, SafetensorError) as error:
        # safetensors says an OSError in its own words: "... I/O error: ... (os error 28)"
        code = re.search(r"\(os error (\d+)\)", str(error))
        why = getattr(error, "strerror", None) or (os.strerror(int(code[1])) if code else error)
        fail(
            f"{target} could not be saved ({why}): "
            "an earlier model there is as it was; free some space or pass another "
            "--output-dir"
        )
    finally:
        if folder:
            shutil.rmtree(folder, ignore_errors=True)
    print(f"model saved to {target}", flush=True)


def replace_folder(new, target):
    """Put folder `new` in place of folder `target`. An earlier `target` is moved aside first (a
    folder cannot be renamed onto another), then removed, so that a crash in between leaves one
    of the two whole. The aside folder's name is unique: several processes may replace one
    target at once."""
    new, target = Path(new), Path(target)
    earlier = None
    if target.exists():
        earlier = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}-earlier-"))
        os.replace(target, earlier / target.name)
    os.replace(new, target)
    if earlier:
        shutil.rmtree(earlier, ignore_errors=True)


def _umask():
    """Return this process's umask (read by setting it, then set back)."""
    umask = os.umask(0)
    os.umask(umask)
    return umask
