"""A machine with one CUDA GPU, for real processes of this CPU-only torch (simulated here).

Put this folder first on PYTHONPATH: Python imports sitecustomize at start, in every process,
launchers and their workers included. It answers torch's CUDA questions as a machine with one
GPU does, following the two ways torch 2.13.0 counts GPUs:
- NVML (torch/cuda/__init__.py, `_device_count_nvml`): read again at every call, with
  CUDA_VISIBLE_DEVICES as it is then (`device_count()`, and `is_available()` when
  PYTORCH_NVML_BASED_CUDA_CHECK=1, as Accelerate asks);
- the CUDA runtime (`is_available()` otherwise, and `torch._C._get_accelerator`): counted
  once, at its first call, with CUDA_VISIBLE_DEVICES as it is then (c10/cuda/CUDAFunctions.cpp
  keeps the count in a static).
torch._C itself is left alone: torch tells a CUDA build by its attributes (`_is_compiled`), and
this build has no CUDA code to call.
`torch.distributed.barrier(device_ids=[i])` fails as it did on a real one-GPU machine (an
NVIDIA H200, accelerate 1.15.0) when the runtime sees a GPU and i is not one of them:
`torch.AcceleratorError: CUDA error: invalid device ordinal`. Otherwise it is gloo's barrier.

Each process writes what it saw to $ONE_GPU_REPORTS/<pid>.json at its first barrier: its
environment, the two counts, and where the runtime was first asked (a file and line).
"""

import json
import os
import traceback

GPUS = 1
NAMES = (
    "CUDA_VISIBLE_DEVICES",
    "ACCELERATE_USE_CPU",
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "OMP_NUM_THREADS",
)
runtime = {}  # the CUDA runtime's count, once asked: {"count": n, "asked_at": "file:line"}


def visible():
    """Return the GPUs CUDA_VISIBLE_DEVICES leaves visible now ("" hides them all)."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return GPUS
    shown = []
    for word in value.split(","):
        if not word.strip().isdigit() or int(word) >= GPUS:
            break  # CUDA stops at the first id that is not a GPU here
        shown.append(int(word))
    return len(shown)


def runtime_count():
    """Return the CUDA runtime's count: fixed at the first call, as CUDA does."""
    if not runtime:
        caller = next(
            (
                frame
                for frame in reversed(traceback.extract_stack()[:-2])
                if "one_gpu_machine" not in frame.filename
            ),
            None,
        )
        runtime.update(
            count=visible(), asked_at=f"{caller.filename}:{caller.lineno}" if caller else "?"
        )
    return runtime["count"]


def report(device_ids):
    """Write this process's view of the machine, once."""
    folder = os.environ.get("ONE_GPU_REPORTS")
    path = folder and os.path.join(folder, f"{os.getpid()}.json")
    if not path or os.path.exists(path):
        return
    with open(path, "w") as f:
        json.dump(
            {
                "env": {name: os.environ.get(name) for name in NAMES},
                "nvml_count": visible(),
                "runtime_count": runtime_count(),
                "runtime_first_asked_at": runtime.get("asked_at"),
                "barrier_device_ids": device_ids,
            },
            f,
        )


def install():
    import torch
    import torch.distributed

    def is_available():
        if os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK") == "1":
            return visible() > 0
        return runtime_count() > 0

    torch.cuda.is_available = is_available
    torch.cuda.device_count = lambda: runtime_count() if runtime else visible()
    real_accelerator = torch._C._get_accelerator
    torch._C._get_accelerator = lambda *args: (
        torch.device("cuda") if runtime_count() else real_accelerator(*args)
    )
    real_barrier = torch.distributed.barrier

    def barrier(group=None, async_op=False, device_ids=None):
        report(device_ids)
        if (
            device_ids
            and torch._C._get_accelerator().type == "cuda"
            and device_ids[0] >= runtime_count()
        ):
            raise torch.AcceleratorError("CUDA error: invalid device ordinal")
        return real_barrier(group=group, async_op=async_op)

    torch.distributed.barrier = barrier


if os.environ.get("ONE_GPU_REPORTS"):
    install()
