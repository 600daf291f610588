"""Is this process the run its launch asked for? Checked before any data or model loads: it
only looks and tells, sets no environment variable and patches nothing. A launch that needs a
setting stops with one `error:` line that gives the whole command to type. The traps it
catches, and how each was measured: docs/launching.md. From the check on, a stop signal ends
each of the course's processes in one line.
"""

import os
import re
import select
import shlex
import signal
import sys
from pathlib import Path

from common.errors import fail
from common.settings import say_settings

CPU_CONFIG = "configs/cpu-2-processes.yaml"  # given with --config_file, the one file read
PROCESSES = r"--(?:num[_-]processes|nproc[_-]per[_-]node)"  # a launcher's flag for N
WSL = (
    "on Windows, run the course in WSL (Windows Subsystem for Linux): in PowerShell, wsl "
    "--install; then, in its Ubuntu terminal, clone the course and run it there"
)


def check_launch(joins_processes: bool, starts_processes: int = 0) -> None:
    """Stop with one error line unless this process is the run its launch asked for.
    joins_processes: False for the plain loop (step 1), which N processes run as N trainings;
    starts_processes: how many processes step 4's notebook_launcher starts (0: a launcher's)."""
    problem = launch_problem(joins_processes) or start_problem(starts_processes)
    if problem:
        fail(problem)
    if joins_processes:  # the steps that make an Accelerator, which reads these settings
        say_settings(flag_is_set("ACCELERATE_USE_CPU") or not (gpus_here() or xla_installed()))
    if "ipykernel" not in sys.modules:  # a notebook's kernel handles its own interrupts
        stop_in_one_line()
    if notebook_launcher_starts_processes(starts_processes):
        connect_after_all_forked(starts_processes)


def launch_problem(script_joins_processes: bool):
    """Return None when this process runs as its launcher was asked, else why, in one line."""
    world_size = int(os.environ.get("WORLD_SIZE", "1") or 1)
    tasks = int(os.environ.get("SLURM_STEP_NUM_TASKS", "1") or 1)
    if "WORLD_SIZE" not in os.environ and tasks > 1:
        return (
            f"srun started this script as {tasks} separate tasks, without a launcher (no "
            "WORLD_SIZE): each would train alone on all the data; start one task per machine "
            "that runs torchrun or accelerate launch (docs/cluster.md)"
        )
    if world_size <= 1:
        # accelerate launch's one-process launcher sets MASTER_ADDR only when it was asked for
        # more than one process: then it ran this script once, not N times; only the parent
        # knows N, and whether a MASTER_ADDR came from it or from a cluster's job script
        if {"ACCELERATE_DYNAMO_BACKEND", "MASTER_ADDR"} <= set(os.environ):
            words, inherited = the_launcher()
            if inherited is None or inherited.get("MASTER_ADDR") != os.environ["MASTER_ADDR"]:
                asked = next(
                    (int(n) for n in re.findall(PROCESSES + r"[= ](\d+)", " ".join(words))), 2
                )
                return (
                    f"accelerate launch was asked for {asked} processes but started this "
                    "script as one process (without --multi_gpu, or a GPU for each "
                    f"process, it starts only one); {run(course_launch(asked), gpus_here())}"
                )
        return None
    if "LOCAL_RANK" not in os.environ:  # every launcher sets it: WORLD_SIZE alone is an export
        left = " ".join(
            name
            for name in ("WORLD_SIZE", "RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
            if name in os.environ
        )
        return (
            f"WORLD_SIZE={world_size} is set here, but no launcher started this script "
            f"(launchers set LOCAL_RANK too): an export left in this shell? unset {left}; "
            f"then the command again, or launch it; "
            f"{run(course_launch(world_size), gpus_here())}"
        )
    if not script_joins_processes:
        return (
            f"this script was launched as {world_size} processes, but it is the plain loop: "
            "it never creates an Accelerator, so each process would train alone on all the "
            "data; run it with python (one process), or launch it once it creates an "
            "Accelerator (lesson 2)"
        )
    use_cpu = flag_is_set("ACCELERATE_USE_CPU")
    if xla_installed() and not use_cpu:
        return None  # torch_xla's runtime decides the processes; Accelerate asks it
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world_size) or world_size)
    gpus = gpus_here()
    seen = f"{gpus} GPU{'s' if gpus > 1 else ''}"
    if gpus == 0 and not use_cpu:
        return (
            f"{world_size} processes were launched on a machine without a GPU, and without "
            "ACCELERATE_USE_CPU=1 Accelerate makes each of them a run of its own, on all "
            f"the data; {run(launcher_command(), gpus)}"
        )
    if gpus and (use_cpu or gpus < local):
        why = (
            f"these {local} processes run on the CPU (ACCELERATE_USE_CPU=1) but see {seen}, "
            "and Accelerate's barrier asks for GPU <local rank> even for them"
            if use_cpu
            else f"{local} processes were launched on this machine, but it has {seen}, and "
            "each process needs a GPU of its own"
        )
        return f"{why}; {run(launcher_command(), gpus)}"
    return None


def start_problem(n: int):
    """Return None when notebook_launcher can start n processes here (step 4), else why."""
    if not notebook_launcher_starts_processes(n):
        return None
    if sys.platform == "win32":
        return (
            f"notebook_launcher starts its {n} processes by forking, which Windows cannot "
            f"do; run with --num-processes 1, or {WSL}"
        )
    gpus, use_cpu = gpus_here(), flag_is_set("ACCELERATE_USE_CPU")
    if not gpus or (gpus >= n and not use_cpu):
        return None
    seen = f"{gpus} GPU{'s' if gpus > 1 else ''}"
    why = (
        f"ACCELERATE_USE_CPU=1 puts the {n} processes on the CPU, but they would see "
        f"{seen}, and Accelerate's barrier asks for GPU <local rank> even for them"
        if use_cpu
        else f"{n} processes asked for and {seen} here, and each process needs a GPU of its own"
    )
    if "ipykernel" in sys.modules:  # the settings are a dict, and the kernel's CUDA has started
        return (
            f'{why}; on the GPU: "num_processes": {gpus} in the settings; '
            f"or {n} processes on the CPU: restart the kernel and run os.environ["
            '"CUDA_VISIBLE_DEVICES"] = "" in its first cell'
        )
    typed = ["python", *sys.argv]
    return (
        f"{why}; on the GPU: {shlex.join(with_processes(typed, gpus))}; or "
        f"{n} processes on the CPU: CUDA_VISIBLE_DEVICES= {shlex.join(typed)}"
    )


def flag_is_set(name: str) -> bool:
    """Return True if the environment variable name is set to a true value (1, true, yes)."""
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "y", "on")


def gpus_here() -> int:
    """Return the CUDA GPUs this process sees (through NVML: a fork after it still works)."""
    import torch

    return torch.cuda.device_count()


def xla_installed() -> bool:
    """Return True if torch_xla can be imported here (then Accelerate runs on XLA devices)."""
    import importlib.util

    return importlib.util.find_spec("torch_xla") is not None


def the_launcher():
    """Return the parent's (the launcher's) words ([]) and environment (None: unreadable)."""
    try:
        words, environ = (
            Path(f"/proc/{os.getppid()}/{name}").read_bytes().decode(errors="replace").split("\0")
            for name in ("cmdline", "environ")
        )
    except OSError:
        return [], None
    return [w for w in words if w], dict(p.split("=", 1) for p in environ if "=" in p)


def launcher_command() -> list:
    """Return the launch of this process as typed (read from the launcher), or its twin."""
    words = the_launcher()[0]
    for i, word in enumerate(words[:2]):
        if os.path.basename(word) in ("torchrun", "accelerate"):
            return [os.path.basename(word), *words[i + 1 :]]
    if words[1:2] == ["-m"] and len(words) > 2:
        return ["python", *words[1:]]
    n = os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "2"))
    return (
        course_launch(n)
        if "ACCELERATE_DYNAMO_BACKEND" in os.environ  # accelerate's
        else ["torchrun", "--nproc_per_node", n, *sys.argv]
    )


def course_launch(n):
    """Return the words of the course's launch of this script on n processes."""
    return [
        "accelerate",
        "launch",
        "--config_file",
        CPU_CONFIG,
        "--num_processes",
        str(n),
        *sys.argv,
    ]


def with_processes(words, n):
    """Return a command's words asking for n processes instead, on the course's GPU config."""
    text = shlex.join("configs/gpus.yaml" if word == CPU_CONFIG else word for word in words)
    return shlex.split(re.sub(rf"({PROCESSES}[= ])\d+", rf"\g<1>{n}", text))


def run(launch, gpus):
    """Return the commands to type: on CPU processes, with every setting; then on the GPUs."""
    if not gpus:
        return f"run: ACCELERATE_USE_CPU=1 {shlex.join(launch)}"
    on_gpus = ["python", *sys.argv] if gpus == 1 else with_processes(launch, gpus)
    return (
        f"run on the CPU: CUDA_VISIBLE_DEVICES= ACCELERATE_USE_CPU=1 {shlex.join(launch)}"
        f"; or on the GPU: {shlex.join(on_gpus)}"
    )


def in_kaggle() -> bool:
    """Return True in Kaggle, as notebook_launcher tells (a KAGGLE_* variable)."""
    return any(name.startswith("KAGGLE") for name in os.environ)


def notebook_launcher_starts_processes(n: int) -> bool:
    """Return True if notebook_launcher starts n processes here (accelerate's launchers.py)."""
    colab = (
        not in_kaggle()
        and "IPython" in sys.modules
        and "google.colab" in str(sys.modules["IPython"].get_ipython())
    )
    tpu = os.environ.get("TPU_NAME") is not None or os.environ.get("PJRT_DEVICE") == "TPU"
    if (colab or in_kaggle()) and tpu:
        return False
    return n > 1 and not (colab and gpus_here() < 2)


def stop_in_one_line():
    """From now on, Ctrl-C, SIGTERM and SIGHUP end this process at once, in one line."""
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        if hasattr(signal, name):  # Windows has no SIGHUP
            signal.signal(getattr(signal, name), stopped)


def stopped(signum, frame):
    """One line, and the exit status a shell gives a process the signal killed (128 + its
    number); metrics.json is written whole at the very end or not at all: nothing is lost."""
    name = "Ctrl-C (SIGINT)" if signum == signal.SIGINT else signal.Signals(signum).name
    size = os.environ.get("WORLD_SIZE", "1")
    who = f" (process {os.environ.get('RANK')} of {size})" if size != "1" else ""
    try:
        sys.stdout.flush()
        print(
            f"\nstopped by {name} before the end of the run{who}: no metrics were written",
            file=sys.stderr,
            flush=True,
        )
    except (OSError, RuntimeError):  # a closed terminal, or a print the signal interrupted
        pass
    os._exit(128 + signum)


def connect_after_all_forked(n, wait_seconds=120):
    """Hold each of the next n processes this process forks until all n are forked (each then
    stops in one line too: it inherits torch elastic's handlers, which raise). Why: a process
    that notebook_launcher forks while this one's store thread holds glibc's resolver lock (in
    getnameinfo) hangs at its own first lookup; plain launches of step 4 with 8 processes on 2
    cores of an Intel Xeon model 167: 1 of 49 hung so (py-spy), 0 of 40 gated."""
    launching = os.getpid()
    read_end, write_end = os.pipe()
    forked = 0

    def after_fork_in_launcher():
        nonlocal forked
        if os.getpid() == launching and forked < n:
            forked += 1
            if forked == n:  # the last one is forked: the processes may connect now
                os.close(write_end)
                os.close(read_end)

    def after_fork_in_process():
        if os.getppid() != launching or forked == n:
            return  # forked later, or by a process this one started
        stop_in_one_line()
        os.close(write_end)  # nothing is written: the pipe ends once the launcher closes its end
        select.select([read_end], [], [], wait_seconds)
        os.close(read_end)

    os.register_at_fork(
        after_in_parent=after_fork_in_launcher, after_in_child=after_fork_in_process
    )
