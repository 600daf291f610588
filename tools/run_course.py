"""Run the course's steps one after the other and compare their results.

    python tools/run_course.py                      (the embedded default, offline)
    python tools/run_course.py --steps 1 2
    python tools/run_course.py --checkpoint bert-base-cased --dataset glue

Each step runs as its own process, launched as the README shows it: steps 1 and 2 with
python, step 3 with accelerate launch on 2 processes, step 4 through notebook_launcher on 2
processes. Each writes its metrics.json and its console output (train.log) under
--output-dir/step<N>. One progress line per step, then a table, then a plot of the four
training-loss curves (loss_curves.png).

The exit code is 1 if a step fails or if a comparison that must hold does not:
- step 2 against step 1: identical predictions, losses, accuracy and F1 (one process each);
- step 3 against step 2: step 3 trains on 2 processes (batches of 2 x 8, half the steps), so
  its numbers differ; its accuracy and F1 must stay within 0.05 of step 2's;
- step 4 against step 3: the same processes and batches, but padding to 128 tokens changes
  the random dropout masks, so the runs differ like two seeds: within 0.05 as well;
- every step must keep as many predictions as the others (they all evaluate the whole
  validation split), and steps 3 and 4 at least as many gathered as kept (the duplicated
  tail was cut, not something else).
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

ACCELERATE_LAUNCH_2 = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu",
                      "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
                      "--dynamo_backend", "no"]
# step number -> (folder, how it is launched, the command's words before the flags)
STEPS = {
    1: ("step1_plain_loop", "python", [sys.executable, "step1_plain_loop/train.py"]),
    2: ("step2_accelerate", "python", [sys.executable, "step2_accelerate/train.py"]),
    3: ("step3_distributed_eval", "accelerate launch",
        ACCELERATE_LAUNCH_2 + ["step3_distributed_eval/train.py"]),
    4: ("step4_tpu_notebook", "notebook_launcher",
        [sys.executable, "step4_tpu_notebook/train.py", "--num-processes", "2"]),
}
IDENTICAL_FIELDS = ("predictions", "train_losses", "accuracy", "f1")
# (earlier step, later step) -> None: must be identical; a number: |difference| of accuracy
# and F1 allowed (see the docstring for why)
MUST_HOLD = {(1, 2): None, (2, 3): 0.05, (3, 4): 0.05}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, nargs="+", choices=sorted(STEPS),
                        default=sorted(STEPS), help="which steps to run (default: all)")
    parser.add_argument("--checkpoint", help="passed to every step (default: embedded)")
    parser.add_argument("--dataset", help="passed to every step (default: embedded)")
    parser.add_argument("--output-dir", default="outputs/course")
    return parser.parse_args()


def run_step(step, args):
    """Run one step; return (metrics dict or None, wall seconds, log path)."""
    folder, _, command = STEPS[step]
    out = Path(args.output_dir) / f"step{step}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.json").unlink(missing_ok=True)  # a failed run must not show old numbers
    flags = ["--output-dir", str(out)]
    for name in ("checkpoint", "dataset"):
        if getattr(args, name):
            flags += [f"--{name}", getattr(args, name)]
    log = out / "train.log"
    start = time.perf_counter()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if step in (3, 4) and not gpu_count():
        # with no GPU, the launched processes must be told to use the CPU together (gloo)
        env["ACCELERATE_USE_CPU"] = "1"
    with open(log, "w") as f:
        result = subprocess.run(command + flags, cwd=REPO, stdout=f, stderr=subprocess.STDOUT,
                                env=env)
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        return None, seconds, log
    return json.loads((out / "metrics.json").read_text()), seconds, log


def gpu_count():
    """Return the number of CUDA GPUs here (0 on a laptop CPU)."""
    import torch
    return torch.cuda.device_count()


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
    args = parse_args()
    results, failed = {}, False
    for step in args.steps:
        folder, launch, _ = STEPS[step]
        print(f"step {step} ({folder}, {launch}) ...", end=" ", flush=True)
        metrics, seconds, log = run_step(step, args)
        if metrics is None:
            print(f"FAILED after {seconds:.0f} s; see {log}")
            failed = True
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
            rows.append((str(step), STEPS[step][1], "-", "-", "-", "-", "-", "-", "FAILED"))
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
        rows.append((str(step), STEPS[step][1], str(m["num_processes"]), f"{m['accuracy']:.4f}",
                     f"{m['f1']:.4f}", f"{gathered} / {m['eval_samples']}",
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
