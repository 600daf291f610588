"""Run the course's steps one after the other and compare their results.

    python -m accelerate_course.run_course                      (the embedded default, offline)
    python -m accelerate_course.run_course --steps 1 2
    python -m accelerate_course.run_course --checkpoint bert-base-cased --dataset glue
    python -m accelerate_course.run_course --steps 3 --launcher torchrun

Any other flag (--epochs 1, --max-train-steps 50, ...) is passed to every step.

First it decides how to launch each step on this machine and prints that plan (see plan()):
with no GPU, steps 1 and 2 run with python and steps 3 and 4 on 2 CPU processes; with one
GPU, steps 1 and 2 run on it and steps 3 and 4 on 2 CPU processes (one GPU cannot take two
processes); with several GPUs, steps 3 and 4 take one process per GPU, up to --processes.
Each step runs as its own process and writes its metrics.json and its console output
(train.log) under --output-dir/step<N>. One progress line per step (and, when a step fails,
its own error line), then a table, then a plot of the training-loss curves (loss_curves.png).

The exit code is 1 if a step fails or if a comparison that must hold does not:
- step 2 against step 1: identical predictions, losses, accuracy and F1 (one process each);
- step 3 against step 2: step 3 trains on 2 processes (batches of 2 x 8, half the steps), so
  its numbers differ; its accuracy and F1 must stay within 0.05 of step 2's;
- step 4 against step 3: the same processes and batches, but padding to 128 tokens changes
  the random dropout masks, so the runs differ like two seeds: within 0.05 as well;
- every step must keep as many predictions as the others (they all evaluate the whole
  validation split), and steps 3 and 4 at least as many gathered as kept (the duplicated
  tail was cut, not something else).
A step that stops on a bad input (its one `error:` line: a flag, the checkpoint, the
dataset, the output folder) stops the course there: every later step would refuse it too.
"""

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

from accelerate_course.steps import FOLDERS, REPO

CONFIGS = REPO / "configs"
IDENTICAL_FIELDS = ("predictions", "train_losses", "accuracy", "f1")
# (earlier step, later step) -> None: must be identical; a number: |difference| of accuracy
# and F1 allowed (see the docstring for why)
MUST_HOLD = {(1, 2): None, (2, 3): 0.05, (3, 4): 0.05}


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
    cpu_env = {} if on_gpus else {"ACCELERATE_USE_CPU": "1", **one_thread, **no_xla}
    single = ("1 process on GPU 0" if gpus and not tpu else
              "1 process on Apple's GPU (mps)" if mps and not tpu else "1 process on the CPU")
    # on a CUDA GPU, steps 1 and 2 are identical only with deterministic kernels: the
    # attention's backward (memory-efficient SDPA) adds in a varying order unless PyTorch's
    # deterministic mode is on (attention_backward.cu), and cuBLAS needs a fixed workspace
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
        tpu_branch = any(name.startswith("KAGGLE") for name in os.environ)
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


def cpu_name():
    """Return the processor's name with its family and model (what decides which kernels
    run, so what a timing or a build was measured on), or what platform knows."""
    from common.embedded.trace import processor
    info = processor()
    if info.get("family"):
        return f"{info['name']}, family {info['family']} model {info['model']}"
    return info.get("name") or platform.machine()


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


# the oldest NVIDIA driver each CUDA major version runs on (NVIDIA's CUDA release notes, minor
# version compatibility): a torch wheel built for CUDA 13.x needs 580, one for 12.x needs 525
MIN_DRIVER = {12: 525, 13: 580}


def nvidia_driver(version_file="/proc/driver/nvidia/version"):
    """Return the NVIDIA kernel driver's version (e.g. '535.183.01'), or None if there is none
    (or not on Linux)."""
    try:
        text = Path(version_file).read_text()
    except OSError:
        return None
    match = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d+[\d.]*)", text)
    return match.group(1) if match else None


def wheel_for(torch, works):
    """Return the pip command for this torch version built for the newest CUDA release that
    works(cuda_version) (torch's own table of its release builds, torch/cuda/__init__.py),
    or None."""
    import platform as _platform
    try:
        from torch.cuda import PYTORCH_RELEASES_CODE_CC
    except ImportError:  # a torch older than this table (a GPU image's own)
        return None
    base = torch.__version__.split("+")[0]
    arch = "aarch64" if _platform.machine().lower() == "aarch64" else "x86_64"
    for cuda in sorted(PYTORCH_RELEASES_CODE_CC, key=lambda v: tuple(map(int, v.split("."))),
                       reverse=True):
        if works(cuda, PYTORCH_RELEASES_CODE_CC[cuda].get(arch, set())):
            return (f"pip install torch=={base} --index-url "
                    f"https://download.pytorch.org/whl/cu{cuda.replace('.', '')}")
    return None


def gpu_problem(torch, version_file="/proc/driver/nvidia/version"):
    """Return None if this torch can use every NVIDIA GPU it counts (or there is none), else
    one line saying why not and what to install. Three ways it cannot, each of which would
    otherwise be a crash deep in a step or a silent run on the CPU:
    - a CPU build of torch on a machine with an NVIDIA driver;
    - a driver too old for the build's CUDA: NVML counts the GPUs, CUDA does not start
      (torch.cuda.device_count() > 0, torch.cuda.is_available() False);
    - a GPU whose architecture the build has no kernels for (a P100 or V100 under the CUDA 13
      build): torch's own table of which code runs on which compute capability decides."""
    base = torch.__version__.split("+")[0]
    driver = nvidia_driver(version_file)
    if torch.version.cuda is None:
        if driver and not torch.version.hip:
            return (f"an NVIDIA driver ({driver}) is here, but torch {torch.__version__} is a "
                    f"CPU build; for the GPU: pip install torch=={base} (on Linux, PyPI's "
                    "build for CUDA 13.0)")
        return None
    counted = torch.cuda.device_count()
    if counted == 0:
        return None
    if not torch.cuda.is_available():
        cuda = torch.version.cuda
        need = MIN_DRIVER.get(int(cuda.split(".")[0]))
        found = int(driver.split(".")[0]) if driver else None
        fix = wheel_for(torch, lambda c, _: found is not None and
                        MIN_DRIVER.get(int(c.split(".")[0]), 10**6) <= found)
        return (f"torch {torch.__version__} counts {counted} GPU{'s' if counted > 1 else ''} but "
                f"CUDA {cuda} cannot start on them: the NVIDIA driver ({driver or 'unknown'}) is "
                f"older than CUDA {cuda} needs ({need or 'see NVIDIA'} or newer); update the "
                f"driver{', or: ' + fix if fix else ''}")
    try:
        from torch.cuda import _code_compatible_with_device
    except ImportError:  # a torch older than that table: same major version, minor not above
        def _code_compatible_with_device(device_cc, code_cc):
            return device_cc // 10 == code_cc // 10 and device_cc % 10 >= code_cc % 10
    built = [int(arch.split("_")[1].rstrip("af")) for arch in torch.cuda.get_arch_list()
             if arch.startswith("sm_")]
    for index in range(counted):
        major, minor = torch.cuda.get_device_capability(index)
        device_cc = 10 * major + minor
        if built and not any(_code_compatible_with_device(device_cc, cc) for cc in built):
            fix = wheel_for(torch, lambda _, ccs: any(
                _code_compatible_with_device(device_cc, cc) for cc in ccs))
            return (f"GPU {index} ({torch.cuda.get_device_name(index)}, compute capability "
                    f"{major}.{minor}) has no kernels in torch {torch.__version__} (built for "
                    f"{' '.join(torch.cuda.get_arch_list())}): a step on it would stop with 'no "
                    "kernel image is available'; "
                    + (f"install a build that has them: {fix}" if fix else
                       "no build of this torch has them; see https://pytorch.org/get-started/"))
    return None


def refuse_windows():
    """Exit with one line naming WSL on native Windows: steps 3 and 4 start several processes,
    which there needs what Windows lacks (notebook_launcher forks; torchrun's store needs
    USE_LIBUV=0 on Windows builds)."""
    if sys.platform == "win32":
        from common.launch import WSL
        sys.exit(f"error: make course runs steps 3 and 4 on several processes, which native "
                 f"Windows cannot start as the course does; {WSL}")


def parse_args():
    parser = argparse.ArgumentParser(prog="python -m accelerate_course.run_course",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, nargs="+", choices=sorted(FOLDERS),
                        default=sorted(FOLDERS), help="which steps to run (default: all)")
    parser.add_argument("--launcher", choices=["accelerate", "torchrun"], default="accelerate",
                        help="how step 3 is launched (default: accelerate launch)")
    parser.add_argument("--processes", type=int, default=2,
                        help="processes for steps 3 and 4 (default: 2; on GPUs at most one each)")
    parser.add_argument("--output-dir", default="outputs/course")
    # everything else (--checkpoint, --dataset, --epochs, ...) goes to every step
    return parser.parse_known_args()


def run_step(step, launch, step_flags, output_dir):
    """Run one step; return (metrics dict or None, wall seconds, log path, the step's own
    error line or the last line of its output when it failed)."""
    out = Path(output_dir) / f"step{step}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.json").unlink(missing_ok=True)  # a failed run must not show old numbers
    log = out / "train.log"
    start = time.perf_counter()
    env = dict(os.environ, PYTHONUNBUFFERED="1", **launch.env)
    with open(log, "w") as f:
        result = subprocess.run(launch.command + [*step_flags, "--output-dir", str(out)],
                                cwd=REPO, stdout=f, stderr=subprocess.STDOUT, env=env)
    seconds = time.perf_counter() - start
    if result.returncode != 0 or not (out / "metrics.json").exists():
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines()
                 if line.strip()]
        errors = [line for line in lines if line.startswith("error: ")]
        return None, seconds, log, (errors[0] if errors else lines[-1] if lines else
                                    f"exit code {result.returncode}, no output")
    return json.loads((out / "metrics.json").read_text()), seconds, log, None


def compare(earlier, later, tolerance):
    """Return (verdict, holds): 'identical', 'within 0.05 (largest difference 0.0123)', or
    what differs."""
    if all(earlier[f] == later[f] for f in IDENTICAL_FIELDS):
        return "identical", True
    largest = max(abs(earlier[f] - later[f]) for f in ("accuracy", "f1"))
    if tolerance is None:
        differing = [f for f in IDENTICAL_FIELDS if earlier[f] != later[f]]
        return f"DIFFERS ({', '.join(differing)})", False
    if largest <= tolerance:
        return f"within {tolerance} (largest difference {largest:.4f})", True
    return f"DIFFERS by {largest:.4f} (more than {tolerance})", False


def counts_hold(metrics, validation_size):
    """Return True if a run kept validation_size predictions (the size every step saw) and
    gathered at least as many before the cut."""
    gathered = metrics.get("eval_gathered", metrics["eval_samples"])
    kept = len(metrics["predictions"])
    return metrics["eval_samples"] == kept == validation_size and gathered >= kept


def plot_losses(results, path):
    """Save the training-loss curves of the runs (smoothed over 25 steps) as a PNG."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    styles = {1: ("-", 3.5), 2: ("--", 1.5), 3: ("-", 2.5), 4: (":", 2.0)}
    for step, m in sorted(results.items()):
        losses = m["train_losses"]
        window = 25
        smooth = [sum(losses[max(0, i - window + 1):i + 1]) / len(losses[max(0, i - window + 1):i + 1])
                  for i in range(len(losses))]
        style, width = styles.get(step, ("-", 1.5))
        ax.plot(range(1, len(losses) + 1), smooth, style, linewidth=width,
                label=f"step {step} ({m['num_processes']} process{'es' if m['num_processes'] > 1 else ''}, "
                      f"{len(losses)} optimizer steps)")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("training loss (mean of the last 25 steps)")
    ax.set_title("Training loss of the four steps (embedded MRPC, batch 8 per process)")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main():
    args, step_flags = parse_args()
    refuse_windows()
    gpus, tpu, mps, hardware = machine()
    launches = plan(gpus, tpu, args.processes, args.launcher, mps)
    print(f"launch plan ({hardware}):")
    for step in args.steps:
        launch = launches[step]
        settings = " ".join(f"{name}={value}" for name, value in launch.env.items())
        print(f"  step {step}  {launch.launcher:<18} {launch.where}"
              + (f"  [{settings}]" if settings else ""))
    print()
    results, failed, ran = {}, False, set()
    for step in args.steps:
        ran.add(step)
        launch = launches[step]
        print(f"step {step} ({FOLDERS[step]}, {launch.launcher}) ...", end=" ", flush=True)
        metrics, seconds, log, error = run_step(step, launch, step_flags, args.output_dir)
        if metrics is None:
            print(f"FAILED after {seconds:.0f} s; see {log}\n    {error}")
            failed = True
            if error.startswith("error: "):
                later = [str(s) for s in args.steps if s > step]
                if later:
                    print(f"    stopped here: step{'s' if len(later) > 1 else ''} "
                          f"{', '.join(later)} share this input and would refuse it too")
                break
            continue
        results[step] = metrics
        print(f"done in {seconds:.0f} s: accuracy {metrics['accuracy']:.4f}, "
              f"f1 {metrics['f1']:.4f}")

    print()
    header = ("step", "launch", "processes", "accuracy", "f1", "gathered / kept", "train s",
              "eval s", "vs previous step")
    rows = []
    for step in args.steps:
        if step not in results:
            rows.append((str(step), launches[step].launcher, "-", "-", "-", "-", "-", "-",
                         "FAILED" if step in ran else "not run"))
            continue
        m = results[step]
        verdict = "-"
        if (step - 1, step) in MUST_HOLD and step - 1 in results:
            verdict, holds = compare(results[step - 1], m, MUST_HOLD[(step - 1, step)])
            failed |= not holds
        # every step evaluates the same split: the first run that finished sets its size
        if not counts_hold(m, next(iter(results.values()))["eval_samples"]):
            verdict += "; WRONG sample counts"
            failed = True
        gathered = m.get("eval_gathered", m["eval_samples"])
        rows.append((str(step), launches[step].launcher, str(m["num_processes"]),
                     f"{m['accuracy']:.4f}", f"{m['f1']:.4f}", f"{gathered} / {m['eval_samples']}",
                     f"{m['train_seconds']:.1f}", f"{m['eval_seconds']:.1f}", verdict))
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    for row in (header, *rows):
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    if results:
        plot = Path(args.output_dir) / "loss_curves.png"
        plot_losses(results, plot)
        print(f"\ntraining-loss curves: {plot}")
    if failed:
        print("\nA step failed or a comparison that must hold does not.")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
