"""Where is my model: each step saves the model it trained into <output-dir>/model, and that
folder, reloaded in a fresh process that cannot import Accelerate, predicts the validation
pairs exactly as the run did.

Each step runs as its page says (step 3 by the README's accelerate launch on 2 CPU processes,
step 4 by its own notebook_launcher with 2), for 30 optimizer steps. The reloading process is
accelerate_course/reloading.py (what make course runs) with `accelerate` made unimportable,
as on a machine where it is not installed: the saved folder needs transformers alone. The
comparison is exact: the same weights and the same batches (the run's evaluation batch size
and padding) give the same logits, bit for bit, on the same machine.
"""

import hashlib
import json
import subprocess
import sys

import pytest
from conftest import REPO, STEPS, assert_ok, offline_env, read_metrics, run_command, step_command
from test_nothing_lost import tmpfs

from accelerate_course.commands import accelerate_launch
from accelerate_course.steps import STEPS as STEP_RECORDS

pytestmark = pytest.mark.runs
SHORT = ["--max-train-steps", "30"]
SAVED_FILES = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
# the reloading command, in a process where `import accelerate` fails
WITHOUT_ACCELERATE = (
    "import runpy, sys; sys.modules['accelerate'] = None; "
    "runpy.run_module('accelerate_course.reloading', run_name='__main__')"
)


def reloaded_without_accelerate(folder, pad_to=None):
    """Return the predictions of folder/model, reloaded in a fresh process without Accelerate."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            WITHOUT_ACCELERATE,
            str(folder),
            *(["--pad-to", str(pad_to)] if pad_to else []),
        ],
        cwd=REPO,
        env=offline_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])[str(folder)]


def sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def launch(step, folder):
    """Run step N as its page runs it, for 30 optimizer steps."""
    command = step_command(step, folder, *SHORT)
    env = {}
    if step == 3:  # the README's launch: accelerate launch, 2 CPU processes
        command = [*accelerate_launch(2), *command[1:]]
        env = {"ACCELERATE_USE_CPU": "1"}
    if step == 4:
        command += ["--num-processes", "2"]
    result = run_command(command, **env)
    assert_ok(result)
    return result


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    folder = tmp_path_factory.mktemp("saved")
    return {
        step: (folder / f"step{step}", launch(step, folder / f"step{step}"))
        for step in sorted(STEPS)
    }


@pytest.mark.parametrize("step", sorted(STEPS))
def test_each_steps_saved_model_reloads_without_accelerate_to_the_runs_predictions(saved, step):
    folder, result = saved[step]
    assert f"model saved to {folder / 'model'}" in result.stdout
    # the folder holds the model and its tokenizer, nothing half-written beside it
    assert sorted(p.name for p in (folder / "model").iterdir()) == SAVED_FILES
    assert sorted(p.name for p in folder.iterdir()) == ["metrics.json", "model"]
    predictions = reloaded_without_accelerate(folder, STEP_RECORDS[step].eval_padding)
    assert predictions == read_metrics(folder)["predictions"]
    assert len(predictions) == 408


def test_steps_1_and_2_save_the_same_bytes(saved):
    one, two = saved[1][0] / "model", saved[2][0] / "model"
    for name in SAVED_FILES:
        assert sha256(one / name) == sha256(two / name), name


def test_the_models_of_full_default_runs_are_the_same_bytes(default_runs):
    # steps 1 and 2, 1,377 optimizer steps each, as make course runs them
    one, two = (default_runs[step]["saved_to"] / "model" / "model.safetensors" for step in (1, 2))
    assert sha256(one) == sha256(two)
    assert (
        reloaded_without_accelerate(default_runs[1]["saved_to"]) == default_runs[1]["predictions"]
    )


def test_a_model_that_does_not_fit_ends_in_one_line_and_keeps_the_earlier_one(tmp_path):
    # the step's own saving lines, on a disk with room for the earlier model and not for a
    # second beside it (a tmpfs of this machine)
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from common.embedded import CHECKPOINT
    from common.output import saving_model

    model = AutoModelForSequenceClassification.from_pretrained(CHECKPOINT, num_labels=2)
    tokenizer = AutoTokenizer.from_pretrained(CHECKPOINT)
    with tmpfs(tmp_path / "disk", "size=4m") as disk:
        with saving_model(disk / "out") as folder:
            model.save_pretrained(folder)
            tokenizer.save_pretrained(folder)
        earlier = {p.name: sha256(p) for p in (disk / "out" / "model").iterdir()}
        with pytest.raises(SystemExit) as stop:
            with saving_model(disk / "out") as folder:
                model.save_pretrained(folder)
                tokenizer.save_pretrained(folder)
        assert str(stop.value) == (
            f"error: {disk / 'out' / 'model'} could not be saved (No space left on device): an "
            "earlier model there is as it was; free some space or pass another --output-dir"
        )
        assert {p.name: sha256(p) for p in (disk / "out" / "model").iterdir()} == earlier
        assert sorted(p.name for p in (disk / "out").iterdir()) == ["model"]  # nothing left


def test_a_model_folder_replaced_whole(tmp_path):
    # a second save into the same --output-dir: the earlier folder goes only once the new one
    # is whole, and no file of the earlier one stays in the new (an earlier file the new save
    # does not write, such as a stray one, goes with it)
    from common.output import saving_model

    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "stray.bin").write_bytes(b"earlier")
    with saving_model(tmp_path) as folder:
        (folder / "config.json").write_text("{}")
        assert (tmp_path / "model" / "stray.bin").exists()  # still there while saving
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == ["config.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


NOTEBOOK = """
import sys
from accelerate import notebook_launcher
from transformers import AutoModelForSequenceClassification, set_seed
from accelerate_course.measuring import fingerprint, saved_model
from common.checkpoint import EMBEDDED_CHECKPOINT
from common.cli import free_port, parse_args
step = {}
exec(open("step4_tpu_notebook/train.py").read().split("# %%\\ndef main():")[0], step)
args = parse_args(sys.argv[1:])
set_seed(args.seed)
model = AutoModelForSequenceClassification.from_pretrained(EMBEDDED_CHECKPOINT, num_labels=2)
before = fingerprint(model)
notebook_launcher(step["training_function"], (model, args), num_processes=args.num_processes,
                  use_port=str(free_port()))
print("WEIGHTS", before, fingerprint(model), saved_model(args.output_dir)[2])
"""


@pytest.mark.parametrize("processes", [1, 2])
def test_after_notebook_launcher_the_trained_model_is_the_saved_one(tmp_path, processes):
    # step 4's cells in one process, as a notebook runs them: the function started by
    # notebook_launcher, then the notebook's own `model` compared with what was saved
    result = run_command(
        [
            sys.executable,
            "-c",
            NOTEBOOK,
            "--output-dir",
            tmp_path,
            "--num-processes",
            str(processes),
            *SHORT,
        ]
    )
    assert_ok(result)
    before, after, saved_weights = result.stdout.split("WEIGHTS ")[1].split()
    if processes == 1:  # run in the notebook's own process: its model is the trained one
        assert after == saved_weights != before
    else:  # the processes trained copies: the notebook's model is as it was before the launch
        assert after == before != saved_weights
