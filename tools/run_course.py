"""Run the course's steps one after the other and compare their results.

    python tools/run_course.py                      (the embedded default, offline)
    python tools/run_course.py --steps 1 2
    python tools/run_course.py --checkpoint bert-base-cased --dataset glue

Each step runs as its own process, exactly as the README shows it, and writes its
metrics.json (and its full console output, step<N>.log) under --output-dir. One progress
line per step, then a table. The exit code is 1 if a step fails or if a comparison that must
hold does not: steps 1 and 2 on one process must give identical predictions and losses.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# step number -> (folder, how it is launched, the command's words before the flags)
STEPS = {
    1: ("step1_plain_loop", "python", [sys.executable, "step1_plain_loop/train.py"]),
    2: ("step2_accelerate", "python", [sys.executable, "step2_accelerate/train.py"]),
}
# comparisons that must hold: (earlier step, later step) -> what must be equal
MUST_BE_IDENTICAL = {(1, 2): ("predictions", "train_losses", "accuracy", "f1")}


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
    with open(log, "w") as f:
        result = subprocess.run(command + flags, cwd=REPO, stdout=f, stderr=subprocess.STDOUT,
                                env=dict(os.environ, PYTHONUNBUFFERED="1"))
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        return None, seconds, log
    return json.loads((out / "metrics.json").read_text()), seconds, log


def compare(earlier, later, fields):
    """Return 'identical' if every field is equal, else a short description of what differs."""
    differing = [f for f in fields if earlier[f] != later[f]]
    if not differing:
        return "identical"
    return "DIFFERS: " + ", ".join(differing)


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
    header = ("step", "launch", "processes", "accuracy", "f1", "evaluated", "train s",
              "eval s", "vs previous step")
    rows = []
    for step in args.steps:
        if step not in results:
            rows.append((str(step), STEPS[step][1], "-", "-", "-", "-", "-", "-", "FAILED"))
            continue
        m = results[step]
        verdict = "-"
        fields = MUST_BE_IDENTICAL.get((step - 1, step))
        if fields and step - 1 in results:
            verdict = compare(results[step - 1], m, fields)
            failed |= verdict != "identical"
        rows.append((str(step), STEPS[step][1], str(m["num_processes"]), f"{m['accuracy']:.4f}",
                     f"{m['f1']:.4f}", str(m["eval_samples"]), f"{m['train_seconds']:.1f}",
                     f"{m['eval_seconds']:.1f}", verdict))
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    for row in (header, *rows):
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    if failed:
        print("\nA step failed or a comparison that must hold does not.")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
