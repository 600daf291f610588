"""The course on one CUDA GPU, in one go: `make gpu-check` (a few minutes), then a table.

    python -m accelerate_course.maintain.gpu_check                      print the table
    python -m accelerate_course.maintain.gpu_check --write docs/gpu.md  and write it into that page

What it runs, each as a class would, on the embedded default (full runs):
  - the launch plan make course prints here;
  - steps 1 and 2 on the GPU, as make course runs them (--deterministic), and whether they are
    identical (predictions, losses, accuracy and F1);
  - step 3 as one process on the GPU (accelerate launch, configs/1-process.yaml), and as the
    README's 2 CPU processes (the plan's launch for step 3 on one GPU);
  - step 4 as the README says (python step4_tpu_notebook/train.py: 2 processes asked for on
    one GPU, which it must put on the CPU and say so), and with --num-processes 1 (what
    notebook_launcher does in a Colab notebook with one GPU: the function in the notebook's
    own process, on the GPU).
Each row's verdict comes from what that row's own run wrote and printed: the device the step
itself reports (metrics.json's "device": str(device) in step 1, str(accelerator.device) from
step 2 on), its processes, its counts, its own lines. A rehearsal on a machine without a GPU
(--rehearse) runs every row and must say NO for every row that needs the GPU (a test does).
The table names the machine and the versions it ran on. With no GPU it says so in one line
and exits 1; it exits 1 too when a row does not do what it must.

A GPU machine without network access lacks the course's pinned packages: `make gpu-bundle`
(accelerate_course/maintain/gpu_bundle.py) downloads them here, as wheels, into gpu-bundle/,
with an install script that adds them to the GPU machine's own torch.
"""

import argparse
import os
import platform
import sys
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import NamedTuple

from accelerate_course import running
from accelerate_course.commands import StepCommand, command_for, course_commands
from accelerate_course.machine import cpu_name, machine
from accelerate_course.measuring import VALIDATION_PAIRS
from accelerate_course.run_course import StepRun, compare, run_round
from accelerate_course.steps import FOLDERS
from accelerate_course.torch_build import gpu_problem, nvidia_driver

PACKAGES = (
    "torch",
    "transformers",
    "accelerate",
    "datasets",
    "evaluate",
    "tokenizers",
    "huggingface_hub",
)
BEGIN, END = "<!-- gpu-check: begin -->", "<!-- gpu-check: end -->"


def versions():
    """Return 'torch 2.13.0+cu130, transformers 5.24.0, ...' for the packages that matter."""
    found = []
    for name in PACKAGES:
        try:
            found.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            found.append(f"{name} missing")
    return ", ".join(found)


class Row(NamedTuple):
    """One row of the table: a run, what it must do, and whether its own output says it did."""

    name: str
    how: str
    device: str  # the device the run itself reports
    processes: str
    accuracy: str
    f1: str
    seconds: float
    must: str
    holds: bool
    on_gpu: bool  # a row that can only hold where a GPU is


def device_of(metrics, output):
    """Return the device a run reports: its metrics.json's "device", else Accelerate's state
    line ('Device: cuda:0'), else '-' (it wrote and printed none)."""
    if metrics and metrics.get("device"):
        return metrics["device"]
    return next(
        (line.split(": ", 1)[1] for line in output.splitlines() if line.startswith("Device: ")), "-"
    )


def on_cuda(metrics, output):
    return device_of(metrics, output).startswith("cuda")


def check_rows(launches, step_flags, out, together=1):
    """Run every row (each as make course runs a step, its log in out/<row>/step<N>/train.log)
    and return the Rows, each judged by its own run. Each row runs alone, so that its time is
    its own; with together=2 (a rehearsal on a CPU, where no time is read) rows of 1 process
    run two at a time, side by side."""
    step = {n: f"{FOLDERS[n]}/train.py" for n in FOLDERS}
    one_gpu = StepCommand("accelerate launch", command_for(3, step[3], 1), {}, 1, "GPU 0")
    readme_step4 = StepCommand("notebook_launcher", command_for(4, step[4], 2), {}, 2, "as asked")
    results = {}
    # name, how, launch, must, holds(metrics, output), needs a GPU, flags of its own
    rows = [
        (
            "step1",
            "`python` (make course: --deterministic)",
            launches[1],
            "runs on the GPU",
            on_cuda,
            True,
            (),
        ),
        (
            "step2",
            "`python` (make course: --deterministic)",
            launches[2],
            "on the GPU, identical to step 1",
            lambda m, o: (
                on_cuda(m, o)
                and results.get("step1") is not None
                and compare(results["step1"], m, None)[1]
            ),
            True,
            (),
        ),
        (
            "step3-gpu",
            "`accelerate launch --config_file configs/1-process.yaml`",
            one_gpu,
            "1 process on the GPU, 408 kept",
            lambda m, o: (
                on_cuda(m, o)
                and m["num_processes"] == 1
                and len(m["predictions"]) == VALIDATION_PAIRS
            ),
            True,
            (),
        ),
        (
            "step3-cpu",
            "the README's 2 CPU processes (`ACCELERATE_USE_CPU=1`)",
            launches[3],
            "2 processes on the CPU, 416 gathered, 408 kept",
            lambda m, o: (
                m["num_processes"] == 2
                and device_of(m, o).startswith("cpu")
                and m.get("eval_gathered") == 416
                and len(m["predictions"]) == VALIDATION_PAIRS
            ),
            False,
            (),
        ),
        (
            "step4",
            "`python step4_tpu_notebook/train.py` (2 processes asked)",
            readme_step4,
            "the CPU, saying so in one line",
            lambda m, o: (
                m["num_processes"] == 2
                and device_of(m, o).startswith("cpu")
                and "note: 2 processes asked for and 1 GPU here" in o
            ),
            True,
            (),
        ),
        (
            "step4-1",
            "`--num-processes 1` (Colab's one-GPU branch: in place)",
            readme_step4,
            "1 process on the GPU",
            lambda m, o: on_cuda(m, o) and m["num_processes"] == 1,
            True,
            ("--num-processes", "1"),
        ),
    ]
    runs = {
        name: StepRun(int(name[len("step")]), launch, [*step_flags, *flags], out / name)
        for name, _, launch, _, _, _, flags in rows
    }
    alone = [name for name, _, launch, _, _, _, flags in rows if processes(launch, flags) == 1]
    judged = {}
    for first, *_ in rows:
        if first in judged:
            continue
        group = (
            [
                first,
                *[other for other in alone if other != first and other not in judged][
                    : together - 1
                ],
            ]
            if first in alone
            else [first]
        )
        run_round([runs[name] for name in group])
        for name, how, _launch, must, holds, needs_gpu, _flags in rows:  # in the table's order
            if name not in group:
                continue
            run = runs[name]
            output = run.log.read_text(errors="replace")
            results[name] = metrics = run.metrics
            judged[name] = row = Row(
                name,
                how,
                device_of(metrics, output),
                str(metrics["num_processes"]) if metrics else "-",
                f"{metrics['accuracy']:.4f}" if metrics else "FAILED",
                f"{metrics['f1']:.4f}" if metrics else "-",
                run.seconds,
                must,
                metrics is not None and bool(holds(metrics, output)),
                needs_gpu,
            )
            print(markdown_row(row), flush=True)
            if metrics is None:
                print("    " + "\n    ".join(output.strip().splitlines()[-5:]), flush=True)
    return [judged[name] for name, *_ in rows]


def processes(launch, flags):
    """How many processes a row's run starts: its launch's, or the --num-processes it adds."""
    return (
        int(flags[flags.index("--num-processes") + 1])
        if "--num-processes" in flags
        else launch.processes
    )


def markdown_row(row):
    cells = [
        row.name,
        row.how,
        row.device,
        row.processes,
        row.accuracy,
        row.f1,
        f"{row.seconds:.0f}",
        row.must,
        "yes" if row.holds else "**NO**",
    ]
    return "| " + " | ".join(cells) + " |"


def main():
    parser = argparse.ArgumentParser(
        prog="python -m accelerate_course.maintain.gpu_check", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--output-dir", default="outputs/gpu-check")
    parser.add_argument("--write", help="a page to write the table into (between its markers)")
    parser.add_argument(
        "--rehearse",
        action="store_true",
        help="run every row on this machine without a GPU, to check the script "
        "itself (every row that needs the GPU must then say NO)",
    )
    parser.add_argument(
        "--step-flags",
        default="",
        help="flags for every step, e.g. '--max-train-steps 20' (a rehearsal)",
    )
    args = parser.parse_args()
    step_flags = tuple(args.step_flags.split())
    import torch

    problem = gpu_problem(torch)
    if problem:
        sys.exit(f"error: {problem}")
    if not torch.cuda.is_available() and not args.rehearse:
        sys.exit(
            "error: no CUDA GPU here (torch.cuda.is_available() is False); make gpu-check "
            "runs on a machine with an NVIDIA GPU"
        )
    # one GPU, the case a class meets most (Colab, Kaggle, a laptop): GPU 0 only
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "0")
    gpus, tpu, mps, hardware, _ = machine()
    launches = course_commands(max(gpus, 1), tpu)  # a rehearsal plans as if for one GPU
    lines = [
        f"Machine: {hardware} ({cpu_name()}), NVIDIA driver "
        f"{nvidia_driver()}; Python {platform.python_version()}; {versions()}.",
        "",
        "The plan `make course` prints here:",
        "",
        "```text",
    ]
    lines += [
        f"step {step}  {launch.launcher:<18} {launch.where}" for step, launch in launches.items()
    ]
    lines += [
        "```",
        "",
        "| run | how | device | processes | accuracy | F1 | wall s | must | holds |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    try:
        with running.stop_together():
            rows = check_rows(launches, step_flags, Path(args.output_dir))
    except running.Stopped as stop:
        running.end_command(stop, "the GPU check was stopped: no table")
    lines += [markdown_row(row) for row in rows]
    if args.rehearse:
        lines.insert(
            0, "A rehearsal on a machine without a GPU: it checks this script, not a GPU.\n"
        )
    table = "\n".join(lines)
    print("\n" + table)
    if args.write:
        page = Path(args.write)
        text = page.read_text()
        before, rest = text.split(BEGIN, 1)
        after = rest.split(END, 1)[1]
        stamp = time.strftime("%Y-%m-%d")
        page.write_text(f"{before}{BEGIN}\nRun on {stamp}:\n\n{table}\n{END}{after}")
        print(f"\nwritten into {page}")
    sys.exit(0 if all(row.holds for row in rows) else 1)


if __name__ == "__main__":
    main()
