"""Launching: how each step is started on this machine, decided before anything runs.

    machine()   what this machine has: CUDA GPUs this torch can use, a TPU, Apple's GPU
    plan(...)   {step: Launch}: the launcher, its words, the environment, the processes
    accelerate_launch(n), torchrun(n)   the launchers' command lines, as the course types them

The course runner (make course) prints the plan first; the what-if lab, the grader and the
GPU check start their launches with the same command lines.
"""

import os
import platform
import sys
from typing import NamedTuple

from accelerate_course.steps import FOLDERS, REPO
from accelerate_course.torch_build import gpu_problem

CONFIGS = REPO / "configs"


class Launch(NamedTuple):
    """How one step runs: the command's words before the step's flags, what is added to the
    environment, how many processes, and on what (said in the plan)."""
    launcher: str
    command: list
    env: dict
    processes: int
    where: str


def accelerate_launch(n, gpus=False):
    """Return accelerate launch's words for n processes with the course's own config file
    (configs/): one process, n CPU processes (with ACCELERATE_USE_CPU=1 in the environment)
    or n GPUs. Given with --config_file, it is the only file accelerate reads, so an
    `accelerate config` file in the user's Hugging Face cache cannot change what runs; its
    main_process_port 0 takes a free port."""
    config = "1-process" if n == 1 else "gpus" if gpus else "cpu-2-processes"
    return [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
            str(CONFIGS / f"{config}.yaml"), "--num_processes", str(n)]


def torchrun(n):
    """Return torchrun's words for n processes on this machine (--standalone: its rendezvous
    on a free port, not on 29500, which may be another user's)."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
            str(n)]


def plan(gpus, tpu=False, processes=2, launcher="accelerate", mps=False, xla=None,
         tpu_branch=None):
    """Return {step: Launch} for a machine with `gpus` CUDA GPUs (and a TPU or not, Apple's
    GPU, mps, or not).

    no GPU: steps 1-2 one process on the CPU; steps 3-4 `processes` CPU processes (gloo);
      one thread per process (OMP_NUM_THREADS=1), so that the numbers do not depend on
      the machine's number of cores.
    one GPU: steps 1-2 on the GPU; steps 3-4 on CPU processes, because every process of a
      multi-GPU launch needs a GPU of its own (NCCL cannot put two on one).
    several GPUs: steps 1-2 on one GPU; steps 3-4 one process per GPU, at most `processes`.
    a TPU: steps 1-3 as without a GPU, on the CPU (Accelerate told to ignore torch_xla);
      step 4 on every TPU chip when torch_xla is installed (xla; None: look) and
      notebook_launcher takes its TPU branch, which it does only in Colab or Kaggle (from a
      shell: Kaggle's KAGGLE_* variables; tpu_branch; None: look); otherwise on CPU
      processes, saying why.
    mps (a Mac with Apple silicon, no CUDA): steps 1-2 pick mps by themselves; steps 3-4 on
      CPU processes, as without a GPU (gloo on the CPU; Accelerate joins no processes on mps).
    """
    plans = {}
    on_gpus = min(processes, gpus) if gpus >= 2 else 0
    n = on_gpus or processes
    # one thread per process on the CPU: the same numbers whatever the number of cores (a sum
    # split over threads is added in another order); accelerate launch gives its processes
    # one thread anyway, notebook_launcher's get cores / processes
    one_thread = {"OMP_NUM_THREADS": "1"}
    no_xla = {"USE_TORCH_XLA": "0"} if tpu else {}
    # CPU processes on a machine with a GPU never see it: Accelerate's barrier would ask for
    # GPU <local rank> (common/launch.py hide_gpus says why)
    hidden = {"CUDA_VISIBLE_DEVICES": ""} if gpus else {}
    cpu_env = {} if on_gpus else {"ACCELERATE_USE_CPU": "1", **one_thread, **no_xla, **hidden}
    single = ("1 process on GPU 0" if gpus and not tpu else
              "1 process on Apple's GPU (mps)" if mps and not tpu else "1 process on the CPU")
    # on a CUDA GPU, deterministic kernels make steps 1 and 2 identical by construction: the
    # attention's backward (memory-efficient SDPA) may add in a varying order unless PyTorch's
    # deterministic mode is on (attention_backward.cu), and cuBLAS needs a fixed workspace
    # (an H200 gave identical backward passes without it: docs/gpu.md)
    on_gpu = bool(gpus) and not tpu
    deterministic = ["--deterministic"] if on_gpu else []
    if on_gpu:
        single += ", deterministic kernels (--deterministic), so that steps 1 and 2 can match"
    for step in (1, 2):
        plans[step] = Launch("python", [sys.executable, f"{FOLDERS[step]}/train.py",
                                        *deterministic],
                             {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"} if on_gpu
                             else {**one_thread, **no_xla}, 1, single)
    if on_gpus:
        where = f"{n} processes, one per GPU (nccl)"
    elif gpus == 1:
        where = (f"{n} processes on the CPU (gloo): one GPU cannot take {n} processes, each "
                 "needs a GPU of its own")
    else:
        where = f"{n} processes on the CPU (gloo)" + (": no GPU here" if not tpu else "")
    words = torchrun(n) if launcher == "torchrun" else accelerate_launch(n, gpus=bool(on_gpus))
    plans[3] = Launch("torchrun" if launcher == "torchrun" else "accelerate launch",
                      words + [f"{FOLDERS[3]}/train.py"], cpu_env, n, where)
    step4 = [sys.executable, f"{FOLDERS[4]}/train.py", "--num-processes", str(n)]
    if xla is None:
        from common.launch import torch_xla_installed
        xla = torch_xla_installed()
    if tpu_branch is None:  # notebook_launcher's own test (accelerate/launchers.py)
        from common.launch import in_kaggle
        tpu_branch = in_kaggle()
    if tpu and xla and tpu_branch:
        plans[4] = Launch("notebook_launcher", step4, {"PJRT_DEVICE": "TPU"}, 0,
                          "every TPU chip (notebook_launcher's TPU branch; num_processes is "
                          "ignored there)")
    elif tpu:
        # PJRT_DEVICE emptied: with it, notebook_launcher in Colab or Kaggle would take its TPU
        # branch (and import a torch_xla that may not be here)
        why = ("notebook_launcher uses a TPU only in a Colab or Kaggle notebook; there" if xla
               else "torch_xla is not installed here; on the TPU")
        plans[4] = Launch("notebook_launcher", step4, {**one_thread, **no_xla, "PJRT_DEVICE": ""},
                          n, f"{n} processes on the CPU (gloo): {why}, run step 4 as the "
                          "notebook (tpu_training.ipynb)")
    elif gpus == 1:
        plans[4] = Launch("notebook_launcher", step4, cpu_env, n, where)
    elif on_gpus:
        plans[4] = Launch("notebook_launcher", step4, {}, n, where)
    else:
        plans[4] = Launch("notebook_launcher", step4, one_thread, n,
                          f"{n} processes on the CPU (gloo): the step's Accelerator(cpu=True)")
    return plans


def cpuinfo():
    """Return the first processor's fields in /proc/cpuinfo ({} where there is none: not
    Linux)."""
    fields = {}
    try:
        for line in open("/proc/cpuinfo"):
            if not line.strip():
                break  # the first processor is enough
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
    except OSError:
        pass
    return fields


def cpu_name():
    """Return the processor's name with its family and model (what decides which kernels
    run, so what a timing or a build was measured on), or what platform knows."""
    info = cpuinfo()
    if info.get("cpu family"):
        return f"{info.get('model name')}, family {info['cpu family']} model {info.get('model')}"
    return info.get("model name") or platform.processor() or platform.machine()


def describe_machine():
    """Return one line on this machine: cores and processor, GPU, Python, torch, threads."""
    import torch
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return (f"{os.cpu_count()} CPU cores ({cpu_name()}), {gpu}, Python "
            f"{platform.python_version()}, torch {torch.__version__}, "
            f"{torch.get_num_threads()} threads")


def machine():
    """Return (CUDA GPUs, whether a TPU is attached, whether Apple's GPU (mps) is there, a few
    words about it) for this machine."""
    import torch
    problem = gpu_problem(torch)
    if problem:
        # every step then runs on the CPU, and the plan says why in its first line
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        return 0, False, False, (f"no GPU this torch can use, {os.cpu_count()} CPU cores; "
                                 f"{problem}")
    gpus = torch.cuda.device_count()
    mps = not gpus and torch.backends.mps.is_available()
    # a TPU: PJRT_DEVICE=TPU, or a TPU chip on the PCI bus (torch_xla's own test)
    from common.tpu import tpu_chips
    chips = tpu_chips()
    if chips or os.environ.get("PJRT_DEVICE") == "TPU":
        return gpus, True, False, (f"a TPU ({len(chips)} chip{'s' if len(chips) > 1 else ''}, "
                                   f"{chips[0]})" if chips else "a TPU (PJRT_DEVICE=TPU)")
    if gpus:
        return (gpus, False, False,
                f"{gpus} GPU{'s' if gpus > 1 else ''} ({torch.cuda.get_device_name(0)})")
    if mps:
        return 0, False, True, f"Apple's GPU (mps), {os.cpu_count()} CPU cores"
    return 0, False, False, f"no GPU, {os.cpu_count()} CPU cores"


def refuse_windows():
    """Exit with one line naming WSL on native Windows: steps 3 and 4 start several processes,
    which there needs what Windows lacks (notebook_launcher forks; torchrun's store needs
    USE_LIBUV=0 on Windows builds)."""
    if sys.platform == "win32":
        from common.launch import WSL
        sys.exit(f"error: make course runs steps 3 and 4 on several processes, which native "
                 f"Windows cannot start as the course does; {WSL}")


def cores():
    """Return the CPU cores this process may run on (its affinity where the system says)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def rounds(launches, steps, cores):
    """Return the steps to run as rounds, in order: a round's steps run side by side. Steps 1
    and 2 share a round when both are one process of one thread on the CPU and the machine
    has a core for each (they are independent, and one thread each gives the same numbers
    side by side as one after the other); every other step has a round of its own."""
    def one_thread(step):
        launch = launches[step]
        return launch.processes == 1 and launch.env.get("OMP_NUM_THREADS") == "1"

    together = [s for s in (1, 2) if s in steps]
    if len(together) == 2 and cores >= 2 and all(one_thread(s) for s in together):
        return [together, *([s] for s in steps if s not in together)]
    return [[step] for step in steps]
