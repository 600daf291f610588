"""Run the course's steps and compare their results: make course.

    python -m accelerate_course.run_course                      (the embedded default, offline)
    python -m accelerate_course.run_course --steps 1 2
    python -m accelerate_course.run_course --checkpoint bert-base-cased --dataset glue
    python -m accelerate_course.run_course --steps 3 --launcher torchrun

Any other flag (--epochs 1, --max-train-steps 50, ...) is passed to every step. It prints the
launch plan first (accelerate_course/commands.py: steps 1 and 2 side by side when there is a
core for each), runs each step as its own process (metrics.json and train.log under
--output-dir/step<N>), then prints one line per step, a table and a plot of the loss curves.
Exit code 1 if a step fails or a comparison that must hold does not (each Step's `within`).
One Ctrl-C stops it all (accelerate_course/running.py).
"""

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from accelerate_course import running
from accelerate_course.commands import course_commands, rounds
from accelerate_course.machine import cores, machine, refuse_windows
from accelerate_course.reloading import compare_reloaded
from accelerate_course.steps import FOLDERS, IDENTICAL, REPO, STEPS
from common.cli import OneLineErrorParser, positive_int
from common.output import replace_folder
from common.settings import settings_that_change_the_numbers

IDENTICAL_FIELDS = ("predictions", "train_losses", "accuracy", "f1")


def parse_args():
    parser = OneLineErrorParser(
        prog="python -m accelerate_course.run_course", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--steps",
        type=int,
        nargs="+",
        choices=sorted(FOLDERS),
        default=sorted(FOLDERS),
        help="which steps to run (default: all)",
    )
    parser.add_argument(
        "--launcher",
        choices=["accelerate", "torchrun"],
        default="accelerate",
        help="how step 3 is launched (default: accelerate launch)",
    )
    parser.add_argument(
        "--processes",
        type=positive_int,
        default=2,
        help="processes for steps 3 and 4 (default: 2; on GPUs at most one each)",
    )
    parser.add_argument("--output-dir", default="outputs/course")
    # everything else (--checkpoint, --dataset, --epochs, ...) goes to every step
    return parser.parse_known_args()


class StepRun:
    """One step's run, written aside: into <folder>.running while it runs, then in place of
    <folder> when it finished (an earlier run's results are replaced only by newer ones), or
    kept as <folder>.failed when it did not."""

    def __init__(self, step, launch, step_flags, folder):
        self.step, self.launch = step, launch
        self.folder = Path(folder)  # where a finished run's results go
        self.running = self.folder.with_name(self.folder.name + ".running")
        self.log = self.running / "train.log"
        self.command = launch.command + [*step_flags, "--output-dir", str(self.running)]
        self.seconds = 0.0
        self.metrics = None

    def start(self):
        """Make the folder the run writes into (a stopped run's, left by a crash, goes)."""
        shutil.rmtree(self.running, ignore_errors=True)
        self.running.mkdir(parents=True)

    def popen(self, log):
        """subprocess.Popen's keyword arguments for this step, its output into log."""
        return dict(
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, PYTHONUNBUFFERED="1", **self.launch.env),
        )

    def finished(self):
        """Read what the step wrote (metrics.json); return the error line when it failed: its
        own `error:` (or `stopped by`) line, else its last line."""
        if (self.running / "metrics.json").exists():
            self.metrics = json.loads((self.running / "metrics.json").read_text())
            return None
        lines = [
            line.strip()
            for line in self.log.read_text(errors="replace").splitlines()
            if line.strip()
        ]
        said = [line for line in lines if line.startswith(("error: ", "stopped by "))]
        return said[0] if said else lines[-1] if lines else "no output"

    def keep(self):
        """Put the run where it belongs: in place of <folder> when it wrote its metrics (the
        earlier run's results go only now), else as <folder>.failed; the log moves with it."""
        target = (
            self.folder
            if self.metrics is not None
            else self.folder.with_name(self.folder.name + ".failed")
        )
        replace_folder(self.running, target)
        self.log = target / "train.log"


def run_round(runs):
    """Run steps side by side (each its own process); return their error lines (None: ok).
    A stop signal stops them all (running.Stopped, after their own lines are in their logs)."""
    for run in runs:
        run.start()
    logs = [open(run.log, "w") for run in runs]
    try:
        processes = running.run([(run.command, run.popen(log)) for run, log in zip(runs, logs)])
    finally:
        for log in logs:
            log.close()
    errors = []
    for run, process in zip(runs, processes):
        run.seconds = process.ended - process.started
        error = run.finished()
        if process.returncode != 0 and error is None:  # metrics.json, and yet it failed
            run.metrics, error = None, f"exit code {process.returncode}"
        run.keep()
        errors.append(error)
    return errors


def compare(earlier, later, tolerance):
    """Return (verdict, holds): 'identical', 'within 0.05 (largest difference 0.0123)', or
    what differs, and which setting of the environment the later step read that the earlier
    did not (the steps write them into metrics.json: common.settings.NEUTRAL)."""
    if all(earlier[f] == later[f] for f in IDENTICAL_FIELDS):
        return "identical", True
    largest = max(abs(earlier[f] - later[f]) for f in ("accuracy", "f1"))
    if tolerance is None:
        differing = [f for f in IDENTICAL_FIELDS if earlier[f] != later[f]]
        verdict, holds = f"DIFFERS ({', '.join(differing)})", False
    elif largest <= tolerance:
        return f"within {tolerance} (largest difference {largest:.4f})", True
    else:
        verdict, holds = f"DIFFERS by {largest:.4f} (more than {tolerance})", False
    read = {
        name: value
        for name, value in later.get("environment", {}).items()
        if earlier.get("environment", {}).get(name) != value
    }
    if read:
        verdict += " with " + ", ".join(f"{name}={value}" for name, value in read.items())
    return verdict, holds


def weights_of(run_folder):
    """Return the sha256 of the weights a step saved (<run_folder>/model/model.safetensors)."""
    return hashlib.sha256((run_folder / "model" / "model.safetensors").read_bytes()).hexdigest()


def check_reloaded(runs, results):
    """Return ({step: what its reloaded model gave}, whether every one holds): each finished
    step's saved model reloaded in a fresh process (accelerate_course/reloading.py), its
    predictions counted against the run's own, and, for a step held identical to the step
    before it, its weights' sha256 against that step's."""
    cells, holds = {}, True
    said = compare_reloaded({runs[step].folder: STEPS[step].eval_padding for step in results})
    for step, metrics in results.items():
        cell = said[runs[step].folder]
        holds &= cell == f"{len(metrics['predictions'])} / {len(metrics['predictions'])} equal"
        if step - 1 in results and STEPS[step].within is IDENTICAL:
            same = weights_of(runs[step].folder) == weights_of(runs[step - 1].folder)
            cell += f"; {'same' if same else 'OTHER'} weights as step {step - 1}'s"
            holds &= same
        cells[step] = cell
    return cells, holds


def counts_hold(metrics, validation_size):
    """Return True if a run kept validation_size predictions (the size every step saw) and
    gathered at least as many before the cut."""
    gathered = metrics.get("eval_gathered", metrics["eval_samples"])
    kept = len(metrics["predictions"])
    return metrics["eval_samples"] == kept == validation_size and gathered >= kept


def pairs_seen(metrics):
    """Return the training pairs all processes had seen after each optimizer step of a run:
    its batch per process times its processes, step by step."""
    per_step = metrics["hyperparameters"]["train_batch_size"] * metrics["num_processes"]
    return [per_step * (i + 1) for i in range(len(metrics["train_losses"]))]


def plot_losses(results, path):
    """Save the training-loss curves of the runs (each smoothed over its last 25 optimizer
    steps) as a PNG, against the training pairs seen: 1 and 2 processes cover the same data
    on the same axis. The file is written aside, then put in place."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    for step, m in sorted(results.items()):
        losses = m["train_losses"]
        window = 25
        smooth = [
            sum(losses[max(0, i - window + 1) : i + 1])
            / len(losses[max(0, i - window + 1) : i + 1])
            for i in range(len(losses))
        ]
        style, width = STEPS[step].plot
        ax.plot(
            pairs_seen(m),
            smooth,
            style,
            linewidth=width,
            label=f"step {step} ({m['num_processes']} "
            f"process{'es' if m['num_processes'] > 1 else ''}, {len(losses)} optimizer steps)",
        )
    ax.set_xlabel("training pairs seen, all processes together")
    ax.set_ylabel("training loss (mean of the last 25 optimizer steps)")
    ax.set_title("Training loss of each step (embedded MRPC, batch 8 per process)")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    aside = path.with_name(f".{path.name}.{os.getpid()}.png")
    fig.savefig(aside)
    plt.close(fig)
    os.replace(aside, path)


def hold_output_dir(folder):
    """Return an open lock on folder (its .lock file) for as long as this command runs, or
    exit with one line naming the command that holds it: two course commands writing into one
    folder would delete each other's results. The system lets the lock go when the process
    ends, however it ends."""
    import fcntl

    folder.mkdir(parents=True, exist_ok=True)
    lock = open(folder / ".lock", "a+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        holder = lock.read().strip() or "another command"
        sys.exit(
            f"error: {holder} is writing into {folder}; wait for it to end, or pass "
            'another folder: make course ARGS="--output-dir outputs/course2"'
        )
    lock.seek(0)
    lock.truncate()
    lock.write(f"make course (process {os.getpid()}, started at {time.strftime('%H:%M:%S')})")
    lock.flush()
    return lock


def main():
    args, step_flags = parse_args()
    refuse_windows()
    # the steps' own checks of their flags, now, in one line: before any step starts, and
    # before an earlier run's results could be touched
    from common.cli import parse_args as step_arguments

    step_arguments([*step_flags, "--output-dir", args.output_dir])
    lock = hold_output_dir(Path(args.output_dir))  # held until the command ends
    gpus, tpu, mps, hardware, gpu_aside = machine()
    launches = course_commands(gpus, tpu, args.processes, args.launcher, mps, gpu_aside=gpu_aside)
    order = rounds(launches, args.steps, cores())
    print(f"launch plan ({hardware}):")
    for step in args.steps:
        launch = launches[step]
        settings = " ".join(f"{name}={value}" for name, value in launch.env.items())
        print(
            f"  step {step}  {launch.launcher:<18} {launch.where}"
            + (f"  [{settings}]" if settings else "")
        )
    for name, value in settings_that_change_the_numbers().items():
        print(
            f"  note: {name}={value} is set in this environment: the steps that make an "
            "Accelerator read it (step 1 does not), so their numbers differ from the course's"
        )
    print(
        "  "
        + "; then ".join(
            " and ".join(f"step {s}" for s in together)
            + (" side by side, one core each" if len(together) > 1 else "")
            for together in order
        )
    )
    print()
    runs = {
        step: StepRun(step, launches[step], step_flags, Path(args.output_dir) / f"step{step}")
        for step in args.steps
    }
    results, failed, ran = {}, False, []
    start = time.perf_counter()
    try:
        with running.stop_together():
            for together in order:
                ran += together
                names = " and ".join(
                    f"step {s} ({FOLDERS[s]}, {launches[s].launcher})" for s in together
                )
                print(
                    f"{names}{', side by side' if len(together) > 1 else ''} ...",
                    end="\n" if len(together) > 1 else " ",
                    flush=True,
                )
                errors = run_round([runs[s] for s in together])
                refused = False
                for step, error in zip(together, errors):
                    run = runs[step]
                    prefix = f"  step {step} " if len(together) > 1 else ""
                    if error:
                        print(
                            f"{prefix}FAILED after {run.seconds:.0f} s; see {run.log}\n    {error}"
                        )
                        failed, refused = True, refused or error.startswith("error: ")
                        continue
                    results[step] = run.metrics
                    print(
                        f"{prefix}done in {run.seconds:.0f} s: accuracy "
                        f"{run.metrics['accuracy']:.4f}, f1 {run.metrics['f1']:.4f}"
                    )
                later = [str(s) for s in args.steps if s not in ran]
                if refused and later:
                    print(
                        f"    stopped here: step{'s' if len(later) > 1 else ''} "
                        f"{', '.join(later)} share this input and would refuse it too"
                    )
                    break
            wall = time.perf_counter() - start
            if results:
                print("each saved model, reloaded in a fresh process ...", end=" ", flush=True)
                reloaded, holds = check_reloaded(runs, results)
                failed |= not holds
                print("done")
    except running.Stopped as stop:
        stopped = [s for s in ran if s not in results]
        lines = [f"  step {step}: {runs[step].finished() or 'finished'}" for step in stopped]
        for step in stopped:  # first: a closed terminal (SIGHUP) takes the lines below away
            runs[step].metrics = None  # a stopped run is not a result, even if it wrote one
            runs[step].keep()
        running.say_if_heard("\n" + "\n".join(lines))  # after the round's line, left open
        later = [str(s) for s in args.steps if s not in ran]
        running.end_command(
            stop,
            "the course was stopped"
            + (
                f" during step{'s' if len(stopped) > 1 else ''} {' and '.join(map(str, stopped))}"
                if stopped
                else ""
            )
            + (
                f"; step{'s' if len(later) > 1 else ''} {', '.join(later)} not started"
                if later
                else ""
            )
            + ": no table, no plot",
        )

    print()
    header = (
        "step",
        "launch",
        "processes",
        "accuracy",
        "f1",
        "gathered / kept",
        "train s",
        "eval s",
        "vs previous step",
        "saved model, reloaded",
    )
    rows = []
    for step in args.steps:
        if step not in results:
            rows.append(
                (
                    str(step),
                    launches[step].launcher,
                    "-",
                    "-",
                    "-",
                    "-",
                    "-",
                    "-",
                    "FAILED" if step in ran else "not run",
                    "-",
                )
            )
            continue
        m = results[step]
        verdict = "-"
        if step - 1 in results:  # each step is held to the step before it (Step.within)
            verdict, holds = compare(results[step - 1], m, STEPS[step].within)
            failed |= not holds
        # every step evaluates the same split: the first run that finished sets its size
        if not counts_hold(m, next(iter(results.values()))["eval_samples"]):
            verdict += "; WRONG sample counts"
            failed = True
        gathered = m.get("eval_gathered", m["eval_samples"])
        rows.append(
            (
                str(step),
                launches[step].launcher,
                str(m["num_processes"]),
                f"{m['accuracy']:.4f}",
                f"{m['f1']:.4f}",
                f"{gathered} / {m['eval_samples']}",
                f"{m['train_seconds']:.1f}",
                f"{m['eval_seconds']:.1f}",
                verdict,
                reloaded[step],
            )
        )
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    for row in (header, *rows):
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    own = sum(runs[s].seconds for s in ran)
    print(
        f"\nthe course took {wall:.0f} s; its steps' own times add up to {own:.0f} s"
        + (f" ({wall / own:.2f} of that: steps side by side)" if wall < own * 0.98 else "")
    )
    if results and importlib.util.find_spec("matplotlib") is None:
        print(
            "no loss curves: matplotlib is not installed here (pip install matplotlib, or "
            "make install)"
        )
    elif results:
        plot = Path(args.output_dir) / "loss_curves.png"
        plot_losses(results, plot)
        print(f"training-loss curves: {plot}")
    settings = settings_that_change_the_numbers()
    if failed:
        print(
            "\nA step failed or a comparison that must hold does not."
            + (
                f" {', '.join(f'{n}={v}' for n, v in settings.items())} is set in this "
                "environment: the steps that make an Accelerator read it, step 1 does not; "
                "unset it for the course's comparisons"
                if settings
                else ""
            )
        )
    lock.close()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
