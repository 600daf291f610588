"""Two threads of one process, one per XLA device, as torch_xla's PJRT runs TPU v2 and v3
(a process per chip, a thread per core: torch_xla/_internal/pjrt.py, _run_thread_per_device),
here with CPU_NUM_DEVICES=2 on torch_xla's CPU backend. Both threads receive the one model
object created before the launch, as notebook_launcher hands it to them; each creates its
Accelerator and prepares the model, as step 4 does, then both wait for each other and say
where their model's weights are.

    python tests/helpers/xla_threads.py REPORT.json [--copy]

--copy: each thread prepares its own copy of the model (copy.deepcopy).
"""

import copy
import json
import os
import sys
import threading

os.environ.setdefault("PJRT_DEVICE", "CPU")
os.environ.setdefault("CPU_NUM_DEVICES", "2")
os.environ["FORK_LAUNCHED"] = "1"  # what notebook_launcher's PrepareForLaunch sets

from pathlib import Path  # noqa: E402

from accelerate import Accelerator  # noqa: E402
from torch_xla._internal import pjrt  # noqa: E402
from transformers import AutoModelForSequenceClassification  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
both_prepared = threading.Barrier(2)


def training_function(model, take_a_copy):
    if take_a_copy:
        model = copy.deepcopy(model)
    accelerator = Accelerator()
    prepared = accelerator.prepare(model)
    both_prepared.wait()  # now both threads have moved "their" model
    return {"thread": threading.current_thread().name, "device": str(accelerator.device),
            "model_object": id(prepared),
            "weights_on": str(next(prepared.parameters()).device)}


def main():
    report, take_a_copy = sys.argv[1], "--copy" in sys.argv
    model = AutoModelForSequenceClassification.from_pretrained(
        str(REPO / "common" / "embedded" / "checkpoint"), num_labels=2)
    results = pjrt.run_multiprocess(training_function, model, take_a_copy, start_method="fork")
    Path(report).write_text(json.dumps(list(results.values()), indent=1))
    print(json.dumps(list(results.values()), indent=1))


if __name__ == "__main__":
    main()
