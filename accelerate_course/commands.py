"""The commands that start a step: one builder for make course, the lab, the grader and the GPU
check, and make course's choice of command for each step on this machine.

    command_for(step, script, n, ...)   the words that start `script` as step `step` runs, on
                                        n processes (python, accelerate launch or torchrun)
    course_commands(...)                {step: StepCommand}: make course's command for each
                                        step on this machine, with its environment and why
    rounds(...)                         which of those run side by side

A Step's record (accelerate_course/steps.py) says who starts its processes; the machine
(accelerate_course/machine.py) says what they can run on.
"""

import sys
from typing import NamedTuple

from accelerate_course.steps import REPO, STEPS

CONFIGS = REPO / "configs"


class StepCommand(NamedTuple):
    """How make course runs one step: who starts it (said in the plan and the table), the
    command's words before the step's flags, what is added to the environment, how many
    processes, and on what (said in the plan)."""

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
    return [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(CONFIGS / f"{config}.yaml"),
        "--num_processes",
        str(n),
    ]


def torchrun(n):
    """Return torchrun's words for n processes on this machine (--standalone: its rendezvous
    on a free port, not on 29500, which may be another user's)."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        str(n),
    ]


def command_for(step, script, n, launcher="accelerate", gpus=False, port=None, machine=None):
    """Return the words that start `script` (a step's train.py, or the lab's driver running
    it) as step `step` (a number) runs, on n processes: python for a step that starts its own
    processes (its --num-processes is one of its flags: Step.process_flags) or for one process
    when launcher is None; else accelerate launch with the course's config (gpus: on n GPUs),
    or torchrun. port: the processes' meeting port (None: a free one the launcher picks);
    machine: (this machine's rank, the main machine's port) for 2 machines of 1 process each
    on 127.0.0.1, one such command per machine."""
    python = [sys.executable, str(script)]
    if STEPS[step].started_by == "itself" or (n == 1 and launcher is None):
        return python
    if machine is not None:
        rank, port = machine
        if launcher == "torchrun":
            return [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes",
                "2",
                "--node_rank",
                str(rank),
                "--nproc_per_node",
                "1",
                "--master_addr",
                "127.0.0.1",
                "--master_port",
                str(port),
                str(script),
            ]
        return accelerate_launch(2) + [
            "--num_machines",
            "2",
            "--machine_rank",
            str(rank),
            "--main_process_ip",
            "127.0.0.1",
            "--main_process_port",
            str(port),
            str(script),
        ]
    if launcher == "torchrun":
        return torchrun(n) + (["--master_port", str(port)] if port else []) + [str(script)]
    return (
        accelerate_launch(n, gpus)
        + (["--main_process_port", str(port)] if port else [])
        + [str(script)]
    )


def course_commands(
    gpus,
    tpu=False,
    processes=2,
    launcher="accelerate",
    mps=False,
    xla=None,
    tpu_branch=None,
    gpu_aside=False,
):
    """Return make course's {step: StepCommand} for a machine with `gpus` CUDA GPUs (and a TPU
    or not, Apple's GPU, mps, or not), each step as its record says it starts.

    no GPU: one-process steps on the CPU; the others `processes` CPU processes (gloo); one
      thread per process (OMP_NUM_THREADS=1), so that the numbers do not depend on the
      machine's number of cores.
    one GPU: one-process steps on the GPU; the others on CPU processes, because every process
      of a multi-GPU launch needs a GPU of its own (NCCL cannot put two on one).
    several GPUs: one-process steps on one GPU; the others one process per GPU, at most
      `processes`.
    a TPU: every step the CPU, as without a GPU (Accelerate told to ignore torch_xla), except
      a step that starts its own processes: on every TPU chip when torch_xla is installed
      (xla; None: look) and notebook_launcher takes its TPU branch, which it does only in
      Colab or Kaggle (from a shell: Kaggle's KAGGLE_* variables; tpu_branch; None: look);
      otherwise on CPU processes, saying why.
    mps (a Mac with Apple silicon, no CUDA): one-process steps pick mps by themselves; the
      others on CPU processes, as without a GPU (gloo on the CPU; Accelerate joins no
      processes on mps).
    gpu_aside: an NVIDIA GPU this torch cannot use (machine.gpu_problem) is there: every step
      runs on the CPU, with CUDA_VISIBLE_DEVICES= in its command.
    """
    on_gpus = min(processes, gpus) if gpus >= 2 else 0
    n = on_gpus or processes
    # one thread per process on the CPU: the same numbers whatever the number of cores (a sum
    # split over threads is added in another order); accelerate launch gives its processes
    # one thread anyway, notebook_launcher's get cores / processes
    one_thread = {"OMP_NUM_THREADS": "1"}
    no_xla = {"USE_TORCH_XLA": "0"} if tpu else {}
    # CPU processes on a machine with a GPU never see it: Accelerate's barrier would ask for
    # GPU <local rank> (docs/gpu.md says why; common/launch.py refuses such a launch)
    hidden = {"CUDA_VISIBLE_DEVICES": ""} if gpus else {}
    cpu_env = {} if on_gpus else {"ACCELERATE_USE_CPU": "1", **one_thread, **no_xla, **hidden}
    single = (
        "1 process on GPU 0"
        if gpus and not tpu
        else "1 process on Apple's GPU (mps)"
        if mps and not tpu
        else "1 process on the CPU"
    )
    # on a CUDA GPU, deterministic kernels make steps 1 and 2 identical by construction: the
    # attention's backward (memory-efficient SDPA) may add in a varying order unless PyTorch's
    # deterministic mode is on (attention_backward.cu), and cuBLAS needs a fixed workspace
    # (an H200 gave identical backward passes without it: docs/gpu.md)
    on_gpu = bool(gpus) and not tpu
    deterministic = ["--deterministic"] if on_gpu else []
    if on_gpu:
        single += ", deterministic kernels (--deterministic), so that steps 1 and 2 can match"
    if on_gpus:
        where = f"{n} processes, one per GPU (nccl)"
    elif gpus == 1:
        where = (
            f"{n} processes on the CPU (gloo): one GPU cannot take {n} processes, each "
            "needs a GPU of its own"
        )
    else:
        where = f"{n} processes on the CPU (gloo)" + (": no GPU here" if not tpu else "")
    commands = {}
    for number, step in STEPS.items():
        script = f"{step.folder}/train.py"
        if step.started_by == "python":
            commands[number] = StepCommand(
                "python",
                command_for(number, script, 1, launcher=None) + deterministic,
                {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"} if on_gpu else {**one_thread, **no_xla},
                1,
                single,
            )
        elif step.started_by == "a launcher":
            commands[number] = StepCommand(
                "torchrun" if launcher == "torchrun" else "accelerate launch",
                command_for(number, script, n, launcher, gpus=bool(on_gpus)),
                cpu_env,
                n,
                where,
            )
        else:
            commands[number] = own_processes(
                number,
                script,
                n,
                tpu,
                gpus,
                on_gpus,
                where,
                cpu_env,
                {**one_thread, **no_xla},
                xla,
                tpu_branch,
            )
    if gpu_aside:
        commands = {
            number: command._replace(env={**command.env, "CUDA_VISIBLE_DEVICES": ""})
            for number, command in commands.items()
        }
    return commands


def own_processes(
    number, script, n, tpu, gpus, on_gpus, where, cpu_env, cpu_threads, xla, tpu_branch
):
    """Return make course's StepCommand for a step that starts its own processes
    (notebook_launcher): see course_commands."""
    words = command_for(number, script, n) + STEPS[number].process_flags(n)
    if xla is None:
        from common.launch import xla_installed

        xla = xla_installed()
    if tpu_branch is None:  # notebook_launcher's own test (accelerate/launchers.py)
        from common.launch import in_kaggle

        tpu_branch = in_kaggle()
    if tpu and xla and tpu_branch:
        return StepCommand(
            "notebook_launcher",
            words,
            {"PJRT_DEVICE": "TPU"},
            0,
            "every TPU chip (notebook_launcher's TPU branch; num_processes is ignored there)",
        )
    if tpu:
        # PJRT_DEVICE emptied: with it, notebook_launcher in Colab or Kaggle would take its TPU
        # branch (and import a torch_xla that may not be here)
        why = (
            "notebook_launcher uses a TPU only in a Colab or Kaggle notebook; there"
            if xla
            else "torch_xla is not installed here; on the TPU"
        )
        return StepCommand(
            "notebook_launcher",
            words,
            {**cpu_threads, "PJRT_DEVICE": ""},
            n,
            f"{n} processes on the CPU (gloo): {why}, run step "
            f"{number} as the notebook (tpu_training.ipynb)",
        )
    if gpus == 1:
        return StepCommand("notebook_launcher", words, cpu_env, n, where)
    if on_gpus:
        return StepCommand("notebook_launcher", words, {}, n, where)
    return StepCommand(
        "notebook_launcher",
        words,
        {"OMP_NUM_THREADS": "1"},
        n,
        f"{n} processes on the CPU (gloo): the step's Accelerator(cpu=True)",
    )


def rounds(commands, steps, cores):
    """Return the steps to run as rounds, in order: a round's steps run side by side. The steps
    that are one process of one thread on the CPU share a round, as many as the machine has
    cores (they are independent, and one thread each gives the same numbers side by side as
    one after the other: steps 1 and 2 here); every other step has a round of its own."""

    def one_thread(step):
        command = commands[step]
        return command.processes == 1 and command.env.get("OMP_NUM_THREADS") == "1"

    together = [s for s in steps if one_thread(s)][:cores]
    if len(together) >= 2:
        return [together, *([s] for s in steps if s not in together)]
    return [[step] for step in steps]
