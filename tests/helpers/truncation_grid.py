"""Gather-and-truncate against Accelerate's own sharding, over a grid of sizes.

    ACCELERATE_USE_CPU=1 accelerate launch --config_file configs/cpu-2-processes.yaml \
        --num_processes N truncation_grid.py --processes N --output-dir REPORT_DIR
    (or run by accelerate_course/lab_driver.py beside the steps, in the same launch)

For every dataset size and batch size of the grid, each process iterates its share of a
DataLoader prepared by Accelerate (even_batches=True, the default), gathers what it saw, and
checks two ways of evaluation: gather every batch, concatenate and keep the first
len(dataset) (step 3), and gather_for_metrics. Both must give back the dataset, each sample
exactly once, in order. The main process writes REPORT_DIR/grid.json with the cases run and
the gathered counts; any failure raises, so the run stops with an error.
"""

import argparse
import json
from pathlib import Path

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader

SIZES = [1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 24, 31, 33, 100, 408]
BATCH_SIZES = [1, 3, 4, 8]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--processes", type=int, required=True, help="how many were asked for")
    parser.add_argument("--output-dir", type=Path, required=True)
    args, _ = parser.parse_known_args()
    accelerator = Accelerator()
    # every process checks, from inside, that the launch gave it the group it was asked for
    assert accelerator.num_processes == args.processes, accelerator.state
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
            # the duplicates are samples from the start of the dataset, and only fill the
            # last round
            global_batch = batch_size * accelerator.num_processes
            assert len(gathered) == -(-size // global_batch) * global_batch
            cases.append(
                {
                    "size": size,
                    "batch_size": batch_size,
                    "gathered": len(gathered),
                    "kept": len(kept),
                }
            )
    if accelerator.is_main_process:
        args.output_dir.mkdir(parents=True, exist_ok=True)
        (args.output_dir / "grid.json").write_text(
            json.dumps(
                {
                    "num_processes": accelerator.num_processes,
                    "distributed_type": str(accelerator.distributed_type),
                    "cases": cases,
                }
            )
        )
    accelerator.wait_for_everyone()
    accelerator.end_training()


if __name__ == "__main__":
    main()
