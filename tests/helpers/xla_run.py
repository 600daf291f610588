"""Run step 4's main() on torch_xla and count XLA graph compilations at every optimizer step.

    PJRT_DEVICE=CPU python xla_run.py REPORT.json [--dynamic-padding] [--variant NAME]
        [step 4 flags...]

The step runs unchanged, except for two spies in its module namespace:
- get_scheduler: the scheduler it returns also records, after each of its steps, how many
  graphs XLA has compiled so far (torch_xla.debug.metrics, "CompileTime");
- with --dynamic-padding, get_dataloaders drops the step's pad_to_max_length=128, so that
  the same loop runs with batches padded to their longest pair: the comparison that shows
  why step 4 fixes the shapes;
- with --variant NAME, the step is the what-if variant NAME of step 4 (its patch in
  step4_tpu_notebook/whatif/, applied to a copy), e.g. loss_item_every_step;
- with --dropout-seed N, the launched function sees --seed N: main() has made the model
  with the step's own --seed, so only what the function seeds (XLA's generator) changes.
The report (the counts and the environment seen) is written by the process that trained.
"""

import json
import runpy
import sys
from pathlib import Path

import torch_xla.debug.metrics as met

report_path = Path(sys.argv[1])
dynamic = "--dynamic-padding" in sys.argv
step_args = [a for a in sys.argv[2:] if a != "--dynamic-padding"]
repo = Path(__file__).resolve().parents[2]
script = repo / "step4_tpu_notebook" / "train.py"
dropout_seed = None
if "--dropout-seed" in step_args:
    at = step_args.index("--dropout-seed")
    dropout_seed = int(step_args[at + 1])
    del step_args[at : at + 2]
if "--variant" in step_args:
    at = step_args.index("--variant")
    name = step_args[at + 1]
    del step_args[at : at + 2]
    from accelerate_course.patches import apply_patch

    variant = report_path.parent / f"{name}.py"
    variant.parent.mkdir(parents=True, exist_ok=True)
    variant.write_text(
        apply_patch(repo / "step4_tpu_notebook" / "whatif" / f"{name}.patch", script.read_text())
    )
    script = variant


def compiles():
    data = met.metric_data("CompileTime")
    return data[0] if data else 0


sys.argv = [str(script), *step_args]
step = runpy.run_path(str(script), run_name="xla_step4")
step_globals = step["main"].__globals__
counts = []
original_get_scheduler = step_globals["get_scheduler"]
original_get_dataloaders = step_globals["get_dataloaders"]


def get_scheduler(*args, **kwargs):
    scheduler = original_get_scheduler(*args, **kwargs)
    original_step = scheduler.step

    def step_and_count(*a, **k):
        original_step(*a, **k)
        counts.append(compiles())

    scheduler.step = step_and_count
    return scheduler


def get_dataloaders(*args, pad_to_max_length=None):
    return original_get_dataloaders(*args, pad_to_max_length=None if dynamic else pad_to_max_length)


original_training_function = step_globals["training_function"]


def training_function(model, args):
    if dropout_seed is not None:
        args.seed = dropout_seed
    original_training_function(model, args)
    from accelerate import PartialState

    state = PartialState()
    report_path.write_text(
        json.dumps(
            {
                "compiles_after_each_step": counts,
                "compiles_at_the_end": compiles(),
                "distributed_type": str(state.distributed_type),
                "device": str(state.device),
                "num_processes": state.num_processes,
                "padding": "dynamic" if dynamic else "fixed (128)",
            }
        )
    )


step_globals.update(
    get_scheduler=get_scheduler,
    get_dataloaders=get_dataloaders,
    training_function=training_function,
)
step["main"]()
