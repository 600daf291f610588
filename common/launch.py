"""Is this process the run its launcher was asked for? Answered before any data or model loads.

A multi-process launch can silently run as something else, and then every number it prints
looks fine and is wrong. Measured with accelerate 1.15 and torch 2.13 on a machine without
a GPU:
- `accelerate launch --num_processes 2 train.py` starts the script once, as one process;
- `accelerate launch --multi_gpu --num_processes 2 train.py` and `torchrun --nproc_per_node 2
  train.py` start two processes, but without ACCELERATE_USE_CPU=1 Accelerate finds no GPU
  and makes each of them a run of its own, on all the data.
And read in the sources, simulated here: on a machine with fewer GPUs than processes,
Accelerate puts process i on GPU i % GPUs (state.py), two processes share a GPU, and NCCL
stops at the first collective ("Duplicate GPU detected").

Every step's main() calls guard_launch() right after parse_args(). It reads what the
launchers leave in the environment (torchrun and `accelerate launch --multi_gpu` set
WORLD_SIZE, LOCAL_WORLD_SIZE and RANK; `accelerate launch` on one process sets MASTER_ADDR
only when it was asked for more than one) and what step 4's own notebook_launcher will
start, and either says what is wrong in one line, or puts processes that have no GPU of their
own on the CPU (gloo) by setting ACCELERATE_USE_CPU=1, which Accelerate reads when the script
creates its first Accelerator, and says so. Where the environment cannot tell (a student's
own `accelerate launch` that fell back to one process), it reads the launcher's command line
and environment, in one place: the_launcher.
"""

import importlib.util
import os
import re
import sys
from pathlib import Path

from common.errors import fail
from common.forked_start import connect_after_all_forked
from common.interrupt import report_stops
from common.launcher_exit import become_launcher

# the fix to print: the course's own config file (configs/), which, given with --config_file,
# is the only file accelerate launch reads, so a user's default config changes nothing
CPU_LAUNCH = ("ACCELERATE_USE_CPU=1 accelerate launch --config_file "
              "configs/cpu-2-processes.yaml --num_processes {n}")


def flag_is_set(name):
    """Return True if the environment variable name is set to a true value (1, true, yes)."""
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "y", "on")


def gpus_here():
    """Return the number of CUDA GPUs this process can see (0 when there is none). Counted
    through NVML, which does not initialise CUDA, so a fork after it still works (torch 2.13,
    torch/cuda/__init__.py device_count)."""
    import torch
    return torch.cuda.device_count()


def mps_here():
    """Return True where Apple's GPU (mps) can be used."""
    import torch
    return torch.backends.mps.is_available()


def free_port():
    """Return a TCP port on this machine that nothing listens on right now (for a launch on a
    shared machine, where the default 29500 may be another user's)."""
    import socket
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def torch_xla_installed():
    """Return True if torch_xla can be imported here (then Accelerate runs on XLA devices)."""
    return importlib.util.find_spec("torch_xla") is not None


def the_launcher():
    """Return the parent process's (the launcher's) command line, as words ([] where it cannot
    be read), and the environment it was started with, as a dict (None where it cannot be
    read: not Linux, or not allowed).

    The one place this guard reads its parent, a student's own launcher, because only the
    parent knows two things: how many processes `accelerate launch` was asked for when its
    one-process fallback (no --multi_gpu) started this script once, with nothing in this
    process's environment saying N; and whether a MASTER_ADDR here was set by that launcher or
    exported to it by a cluster's job script. The course's own launches never get here (their
    environment says all: a WORLD_SIZE, or no MASTER_ADDR).
    """
    parent = Path(f"/proc/{os.getppid()}")
    read = {}
    for name in ("cmdline", "environ"):
        try:
            read[name] = (parent / name).read_bytes().decode(errors="replace").split("\0")
        except OSError:
            read[name] = None
    words = [word for word in read["cmdline"] or [] if word]
    if read["environ"] is None:
        return words, None
    pairs = (entry.split("=", 1) for entry in read["environ"])
    return words, {pair[0]: pair[1] for pair in pairs if len(pair) == 2}


def launcher_set(name, launcher_environment):
    """Return True if the variable name is in this process's environment because the launcher
    set it, not because it was already in the launcher's own environment (a cluster's job
    script exports MASTER_ADDR for every command it runs). Where the launcher's environment
    could not be read (None), a variable that is here counts as set by the launcher."""
    if name not in os.environ:
        return False
    return launcher_environment is None or launcher_environment.get(name) != os.environ[name]


def processes_asked(words):
    """Return the N of --num_processes N (or --num-processes=N) in a launcher's command line,
    or None when it does not say."""
    for i, word in enumerate(words):
        match = re.fullmatch(r"--num[_-]processes(?:=(\d+))?", word)
        if match:
            value = match.group(1) or (words[i + 1] if i + 1 < len(words) else "")
            return int(value) if value.isdigit() else None
    return None


def this_command():
    """Return the script and its arguments as typed, for a command to copy."""
    return " ".join(sys.argv)


def launch_problem(script_joins_processes):
    """Check this process against its launch. Return None when the run is what was asked
    (possibly after joining CPU processes with gloo, which it prints), or the one-line reason
    it is not, with the command that fixes it.

    script_joins_processes: False for a script that never creates an Accelerator (step 1),
    which N launched processes would run as N separate trainings.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1") or 1)
    srun_tasks = int(os.environ.get("SLURM_STEP_NUM_TASKS", "1") or 1)
    if "WORLD_SIZE" not in os.environ and srun_tasks > 1:
        # srun starts N copies of the command; without a launcher nothing joins them
        return (f"srun started this script as {srun_tasks} separate tasks, without a launcher "
                "(no WORLD_SIZE): each would train alone on all the data and write the same "
                "metrics.json; start one task per machine that runs torchrun or accelerate "
                "launch (docs/cluster.md)")
    if world_size <= 1:
        # accelerate launch's one-process launcher sets MASTER_ADDR only when it was asked for
        # more than one process (or machine): then it ran the script once, not N times (a
        # MASTER_ADDR the launcher itself was given, as a cluster job exports it, says nothing).
        # The parent is read only when this environment cannot tell (see the_launcher)
        if {"ACCELERATE_DYNAMO_BACKEND", "MASTER_ADDR"} <= set(os.environ):
            words, inherited = the_launcher()
            if launcher_set("MASTER_ADDR", inherited):
                asked = processes_asked(words)
                wanted = f"{asked} processes" if asked else "several processes"
                return (f"accelerate launch was asked for {wanted} but started this script as "
                        "one process (without --multi_gpu, or a GPU for each process, it starts "
                        f"only one); run: {CPU_LAUNCH.format(n=asked or 2)} {this_command()}")
        return None
    if "LOCAL_RANK" not in os.environ:
        # every launcher (torchrun, accelerate launch, notebook_launcher) sets LOCAL_RANK too:
        # WORLD_SIZE alone is an export left in the shell, and the run would wait for peers
        # that never come
        left = " ".join(name for name in ("WORLD_SIZE", "RANK", "LOCAL_WORLD_SIZE",
                                          "MASTER_ADDR", "MASTER_PORT") if name in os.environ)
        return (f"WORLD_SIZE={world_size} is set here, but no launcher started this script "
                f"(launchers set LOCAL_RANK too): an export left in this shell? run: unset "
                f"{left}; then the command again, or launch it: "
                f"{CPU_LAUNCH.format(n=world_size)} {this_command()}")
    if not script_joins_processes:
        return (f"this script was launched as {world_size} processes, but it is the plain loop: "
                "it never creates an Accelerator, so each process would train alone on all the "
                "data; run it with python (one process), or launch it once it creates an "
                "Accelerator (lesson 2)")
    if torch_xla_installed() and not flag_is_set("ACCELERATE_USE_CPU"):
        return None  # torch_xla's runtime decides the processes; Accelerate asks it
    if flag_is_set("ACCELERATE_USE_CPU"):
        # Accelerate joins the processes on the CPU with gloo
        return hide_gpus(world_size, os.environ.get("RANK", "0") == "0")
    local_size = int(os.environ.get("LOCAL_WORLD_SIZE", world_size) or world_size)
    gpus = gpus_here()
    if gpus == 0:
        os.environ["ACCELERATE_USE_CPU"] = "1"
        if os.environ.get("RANK", "0") == "0":
            print(f"note: {world_size} processes were launched on a machine without a GPU: they "
                  "join on the CPU with gloo (ACCELERATE_USE_CPU=1 set for them)", flush=True)
        return None
    if gpus < local_size:
        return (f"{local_size} processes were launched on this machine, but it has {gpus} GPU"
                f"{'s' if gpus > 1 else ''}, and each process needs a GPU of its own; launch "
                f"--num_processes {gpus}, or run them on the CPU: ACCELERATE_USE_CPU=1 before "
                "the command")
    return None


# environment variables an Accelerator reads when it is made, which change what a step
# computes, with the value that changes nothing (accelerate 1.15.0: state.py and
# accelerator.py; accelerate launch sets the first ones from its config file, to these values
# unless the file says otherwise): step 1 never reads them, steps 2 to 4 do
NEUTRAL = {"ACCELERATE_MIXED_PRECISION": "no", "ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "1",
           "ACCELERATE_DYNAMO_BACKEND": "no", "ACCELERATE_USE_DEEPSPEED": "false",
           "ACCELERATE_USE_FSDP": "false", "ACCELERATE_USE_MEGATRON_LM": "false"}


def settings_that_change_the_numbers():
    """Return {name: value} of the NEUTRAL variables set here to another value."""
    return {name: os.environ[name] for name, neutral in NEUTRAL.items()
            if os.environ.get(name, "").strip().lower() not in ("", neutral)}


def say_settings(on_cpu):
    """Print one note per setting of the environment that changes this run's numbers (on the
    main process): a run that silently computes something else looks like a wrong lesson."""
    if os.environ.get("RANK", "0") != "0":
        return
    for name, value in settings_that_change_the_numbers().items():
        if name == "ACCELERATE_MIXED_PRECISION" and value.lower() == "fp16" and on_cpu:
            effect = (", but on a CPU Accelerate uses no fp16 (no autocast, no loss scaling): "
                      "this run is in fp32")
        else:
            effect = (": Accelerate reads it, so this run's numbers differ from a run without "
                      "it (step 1 never reads it)")
        print(f"note: {name}={value} is set in this environment{effect}; unset {name} for "
              "the course's own numbers", flush=True)


WSL = ("on Windows, run the course in WSL (Windows Subsystem for Linux): in PowerShell, wsl "
       "--install; then, in its Ubuntu terminal, clone the course and run it there")


def hide_gpus(n, says):
    """Hide the GPUs from this process, one of n that run on the CPU (CUDA_VISIBLE_DEVICES="",
    inherited by the processes it starts); say so when there were some and `says`. Return
    None, or the one-line reason when CUDA has started already and can no longer be told.

    Needed on a machine with a GPU: Accelerate's barrier (accelerate 1.15.0 state.py:412, met
    first in main_process_first) asks torch for GPU <local rank> even for CPU processes, and
    with one GPU process 1 finds none ("CUDA error: invalid device ordinal", seen on an H200).
    CUDA reads CUDA_VISIBLE_DEVICES when it starts, which the steps' imports do not make it do.
    """
    if os.environ.get("CUDA_VISIBLE_DEVICES") == "":
        return None
    import torch
    if torch.cuda.is_initialized():
        return ("CUDA started before the course could hide the GPUs from its CPU processes; "
                "run the command with CUDA_VISIBLE_DEVICES= in front of it")
    gpus = gpus_here()
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    if gpus and says:
        print(f"note: the {n} processes run on the CPU (ACCELERATE_USE_CPU=1), so the GPU"
              f"{'s are' if gpus > 1 else ' is'} hidden from them (CUDA_VISIBLE_DEVICES=\"\")",
              flush=True)
    return None


def in_kaggle():
    """Return True in a Kaggle notebook, as notebook_launcher tells (a KAGGLE_* variable)."""
    return any(name.startswith("KAGGLE") for name in os.environ)


def notebook_launcher_starts_processes(n):
    """Return True if notebook_launcher(..., num_processes=n) will start n processes here,
    False if it runs the function in this process or hands it to torch_xla: accelerate 1.15's
    launchers.py decides so (lines 124-160): a TPU in Colab or Kaggle goes to torch_xla's
    spawn, Colab with fewer than 2 GPUs runs in-process, and so does n = 1."""
    in_colab = (not in_kaggle() and "IPython" in sys.modules
                and "google.colab" in str(sys.modules["IPython"].get_ipython()))
    tpu = os.environ.get("TPU_NAME") is not None or os.environ.get("PJRT_DEVICE") == "TPU"
    if (in_colab or in_kaggle()) and tpu:
        return False
    if in_colab and gpus_here() < 2:
        return False
    return n > 1


def start_problem(n):
    """For a script that starts n processes itself with notebook_launcher (step 4): None when
    they can start as asked, else the one-line reason. With fewer GPUs than processes (a
    Kaggle notebook with one GPU, a workstation), it puts the n processes on the CPU (gloo)
    and says so in one line: every process needs a GPU of its own."""
    if not notebook_launcher_starts_processes(n):
        return None
    if sys.platform == "win32":
        return (f"notebook_launcher starts its {n} processes by forking, which Windows cannot "
                f"do; run with --num-processes 1, or {WSL}")
    if flag_is_set("ACCELERATE_USE_CPU"):
        return hide_gpus(n, says=True)
    gpus = gpus_here()
    if 0 < gpus < n:
        os.environ["ACCELERATE_USE_CPU"] = "1"
        print(f"note: {n} processes asked for and {gpus} GPU{'s' if gpus > 1 else ''} here, and "
              f"each process needs a GPU of its own: the {n} processes run on the CPU (gloo; "
              f"ACCELERATE_USE_CPU=1 and CUDA_VISIBLE_DEVICES=\"\" set for them); "
              f"--num-processes {gpus} runs on the "
              f"GPU{'s' if gpus > 1 else ''}", flush=True)
        return hide_gpus(n, says=False)
    return None


def guard_launch(joins_processes, starts_processes=0):
    """Before a step loads anything: stop with one error line unless this process is the run
    its launch was asked for, put launched processes that have no GPU on the CPU (saying so
    in one line), and from then on end a stop (Ctrl-C, SIGTERM) in one line
    (common/interrupt.py; not in a notebook's kernel, which handles its own interrupts).

    joins_processes: True for a script whose launched processes join through an Accelerator
      (steps 2-4); False for the plain loop (step 1), which N processes would run as N
      separate trainings.
    starts_processes: how many processes the script starts itself (step 4: notebook_launcher's
      num_processes); 0 for a script that a launcher starts.
    """
    problem = launch_problem(joins_processes) or start_problem(starts_processes)
    if problem:
        fail(problem)
    if joins_processes:  # the steps that make an Accelerator
        say_settings(on_cpu=flag_is_set("ACCELERATE_USE_CPU") or not (
            gpus_here() or torch_xla_installed() or mps_here()))
    if "ipykernel" not in sys.modules:
        report_stops()
        if starts_processes and notebook_launcher_starts_processes(starts_processes):
            # the processes it starts say why they stop; it adds no traceback after them
            become_launcher("notebook_launcher", watch=False)
    if starts_processes and notebook_launcher_starts_processes(starts_processes):
        connect_after_all_forked(starts_processes)  # common/forked_start.py says why
