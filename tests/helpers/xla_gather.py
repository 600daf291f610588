"""Evaluation behind torch_xla's read-ahead loader: gather_for_metrics against the course's cut.

    PJRT_DEVICE=CPU python tests/helpers/xla_gather.py REPORT.json [--batch-sizes 8 32 5 24 10]
        [--settings run simulated] [--repeats N] [--pause SECONDS]

On XLA, Accelerate's prepare() returns an MpDeviceLoaderWrapper: a torch_xla MpDeviceLoader,
whose ParallelLoader iterates Accelerate's DataLoaderShard in a loader thread of its own, ahead
of the evaluation loop. The shard sets its end-of-dataloader flag, and leaves Accelerate's
GradientState, in that thread; gather_for_metrics reads them in the loop's thread. This helper
measures what that does to an evaluation of 408 rows (MRPC validation's size), each row
carrying its own index, for each evaluation batch size, in two settings:

- "run": one XLA device on torch_xla's CPU backend (Accelerator(), DistributedType.XLA);
- "simulated": rank 0 of 2. Accelerate's own prepare_data_loader makes rank 0's shard
  (num_processes=2, process_index=0) and wraps it in the same MpDeviceLoaderWrapper, with its
  real loader thread. Rank 1's batches come from the same BatchSamplerShard (process_index=1).
  accelerator.gather is replaced by what all_gather returns on 2 devices: rank 0's batch, then
  rank 1's batch of the same number. gather_for_metrics itself is Accelerate's, unchanged.
  Two XLA devices cannot run here: two threads of one process never complete a collective on
  torch_xla's CPU backend (tests/test_xla.py).

Each batch goes through a tiny model on the XLA device (a forward and an argmax). Then the
loop pauses (--pause, 0.02 s by default), as it waits for a real model's step on a TPU: the
loader threads run meanwhile, as far as their queues allow. With --pause 0 the loop races
the loader threads, and the figures vary from run to run.

Both ways run in the same loop: gather_for_metrics, and the course's way (gather every batch,
concatenate, keep the first eval_dataloader.total_dataset_length). The report (JSON) gives,
per setting, batch size and repeat: the rows each way returned, the distinct, lost and
duplicated indices, and Accelerate's state just before and after each gather_for_metrics.
"""

import argparse
import json
import time
from collections import Counter
from pathlib import Path

import torch
from accelerate import Accelerator, DistributedType
from accelerate.data_loader import BatchSamplerShard, MpDeviceLoaderWrapper, prepare_data_loader
from torch.utils.data import DataLoader, Dataset

ROWS = 408  # MRPC validation's size
FEATURES = 16


class IndexedRows(Dataset):
    """ROWS rows, each a dict of its own index and a fixed feature vector."""

    def __init__(self):
        self.features = torch.randn(ROWS, FEATURES, generator=torch.Generator().manual_seed(0))

    def __len__(self):
        return ROWS

    def __getitem__(self, index):
        return {"index": torch.tensor(index), "x": self.features[index]}

    def batch_of(self, indices):
        """The rows at these indices as one batch, as the default collate would make it."""
        return {"index": torch.tensor(indices), "x": self.features[indices]}


def evaluation_loader(batch_size):
    """The plain evaluation DataLoader, in order, as the course builds it."""
    return DataLoader(IndexedRows(), shuffle=False, batch_size=batch_size)


def count(indices):
    """Rows, distinct indices, lost indices and duplicated indices of a gathered list."""
    seen = Counter(indices)
    return {
        "rows": len(indices),
        "distinct": len(seen),
        "lost": sorted(set(range(ROWS)) - set(seen)),
        "duplicated": sorted(index for index, times in seen.items() if times > 1),
    }


def state_seen(gradient_state, shard):
    """What gather_for_metrics reads: the active loader's end flag and remainder."""
    return {
        "end_of_dataloader": gradient_state.end_of_dataloader,
        "remainder": gradient_state.remainder,
        # whether the shard is still GradientState's active loader (its end() not yet run)
        "shard_active": gradient_state.in_dataloader,
        # the flag on the shard itself, which stays set after its end()
        "shard_flag": shard.end_of_dataloader,
    }


def evaluate(accelerator, model, eval_dataloader, pause):
    """One pass of the course's evaluation loop over eval_dataloader, both ways at once."""
    gradient_state = accelerator.gradient_state
    shard = eval_dataloader.dataloader  # the DataLoaderShard that the loader thread iterates
    for_metrics, gathered, batches = [], [], []
    model.eval()
    for batch in eval_dataloader:
        with torch.no_grad():
            predictions = torch.argmax(model(batch["x"]), dim=-1)
        rows = {"index": batch["index"], "prediction": predictions}
        # the device's step: this thread waits, the GIL released, and the loader threads run
        time.sleep(pause)
        before = state_seen(gradient_state, shard)
        kept = accelerator.gather_for_metrics(rows)["index"].cpu().tolist()
        after = state_seen(gradient_state, shard)
        every = accelerator.gather(rows)["index"].cpu().tolist()
        for_metrics += kept
        gathered += every
        batches.append(
            {
                "batch": len(batches),
                "gathered": len(every),
                "for_metrics": len(kept),
                "before": before,
                "after": after,
            }
        )
    # the course's way: keep one row per pair of the split, as the prepared loader counts them
    cut = gathered[: eval_dataloader.total_dataset_length]
    return {
        "batches_per_device": len(batches),
        "total_dataset_length": eval_dataloader.total_dataset_length,
        "gather_for_metrics": count(for_metrics),
        "course_cut": {"gathered": len(gathered), **count(cut)},
        # the batches that gather_for_metrics returned shorter than gathered
        "batches_cut": [b["batch"] for b in batches if b["for_metrics"] != b["gathered"]],
        "batches": batches,
    }


def run_one_device(accelerator, model, batch_size, pause):
    eval_dataloader = accelerator.prepare(evaluation_loader(batch_size))
    assert isinstance(eval_dataloader, MpDeviceLoaderWrapper), type(eval_dataloader)
    return evaluate(accelerator, model, eval_dataloader, pause)


def run_rank0_of_2(accelerator, model, batch_size, pause):
    # rank 0's shard, by Accelerate's own sharding, behind the same wrapper and loader thread
    eval_dataloader = prepare_data_loader(
        evaluation_loader(batch_size),
        accelerator.device,
        num_processes=2,
        process_index=0,
        rng_types=accelerator.rng_types.copy(),
    )
    assert isinstance(eval_dataloader, MpDeviceLoaderWrapper), type(eval_dataloader)
    # each rank's batches by the same sharding, read here without Accelerate's state: rank 0's
    # first index says which batch the loop holds, and rank 1 holds the batch of that number
    sampler = eval_dataloader.batch_sampler
    shards = [
        list(
            BatchSamplerShard(
                sampler.batch_sampler,
                num_processes=2,
                process_index=rank,
                even_batches=sampler.even_batches,
            )
        )
        for rank in (0, 1)
    ]
    batch_number = {indices[0]: number for number, indices in enumerate(shards[0])}
    rank1_batches = [IndexedRows().batch_of(indices) for indices in shards[1]]
    one_device_gather = accelerator.gather

    def gather_two_ranks(rows):
        # what all_gather returns on 2 devices: rank 0's rows, then rank 1's same-numbered batch
        rank1 = rank1_batches[batch_number[int(rows["index"][0])]]
        with torch.no_grad():
            rank1_predictions = torch.argmax(model(rank1["x"].to(accelerator.device)), dim=-1)
        rank1_rows = {"index": rank1["index"], "prediction": rank1_predictions}
        return {
            key: torch.cat([one_device_gather(rows[key]).cpu(), rank1_rows[key].cpu()])
            for key in rows
        }

    accelerator.gather = gather_two_ranks  # gather_for_metrics calls self.gather
    try:
        return evaluate(accelerator, model, eval_dataloader, pause)
    finally:
        accelerator.gather = one_device_gather


SETTINGS = {"run": run_one_device, "simulated": run_rank0_of_2}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("report", type=Path)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[8, 32, 5, 24, 10])
    parser.add_argument("--settings", nargs="+", choices=list(SETTINGS), default=list(SETTINGS))
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--pause", type=float, default=0.02)
    args = parser.parse_args()
    accelerator = Accelerator()
    assert accelerator.distributed_type == DistributedType.XLA, accelerator.state
    torch.manual_seed(0)
    model = accelerator.prepare(torch.nn.Linear(FEATURES, 2))
    results = []
    for setting in args.settings:
        for batch_size in args.batch_sizes:
            for repeat in range(args.repeats):
                result = SETTINGS[setting](accelerator, model, batch_size, args.pause)
                results.append(
                    {"setting": setting, "batch_size": batch_size, "repeat": repeat, **result}
                )
                kept, cut = result["gather_for_metrics"], result["course_cut"]
                print(
                    f"{setting:9} batch {batch_size:3}: gather_for_metrics {kept['rows']} rows, "
                    f"{kept['distinct']} distinct, {len(kept['lost'])} lost, "
                    f"{len(kept['duplicated'])} duplicated (batches cut: "
                    f"{result['batches_cut']}); course's cut {cut['rows']} of "
                    f"{cut['gathered']} rows, {cut['distinct']} distinct",
                    flush=True,
                )
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(
        json.dumps(
            {
                "distributed_type": str(accelerator.distributed_type),
                "device": str(accelerator.device),
                "num_processes": accelerator.num_processes,
                "loader": f"{MpDeviceLoaderWrapper.__module__}.{MpDeviceLoaderWrapper.__name__}",
                "rows": ROWS,
                "pause": args.pause,
                "results": results,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
