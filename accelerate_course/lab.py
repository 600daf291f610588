"""The what-if lab: run a step beside its variants and measure what each lesson line does.

A variant is a small patch kept beside its step (stepN_*/whatif/<name>.patch): the step with
one lesson line taken out or done the other common way. It is applied to a copy of the step,
never to the step itself, and run for real, with accelerate_course/lab_driver.py reporting from inside
every process. measure() turns those reports into numbers, and symptoms() compares a run
with the lesson's run of the same step: what the table of `make what-if` says, and the
hints of `make check` (accelerate_course/check.py).
"""

import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from accelerate_course import running
from accelerate_course.launching import accelerate_launch, torchrun
from accelerate_course.steps import FOLDERS, REPO
from common.embedded.build_data import SPLITS
from common.launch import free_port

DRIVER = Path(__file__).resolve().parent / "lab_driver.py"
# the embedded validation split's pairs (common/embedded/build_data.py makes it): 408
VALIDATION_PAIRS = next(size for split, size, _ in SPLITS if split == "validation")
# a short run: enough optimizer steps for a missing line to show, few enough for class
SHORT_RUN = ["--max-train-steps", "30"]
# how many processes each step's runs have: 1 (step 1), or 2 CPU processes, started by
# accelerate launch (steps 2 and 3; see launch_command) or by step 4's own notebook_launcher
PROCESSES = {1: 1, 2: 2, 3: 2, 4: 2}


class PatchError(Exception):
    """A variant's patch does not apply to its step as the step is today."""


class Variant(NamedTuple):
    step: int
    name: str
    title: str        # the patch's first line, after "What if: " (or "Invariant: ")
    note: str         # its next lines, before the diff, as one paragraph ("" when none)
    changes: list     # the patch's changed lines, "-old" / "+new"
    path: Path


def variants(step, kind="whatif"):
    """Return the variants of a step in stepN_*/<kind>/ (the what-if variants, or with
    kind="invariants" the invariants' patches), in a fixed order (the patches' names)."""
    found = []
    for path in sorted((REPO / FOLDERS[step] / kind).glob("*.patch")):
        text = path.read_text()
        head = text.split("\n--- ", 1)[0].splitlines()
        title = head[0].split(": ", 1)[1].strip()
        note = " ".join(line.strip() for line in head[1:] if line.strip())
        changes = [line for line in text.splitlines()
                   if line.startswith(("+", "-")) and not line.startswith(("+++", "---"))]
        found.append(Variant(step, path.stem, title, note, changes, path))
    return found


def apply_patch(patch_path, text):
    """Return text with the unified diff in patch_path applied: each hunk's old lines must be
    found exactly as they are in the patch. Raises PatchError naming the patch otherwise."""
    lines = text.splitlines(keepends=True)
    hunks = re.split(r"^@@ [^\n]*@@\n", Path(patch_path).read_text(), flags=re.M)[1:]
    offset = 0
    for number, hunk in enumerate(hunks, start=1):
        old, new = [], []
        for line in hunk.splitlines(keepends=True):
            if line.startswith("-"):
                old.append(line[1:])
            elif line.startswith("+"):
                new.append(line[1:])
            elif line.startswith(" "):
                old.append(line[1:])
                new.append(line[1:])
            elif line.strip():
                break  # the end of the diff
        at = next((i for i in range(offset, len(lines) - len(old) + 1)
                   if lines[i:i + len(old)] == old), None)
        if at is None:
            step_folder = Path(patch_path).resolve().parent.parent.name
            raise PatchError(f"{Path(patch_path).resolve().relative_to(REPO)}: hunk {number} no "
                             f"longer applies to {step_folder}/train.py (its lines changed); "
                             "update the patch to today's step")
        lines[at:at + len(old)] = new
        offset = at + len(new)
    return "".join(lines)


def lab_environment(**extra):
    """Return the environment of a lab run: offline (the hub at a closed local port, so no
    run waits for retries), on the CPU (no GPU visible), and nothing set that a step or
    launch is meant to do itself."""
    env = dict(os.environ, HF_ENDPOINT="http://127.0.0.1:9", HF_HUB_DISABLE_TELEMETRY="1",
               TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1",
               # on the CPU, where the lab's tables were measured, GPU or not: a GPU would
               # change every number (and two processes cannot share one)
               CUDA_VISIBLE_DEVICES="")
    for name in ("HF_HUB_OFFLINE", "ACCELERATE_USE_CPU", "WORLD_SIZE", "RANK", "LOCAL_RANK",
                 "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    env.update(extra)
    return env


def launch_command(step, plan_path, processes=None, launcher=None, use_cpu=True):
    """Return (command, extra environment) that runs the driver for a step's runs: python for
    one process and for step 4 (its notebook_launcher starts the processes), else the
    README's accelerate launch on `processes` CPU processes (ACCELERATE_USE_CPU=1 unless
    use_cpu=False), or torchrun; launcher="accelerate" with one process: accelerate launch
    with the course's one-process config (which gives its process one thread)."""
    n = processes or PROCESSES[step]
    driver = [str(DRIVER), str(plan_path)]
    if launcher == "accelerate" and n == 1:
        return accelerate_launch(1) + driver, {}
    if step == 4 or n == 1:
        return [sys.executable, *driver], {}
    env = {"ACCELERATE_USE_CPU": "1"} if use_cpu else {}
    if launcher == "torchrun":
        return torchrun(n) + ["--master_port", str(free_port())] + driver, env
    return accelerate_launch(n) + ["--main_process_port", str(free_port())] + driver, env


def write_plan(step, scripts, folder, flags=SHORT_RUN, processes=None):
    """Write folder/plan.json for the driver: scripts ({name: path, or (path, env), or (path,
    env, flags of its own)}) to run one after the other with the flags. Returns its path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    n = processes or PROCESSES[step]
    extra = ["--num-processes", str(n)] if step == 4 else []
    runs = []
    for name, script in scripts.items():
        path, run_env, *own = script if isinstance(script, tuple) else (script, {})
        run = {"name": name, "script": str(path), "env": run_env}
        if own:  # flags of its own
            run["flags"] = [str(f) for f in own[0]] + extra
        runs.append(run)
    step_flags = [str(f) for f in flags] + extra
    plan_path = folder / "plan.json"
    # the final weights evaluated again alone: the reference of a distributed evaluation
    plan_path.write_text(json.dumps({"folder": str(folder), "flags": step_flags, "runs": runs,
                                     "evaluate_alone": step >= 3}, indent=1))
    return plan_path


def measure_plan(plan_path, processes):
    """Return {name: measure(...)} for every run of a plan the driver has run."""
    plan = json.loads(Path(plan_path).read_text())
    return {run["name"]: measure(Path(plan["folder"]) / run["name"], processes,
                                 train_steps(run.get("flags", plan["flags"])))
            for run in plan["runs"]}


def run_within(launches, seconds):
    """Run launches ([(command, environment), ...]) side by side from the repository root
    (accelerate_course/running.py: each in a process group of its own, so that a stop signal
    reaches every process once); return [(its output, stdout and stderr together; its exit
    code), ...]. Past `seconds` every process they started is killed and
    running.TimeLimitReached raised; on a stop signal, running.Stopped."""
    with tempfile.TemporaryDirectory() as folder:
        files = [open(Path(folder) / f"launch{i}.out", "w+") for i in range(len(launches))]
        try:
            processes = running.run([(command, dict(cwd=REPO, env=env, stdout=out,
                                                    stderr=subprocess.STDOUT, text=True))
                                     for (command, env), out in zip(launches, files)], seconds)
            outputs = []
            for out in files:
                out.seek(0)
                outputs.append(out.read())
        finally:
            for out in files:
                out.close()
    return [(output, process.returncode) for output, process in zip(outputs, processes)]


class LabLaunch(NamedTuple):
    """One launch of the driver, ready to start: its plan, its command and environment."""
    plan_path: Path
    folder: Path
    processes: int  # how many processes report (1 for step 1)
    command: list
    env: dict


def prepare(step, scripts, folder, flags=SHORT_RUN, processes=None, env=None, launcher=None,
            use_cpu=True):
    """Return the LabLaunch that runs scripts ({name: path, or (path, env), or (path, env,
    flags)}) as step `step` runs (see run_scripts)."""
    n = processes or PROCESSES[step]
    plan_path = write_plan(step, scripts, folder, flags, n)
    command, launch_env = launch_command(step, plan_path, n, launcher, use_cpu)
    return LabLaunch(plan_path, Path(folder), n if step > 1 else 1, command,
                     lab_environment(**launch_env, **(env or {})))


def run_launches(launches, time_limit=900):
    """Run LabLaunches side by side; return their measurements, [{name: Run}, ...]."""
    done = run_within([(launch.command, launch.env) for launch in launches], time_limit)
    return [launched(launch.plan_path, launch.folder, launch.processes, output, code)
            for launch, (output, code) in zip(launches, done)]


def run_on_two_machines(step, scripts, folder, flags=SHORT_RUN, time_limit=900,
                        launcher="accelerate", machine_env=None):
    """Run scripts as run_scripts does, as 2 machines of 1 process each on 127.0.0.1, one
    launcher per "machine": accelerate launch --num_machines 2 on the CPU (ACCELERATE_USE_CPU=1,
    as the README's command), or torchrun --nnodes 2 (with one thread per process, which
    accelerate launch sets by itself); machine_env(rank): what else that machine's launcher
    sees (a cluster's variables). Return {name: measurement}."""
    plan_path = write_plan(step, scripts, folder, flags, 2)
    port = free_port()
    launches = []
    for rank in (0, 1):
        if launcher == "accelerate":
            words = accelerate_launch(2) + ["--num_machines", "2", "--machine_rank", str(rank),
                                            "--main_process_ip", "127.0.0.1",
                                            "--main_process_port", str(port)]
            env = {"ACCELERATE_USE_CPU": "1"}
        else:
            words = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
                     "--node_rank", str(rank), "--nproc_per_node", "1",
                     "--master_addr", "127.0.0.1", "--master_port", str(port)]
            env = {"OMP_NUM_THREADS": "1"}
        launches.append((words + [str(DRIVER), str(plan_path)],
                         lab_environment(**env, **(machine_env(rank) if machine_env else {}))))
    outputs = run_within(launches, time_limit)
    return launched(plan_path, folder, 2, "".join(output for output, _ in outputs),
                    next((code for _, code in outputs if code), 0))


def launched(plan_path, folder, processes, output, exit_code):
    """Keep a launch's output in folder/launch.out; return its measurements (see measure),
    or raise when the launch failed in a way that is not a run's own error."""
    (Path(folder) / "launch.out").write_text(output)
    measured = measure_plan(plan_path, processes)
    if exit_code != 0 and not all(m.error for m in measured.values()):
        raise RuntimeError(f"the lab's launch failed (exit {exit_code}):\n{output[-3000:]}")
    return measured


def run_scripts(step, scripts, folder, flags=SHORT_RUN, processes=None, env=None,
                launcher=None, use_cpu=True, time_limit=900):
    """Run scripts ({name: path or (path, env)}) as step `step` runs, all in one launch;
    return {name: measurement} (see measure). folder keeps every report. Past time_limit
    seconds the launch is stopped, every process of it, and running.TimeLimitReached raised."""
    return run_launches([prepare(step, scripts, folder, flags, processes, env, launcher,
                                 use_cpu)], time_limit)[0]


def train_steps(flags):
    """Return the number of optimizer steps a run with these flags makes (--max-train-steps),
    or None for a full run."""
    flags = [str(f) for f in flags]
    return int(flags[flags.index("--max-train-steps") + 1]) if "--max-train-steps" in flags else None


def variant_scripts(step, names=None, folder=None):
    """Write the step and its variants (all, or those named) as scripts into folder; return
    {name: path}, the step itself as 'lesson' first."""
    folder = Path(folder or tempfile.mkdtemp(prefix=f"whatif-step{step}-"))
    step_text = (REPO / FOLDERS[step] / "train.py").read_text()
    scripts = {"lesson": REPO / FOLDERS[step] / "train.py"}
    for variant in variants(step):
        if names is not None and variant.name not in names:
            continue
        path = folder / "scripts" / variant.name / "train.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(apply_patch(variant.path, step_text))
        scripts[variant.name] = path
    return scripts


@dataclass(frozen=True)
class Run:
    """What one run of a step (or of a variant, an exercise, a mistake) measured, from the
    reports its processes wrote (accelerate_course/lab_driver.py). "rank 0" is the process of
    global rank 0; a list "by process" has one entry per process that reported."""

    error: str | None  # the line the run stopped with (an `error:` line, or an exception), or None
    processes: int  # how many processes reported (those that got as far as an Accelerator)
    launched: int  # how many processes the launch started
    alone: int  # of several launched, how many said they were 1 of 1 (not joined)
    num_processes: int | None  # what rank 0's Accelerator said
    distributed_type: str | None  # rank 0's, e.g. "DistributedType.MULTI_CPU"
    scored: list  # pairs each call of the metric's compute saw, by process
    accuracy: list  # each of those computes' accuracy (rounded to 4 places)
    f1: list  # and F1
    writes: int  # metrics.json writes, all processes together
    printed: int  # processes that printed the result line ("validation: accuracy ...")
    bars: int  # processes that showed the training progress bar
    weights_equal: bool  # every process ended with the same weights
    left_group: bool | None  # every process left the process group (None: no Accelerator)
    losses: list | None  # the training losses of the metrics.json rank 0 wrote
    predictions: list | None  # the predictions rank 0 wrote
    alone_predictions: list | None  # rank 0's final weights evaluated once more, alone
    grad_norm: float | None  # rank 0's gradient norm at its first optimizer step
    learning_rates: list  # rank 0's learning rate at each optimizer step
    gathered: int | None  # how many predictions were gathered (eval_gathered), when written
    models_created_inside: int  # models created inside the launched processes
    models_created_before: int  # models created before the launch (in the launching process)
    lengths: list  # the distinct token lengths of the training batches
    eval_forwarded: list  # pairs each process put through the model in eval mode, by rank
    weights: str | None  # rank 0's final weights, hashed
    seconds: float  # training time (rank 0's train_seconds), else the run's wall time
    eval_seconds: float | None  # evaluation time (rank 0's eval_seconds), when written
    mixed_precision: str | None  # what rank 0's Accelerator ran in ("no", "bf16", "fp16")
    grad_scaler: str | None  # the loss scaler rank 0's Accelerator made (fp16: GradScaler)


def measure(run_folder, processes_launched, train_steps):
    """Return the Run that a run's reports (rank<R>.json, rank<R>.out, run0.json) describe."""
    ranks = [json.loads(p.read_text()) for p in sorted(run_folder.glob("rank*.json"))]
    outcome = json.loads((run_folder / "run0.json").read_text()) \
        if (run_folder / "run0.json").exists() else {"error": "no report", "seconds": 0}
    accelerate_ranks = [r for r in ranks if r["num_processes"] is not None]
    rank0 = next((r for r in ranks if r["rank"] == 0), ranks[0] if ranks else {})
    outputs = [p.read_text(errors="replace") for p in sorted(run_folder.glob("rank*.out"))]
    writes = [w for r in ranks for w in r.get("writes", [])]
    written = rank0.get("writes") or [{}]
    results = [m for r in ranks for m in r.get("metric_results", [])]
    return Run(
        error=outcome["error"],
        processes=len(accelerate_ranks) or len(ranks),
        launched=processes_launched,
        alone=sum(1 for r in ranks if r["num_processes"] == 1) if processes_launched > 1 else 0,
        num_processes=rank0.get("num_processes"),
        distributed_type=rank0.get("distributed_type"),
        scored=[m["pairs"] for m in results],
        accuracy=[round(m["accuracy"], 4) for m in results],
        f1=[round(m["f1"], 4) for m in results],
        writes=len(writes),
        printed=sum(1 for text in outputs if "validation: accuracy" in text),
        # the training bar's total is the number of optimizer steps (not the weights' loading bar)
        bars=sum(1 for text in outputs
                 if re.search(rf"\b{train_steps or '[0-9]+'}/{train_steps or '[0-9]+'} \[", text)),
        weights_equal=len({r["weights"] for r in ranks if r.get("weights")}) <= 1,
        left_group=all(r.get("left_process_group") for r in accelerate_ranks)
        if accelerate_ranks else None,
        losses=written[-1].get("train_losses"),
        predictions=written[-1].get("predictions"),
        alone_predictions=rank0.get("alone_predictions"),
        grad_norm=(rank0.get("grad_norms") or [None])[0],
        learning_rates=rank0.get("learning_rates") or [],
        gathered=written[-1].get("eval_gathered"),
        models_created_inside=sum(sum(r.get("created_inside", [])) for r in ranks),
        # made before the launch: in the launching process, whose record every forked
        # process inherits (so it shows in each of their reports: counted once)
        models_created_before=max((len(r.get("created_inside", [])) -
                                   sum(r.get("created_inside", [])) for r in ranks), default=0),
        lengths=sorted({n for r in ranks for n in r.get("lengths", [])}),
        eval_forwarded=[r.get("eval_forwarded", 0) for r in sorted(ranks, key=lambda r: r["rank"])],
        weights=rank0.get("weights"),
        seconds=written[-1].get("train_seconds", outcome.get("seconds")),
        eval_seconds=written[-1].get("eval_seconds"),
        mixed_precision=rank0.get("mixed_precision"),
        grad_scaler=rank0.get("grad_scaler"),
    )


class Symptom(NamedTuple):
    name: str
    hint: str  # what it means, said from the measurement


def process_symptoms(run):
    """Return what is wrong with a run on its own (an empty list: nothing), each said from the
    run's own numbers. These are the what-if table's verdicts and make check's hints."""
    if run.error:
        # gloo's error line goes on with advice for its own developers: its first sentence
        error = re.sub(r"(by peer \S+)\. This is typically caused.*", r"\1", run.error)
        return [Symptom("refused", f"the run stopped: {error}")]
    found = []
    if run.alone:
        same = " (the same training, done by each)" if run.weights_equal else ""
        found.append(Symptom("alone", f"each process reports 1 process ({run.alone} of "
                             f"{run.launched}): they did not join one group, each trained "
                             f"alone on all the data{same}"))
    if not run.weights_equal:
        found.append(Symptom("weights_differ", "the processes ended with different weights: "
                             "each trained its own copy of the model"))
    scored = run.scored
    if scored and max(scored) > VALIDATION_PAIRS:
        found.append(Symptom("tail_counted", f"your run scored {max(scored)} samples for "
                             f"{VALIDATION_PAIRS} pairs: the duplicated tail was counted"))
    elif scored and max(scored) < VALIDATION_PAIRS:
        tail = sum(scored) - VALIDATION_PAIRS
        found.append(Symptom("own_share", "each process scored only its own share: "
                             f"{' and '.join(map(str, scored))} pairs, which together are the "
                             f"{VALIDATION_PAIRS}" + (f" and a duplicated tail of {tail}"
                                                      if tail > 0 else "")))
    if run.writes > 1:
        found.append(Symptom("many_writers", f"{run.writes} processes wrote metrics.json"))
    if run.printed > 1:
        found.append(Symptom("many_printers", f"{run.printed} processes printed the result"))
    if run.bars > 1:
        found.append(Symptom("many_bars", f"{run.bars} progress bars, one per process"))
    return found


def symptoms(run, lesson):
    """Return the Symptoms of a run that the lesson's run of the same step does not have; when
    there are none, how its training or predictions differ from the lesson's, if they do."""
    if run.error:
        return process_symptoms(run)
    lesson_has = {s.name for s in process_symptoms(lesson)}
    found = [s for s in process_symptoms(run) if s.name not in lesson_has]
    if lesson.left_group and run.left_group is False:
        found.append(Symptom("stays_in_group", "the same numbers, but the processes exited "
                             "while still in the process group (the lesson's leave it)"))
    if found:
        return found
    if run.losses != lesson.losses and run.predictions == lesson.predictions \
            and close(run.losses, lesson.losses):
        found.append(Symptom("float_order", "identical predictions, and losses within a "
                             f"relative {TOLERANCE:g} of the lesson's, not equal"))
    elif run.losses != lesson.losses:
        first = next((i for i, (a, b) in enumerate(zip(run.losses, lesson.losses))
                      if a != b), len(lesson.losses))
        found.append(Symptom("training_differs", f"training differs from optimizer step "
                             f"{first + 1} on: mean loss of the last 10 steps "
                             f"{mean(run.losses[-10:]):.4f} (lesson "
                             f"{mean(lesson.losses[-10:]):.4f})"
                             + learning_rate_note(run, lesson)))
    elif run.predictions != lesson.predictions:
        changed = sum(a != b for a, b in zip(run.predictions, lesson.predictions))
        found.append(Symptom("predictions_differ", f"the same training, but {changed} of "
                             f"{VALIDATION_PAIRS} predictions differ"))
    return found


def learning_rate_note(run, lesson):
    """Return ', learning rate ... (lesson ...)' where the run's schedule differs, else ''."""
    mine, theirs = run.learning_rates, lesson.learning_rates
    if not mine or mine == theirs:
        return ""
    middle = len(mine) // 2
    return (f"; learning rate at steps {middle + 1} and {len(mine)}: {mine[middle]:.2e} and "
            f"{mine[-1]:.2e} (lesson {theirs[middle]:.2e} and {theirs[-1]:.2e})")


# two runs that compute the same function in other tensor shapes add their floats in another
# order: their losses then agree to about 1e-6 relative; 1e-4 leaves room, and any real
# change of the training (a step, a learning rate, a gradient) moves them by far more
TOLERANCE = 1e-4


def close(a, b):
    """Return True if two loss lists have the same length and agree to TOLERANCE (relative)."""
    return len(a) == len(b) and all(abs(x - y) <= TOLERANCE * abs(y) for x, y in zip(a, b))


def mean(values):
    return sum(values) / len(values) if values else float("nan")


def checkpoint_without_dropout(folder):
    """Return a copy of the embedded checkpoint, in folder, whose config turns dropout off:
    two runs that differ only in tensor shapes (padding) then compute the same function."""
    import shutil
    from common.checkpoint import EMBEDDED_CHECKPOINT
    target = Path(folder) / "bert-without-dropout"
    if not target.exists():
        shutil.copytree(EMBEDDED_CHECKPOINT, target)
        config = json.loads((target / "config.json").read_text())
        config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                      classifier_dropout=0.0)
        (target / "config.json").write_text(json.dumps(config))
    return target


def verdict(run, lesson, is_lesson=False):
    """Return the what-if table's verdict for a run: for the lesson, what it leaves wrong on
    its own ('-' when nothing); for a variant, how it differs from the lesson."""
    if is_lesson:
        return "; ".join(s.hint for s in process_symptoms(run)) or "-"
    found = symptoms(run, lesson)
    if not found:
        return "same as the lesson: identical losses, predictions and metrics"
    return "; ".join(s.hint for s in found)


def measured_cells(run):
    """Return the table's 'measured' cells for a run (a list of short phrases)."""
    if run.error:
        return ["stopped after training" if run.learning_rates else "stopped before training"]
    cells = [f"{run.processes} process{'es' if run.processes != 1 else ''}"
             + (f" ({run.alone} alone)" if run.alone else "")]
    scored = run.scored
    if scored:
        cells.append("scored by each process: " + ", ".join(map(str, scored)) + " pairs")
        cells.append("accuracy " + " / ".join(f"{a:.4f}" for a in run.accuracy))
    cells.append(f"{run.writes} metrics.json write{'s' if run.writes != 1 else ''}")
    if run.processes > 1:
        cells.append("weights " + ("equal" if run.weights_equal else "differ"))
    return cells


class ExtraRun(NamedTuple):
    """A run beside the variants: the lesson or a variant (base) measured again under a
    setting where the lesson line matters more than in the course's own run."""
    base: str
    setting: str  # said in the table: "ACCELERATE_GRADIENT_ACCUMULATION_STEPS=2"
    env: dict

    @property
    def name(self):
        return f"{self.base}, with {self.setting}"


EXTRA_RUNS = {
    2: [ExtraRun("lesson", "ACCELERATE_GRADIENT_ACCUMULATION_STEPS=2",
                 {"ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "2"}),
        ExtraRun("loss_backward", "ACCELERATE_GRADIENT_ACCUMULATION_STEPS=2",
                 {"ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "2"})],
}
# variants that run in a launch of their own: a collective only some of their processes
# join would leave the others of a shared launch waiting in the next run's collectives
OWN_LAUNCH = {3: {"main_process_evaluates_alone"}}


class Row(NamedTuple):
    """One row of a step's what-if table, as data (the commands render it)."""
    variant: str  # the variant's name, "lesson", or an extra run's name
    change: list  # its changed lines, at most 3 ("- old", "+ new"); [] for the lesson
    more: int  # how many changed lines are not shown
    setting: str | None  # an extra run's setting
    measured: list  # what was measured (measured_cells)
    verdict: str  # against the lesson ("-": the lesson, with nothing wrong on its own)
    seconds: float  # training time


# step 4's processes get one thread each, as the lesson's do (Accelerate gives each gloo
# process cores / processes threads): without it a variant whose processes do not join gets
# the default threads in each process, and on 2 cores they slow each other down many times
# over (measured once: 74 s instead of 4 s), which no test can afford
LAUNCH_ENV = {4: {"OMP_NUM_THREADS": "1"}}


def step4_flags(folder):
    """Return the flags of step 4's lab runs: the short run, on a copy of the checkpoint with
    dropout off, so that step 4 and its variants can be compared with step 3 exactly (with
    dropout on, padding to 128 tokens draws other dropout masks: another seed, in effect)."""
    return [*SHORT_RUN, "--checkpoint", str(checkpoint_without_dropout(folder))]


class WhatIf(NamedTuple):
    """What the what-if lab measured for a step."""
    rows: list  # the what-if table's Rows
    invariant_rows: list  # the invariants table's rows (accelerate_course/invariants.py)
    measured: dict  # {run name: Run}: the lesson as "lesson", every variant, extra, invariant


def what_if(step, folder, names=None, extra=None, one=None):
    """Run a step and its variants (all, or those named), its invariants' runs, and any
    extra scripts ({name: path, or (path, env, flags)}: in the step's launch, not in the
    tables); return a WhatIf. The variants, the invariants' runs of 2 processes and the
    extras share one launch; then, side by side, the invariants' runs of 1 process (one:
    {name: (path, env, flags)} that launch runs besides) and the variants of OWN_LAUNCH; then
    the resumed runs, which read a state saved in those."""
    from accelerate_course import invariants
    folder = Path(folder)
    scripts = variant_scripts(step, names, folder)
    alone = {name: scripts.pop(name) for name in OWN_LAUNCH.get(step, set()) & set(scripts)}
    extras = [run for run in EXTRA_RUNS.get(step, []) if run.base in scripts]
    for run in extras:
        scripts[run.name] = (scripts[run.base], run.env)
    in_table = [*scripts, *alone]
    by_launch = invariants.launches(step, folder / "invariants", lambda name: (
        folder / ("runs" if "2 processes" in name else "invariants/one") / name / "output"))
    scripts.update(by_launch.get("two", {}))
    scripts.update(extra or {})
    flags = step4_flags(folder) if step == 4 else SHORT_RUN
    # step 3's processes are launched as a student first launches them on a machine without a
    # GPU, without ACCELERATE_USE_CPU=1: the course's launch check joins them
    measured = run_scripts(step, scripts, folder / "runs", flags, env=LAUNCH_ENV.get(step),
                           use_cpu=step != 3)
    rounds = [
        [prepare(step, {**by_launch.get("one", {}), **(one or {})}, folder / "invariants/one",
                 processes=1, launcher="accelerate")] if by_launch.get("one") or one else [],
        [prepare(step, alone, folder / "alone", flags, env=LAUNCH_ENV.get(step),
                 use_cpu=step != 3)] if alone else [],
    ]
    after = [prepare(step, by_launch[key], folder / "invariants" / key.replace(" ", "-"),
                     processes=2 if key == "after two" else 1,
                     launcher=None if key == "after two" else "accelerate")
             for key in ("after two", "after one") if key in by_launch]
    for together in ([launch for group in rounds for launch in group], after):
        for found in run_launches(together) if together else []:
            measured.update(found)
    by_name = {v.name: v for v in variants(step)}
    extra_by_name = {run.name: run for run in extras}
    rows = []
    for name in in_table:
        run = measured[name]
        extra_run = extra_by_name.get(name)
        base = extra_run.base if extra_run else name
        is_lesson = base == "lesson"
        # an extra run is compared with the lesson under the same setting
        reference = measured[ExtraRun("lesson", extra_run.setting, {}).name] \
            if extra_run else measured["lesson"]
        changes = [] if is_lesson else by_name[base].changes
        text = verdict(run, reference, is_lesson and not extra_run)
        if extra_run and not is_lesson and run.grad_norm and reference.grad_norm:
            text += (f"; gradient norm at the first step {run.grad_norm:.4f}, the lesson's "
                     f"{reference.grad_norm:.4f}")
        elif extra_run and is_lesson and run.grad_norm:
            text = f"gradient norm at the first step {run.grad_norm:.4f}"
        rows.append(Row(name, [f"{line[0]} {line[1:].strip()}" for line in changes[:3]],
                        max(0, len(changes) - 3), extra_run.setting if extra_run else None,
                        measured_cells(run), text, run.seconds))
    return WhatIf(rows, invariants.rows(step, measured, measured["lesson"]), measured)


