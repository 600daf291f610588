"""Gather-and-truncate against Accelerate's own sharding, over a grid of sizes.

    ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes N truncation_grid.py REPORT_DIR N

For every dataset size and batch size of the grid, each process iterates its share of a
DataLoader prepared by Accelerate (even_batches=True, the default), gathers what it saw, and
checks two ways of evaluation: gather every batch, concatenate and keep the first
len(dataset) (step 3), and gather_for_metrics. Both must give back the dataset, each sample
exactly once, in order. The main process writes REPORT_DIR/grid.json with the cases run and
the gathered counts; any failure raises, so the launch exits non-zero.
"""

import json
import sys
from pathlib import Path

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader

SIZES = [1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 24, 31, 33, 100, 408]
BATCH_SIZES = [1, 3, 4, 8]

accelerator = Accelerator()
# every process checks, from inside, that the launch gave it the group it was asked for
assert accelerator.num_processes == int(sys.argv[2]), accelerator.state
assert str(accelerator.distributed_type) == "DistributedType.MULTI_CPU", accelerator.state
cases = []
for size in SIZES:
    for batch_size in BATCH_SIZES:
        dataset = torch.arange(size)
        loader = accelerator.prepare(DataLoader(dataset, batch_size=batch_size))
        gathered, for_metrics = [], []
        for batch in loader:
            gathered.append(accelerator.gather(batch))
            for_metrics.append(accelerator.gather_for_metrics(batch))
        gathered = torch.cat(gathered)
        kept = gathered[: len(dataset)]
        assert kept.tolist() == list(range(size)), (size, batch_size, gathered.tolist())
        assert torch.cat(for_metrics).tolist() == list(range(size)), (size, batch_size)
        # the duplicates are samples from the start of the dataset, and only fill the last round
        global_batch = batch_size * accelerator.num_processes
        assert len(gathered) == -(-size // global_batch) * global_batch
        cases.append({"size": size, "batch_size": batch_size, "gathered": len(gathered),
                      "kept": len(kept)})

if accelerator.is_main_process:
    report = Path(sys.argv[1])
    report.mkdir(parents=True, exist_ok=True)
    (report / "grid.json").write_text(json.dumps({
        "num_processes": accelerator.num_processes,
        "distributed_type": str(accelerator.distributed_type),
        "cases": cases,
    }))

# all processes leave together (the main process aborted at exit now and then, "terminate
# called without an active exception", when the others had already gone)
accelerator.wait_for_everyone()
torch.distributed.destroy_process_group()
