"""This machine: what it has (CUDA GPUs this torch can use, a TPU, Apple's GPU), its processor
and cores, said in one line where a timing or a build is reported. make course plans its
launches from machine() (accelerate_course/commands.py).
"""

import os
import platform
import sys

from accelerate_course.torch_build import gpu_problem


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
    return (
        f"{os.cpu_count()} CPU cores ({cpu_name()}), {gpu}, Python "
        f"{platform.python_version()}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads"
    )


def machine():
    """Return (CUDA GPUs, whether a TPU is attached, whether Apple's GPU (mps) is there, a few
    words about it, whether an NVIDIA GPU this torch cannot use was put aside) for this
    machine. A GPU put aside counts as none: every step then runs on the CPU
    (course_commands puts CUDA_VISIBLE_DEVICES= in its command), and the words say why."""
    import torch

    problem = gpu_problem(torch)
    if problem:
        return (
            0,
            False,
            False,
            (f"no GPU this torch can use, {os.cpu_count()} CPU cores; {problem}"),
            True,
        )
    gpus = torch.cuda.device_count()
    mps = not gpus and torch.backends.mps.is_available()
    # a TPU: PJRT_DEVICE=TPU, or a TPU chip on the PCI bus (torch_xla's own test)
    from common.tpu import tpu_chips

    chips = tpu_chips()
    if chips or os.environ.get("PJRT_DEVICE") == "TPU":
        return (
            gpus,
            True,
            False,
            (
                f"a TPU ({len(chips)} chip{'s' if len(chips) > 1 else ''}, {chips[0]})"
                if chips
                else "a TPU (PJRT_DEVICE=TPU)"
            ),
            False,
        )
    if gpus:
        return (
            gpus,
            False,
            False,
            f"{gpus} GPU{'s' if gpus > 1 else ''} ({torch.cuda.get_device_name(0)})",
            False,
        )
    if mps:
        return 0, False, True, f"Apple's GPU (mps), {os.cpu_count()} CPU cores", False
    return 0, False, False, f"no GPU, {os.cpu_count()} CPU cores", False


def refuse_windows():
    """Exit with one line naming WSL on native Windows: steps 3 and 4 start several processes,
    which there needs what Windows lacks (notebook_launcher forks; torchrun's store needs
    USE_LIBUV=0 on Windows builds)."""
    if sys.platform == "win32":
        from common.launch import WSL

        sys.exit(
            f"error: make course runs steps 3 and 4 on several processes, which native "
            f"Windows cannot start as the course does; {WSL}"
        )


def cores():
    """Return the CPU cores this process may run on (its affinity where the system says)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
