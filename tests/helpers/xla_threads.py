"""Two threads of one process, one per XLA device, as torch_xla's PJRT runs TPU v2 and v3
(a process per chip, a thread per core: torch_xla/_internal/pjrt.py, _run_thread_per_device),
here with CPU_NUM_DEVICES=2 on torch_xla's CPU backend. Both threads receive the one model
object created before the launch, as notebook_launcher hands it to them.

    python tests/helpers/xla_threads.py REPORT.json shared|copy|step4

shared: each thread creates its Accelerator and prepares the model it was given;
copy:   each thread prepares its own copy of it (copy.deepcopy);
step4:  each thread runs step 4's own training_function, which stops (an exception of this
        helper's) where the step builds its scheduler, after prepare(): the optimizer it is
        given holds the parameters that thread would train.
Each thread waits for the other before it reports where its model's weights are.
"""

import copy
import json
import os
import runpy
import sys
import threading

os.environ.setdefault("PJRT_DEVICE", "CPU")
os.environ.setdefault("CPU_NUM_DEVICES", "2")
os.environ["FORK_LAUNCHED"] = "1"  # what notebook_launcher's PrepareForLaunch sets

from pathlib import Path  # noqa: E402

import torch_xla.core.xla_model as xm  # noqa: E402
from accelerate import Accelerator  # noqa: E402
from torch_xla._internal import pjrt  # noqa: E402
from transformers import AutoModelForSequenceClassification, set_seed  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
# step 4's module, loaded here so that the forked process has it (a module cannot be pickled)
STEP4 = runpy.run_path(str(REPO / "step4_tpu_notebook" / "train.py"), run_name="step4")
both_prepared = threading.Barrier(2)
rendezvous = threading.Barrier(2)


class StoppedAfterPrepare(Exception):
    """Raised by the step's get_scheduler, with what the thread would train."""

    def __init__(self, parameters):
        self.parameters = parameters


def report(accelerator, model_id, parameters):
    both_prepared.wait()  # now both threads have moved "their" model
    first = parameters[0]
    return {
        "thread": threading.current_thread().name,
        "device": str(accelerator.device),
        "model_object": model_id,
        "weights_on": str(first.device),
        "weights_sum": round(float(sum(p.detach().sum().item() for p in parameters)), 4),
    }


def prepare_only(model, take_a_copy):
    if take_a_copy:
        model = copy.deepcopy(model)
    accelerator = Accelerator()
    prepared = accelerator.prepare(model)
    return report(accelerator, id(prepared), list(prepared.parameters()))


def step4_until_its_scheduler(model, args):
    # the step's main_process_first() waits for the other thread in xm.rendezvous, a collective
    # that torch_xla's CPU backend cannot complete between two threads (each thread compiles
    # its own all-reduce, and they never meet: see docs/xla-lane.md); in threads of one
    # process, a rendezvous is a barrier, and here it is one
    xm.rendezvous = lambda tag, payload=b"", replicas=(): rendezvous.wait() and b""

    def get_scheduler(name, optimizer, **kwargs):
        raise StoppedAfterPrepare(optimizer.param_groups[0]["params"])

    STEP4["training_function"].__globals__["get_scheduler"] = get_scheduler
    try:
        STEP4["training_function"](model, args)
    except StoppedAfterPrepare as stopped:
        from accelerate import PartialState

        return report(PartialState(), id(stopped.parameters[0]), stopped.parameters)
    raise AssertionError("step 4 did not build its scheduler")


def main():
    report_path, mode = sys.argv[1], sys.argv[2]
    if mode == "step4":
        args = STEP4["parse_args"](["--eval-batch-size", "32"])
        set_seed(args.seed)  # as step 4's main() does, before it creates the model
        model = AutoModelForSequenceClassification.from_pretrained(
            str(REPO / "common" / "embedded" / "checkpoint"), num_labels=2
        )
        results = pjrt.run_multiprocess(step4_until_its_scheduler, model, args, start_method="fork")
    else:
        model = AutoModelForSequenceClassification.from_pretrained(
            str(REPO / "common" / "embedded" / "checkpoint"), num_labels=2
        )
        results = pjrt.run_multiprocess(prepare_only, model, mode == "copy", start_method="fork")
    Path(report_path).write_text(json.dumps(list(results.values()), indent=1))
    print(json.dumps(list(results.values()), indent=1))


if __name__ == "__main__":
    main()
