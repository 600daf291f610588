"""The lab's runs: scripts (a step, its variants, an exercise) run as their step runs, offline
and on the CPU, each measured (accelerate_course/measuring.py). A batch is the scripts of one
launch of accelerate_course/lab_driver.py, which runs them one after the other in the same
processes; batches run side by side within a time limit. How a step's batch is launched,
and on how many processes, comes from its record (accelerate_course/steps.py) through the
course's one command builder (accelerate_course/commands.py).
"""

import json
import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import NamedTuple

from accelerate_course import running
from accelerate_course.commands import command_for
from accelerate_course.measuring import measure_batch
from accelerate_course.steps import REPO, STEPS
from common.cli import free_port

DRIVER = Path(__file__).resolve().parent / "lab_driver.py"


# a short run: enough optimizer steps for a missing line to show, few enough for class
SHORT_RUN = ["--max-train-steps", "30"]


def lab_environment(**extra):
    """Return the environment of a lab run: offline (the hub at a closed local port, so no
    run waits for retries), on the CPU (no GPU visible), and nothing set that a step or
    launch is meant to do itself."""
    env = dict(
        os.environ,
        HF_ENDPOINT="http://127.0.0.1:9",
        HF_HUB_DISABLE_TELEMETRY="1",
        TOKENIZERS_PARALLELISM="false",
        PYTHONUNBUFFERED="1",
        # on the CPU, where the lab's tables were measured, GPU or not: a GPU would
        # change every number (and two processes cannot share one)
        CUDA_VISIBLE_DEVICES="",
    )
    for name in (
        "HF_HUB_OFFLINE",
        "ACCELERATE_USE_CPU",
        "WORLD_SIZE",
        "RANK",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
    ):
        env.pop(name, None)
    env.update(extra)
    return env


def how_launched(step):
    """Return, in words, how a step's lab runs are launched (the what-if lab's heading), from
    its record: "2 CPU processes (accelerate launch)"."""
    record = STEPS[step]
    n = record.lab_processes
    if n == 1:
        return "1 process (python)"
    how = "notebook_launcher" if record.started_by == "itself" else "accelerate launch"
    return f"{n} CPU processes ({how})" + ("" if record.lab_dropout else ", dropout off")


def write_batch(step, scripts, folder, flags=SHORT_RUN, processes=None, evaluate_alone=None):
    """Write folder/batch.json for the driver: scripts ({name: path, or (path, env), or (path,
    env, flags of its own)}) to run one after the other with the flags; each run's final
    weights evaluated again alone when evaluate_alone (None: from step 3 on, where an
    evaluation is distributed). Returns its path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    n = processes or STEPS[step].lab_processes
    extra = STEPS[step].process_flags(n)
    runs = []
    for name, script in scripts.items():
        path, run_env, *own = script if isinstance(script, tuple) else (script, {})
        run = {"name": name, "script": str(path), "env": run_env}
        if own:  # flags of its own
            run["flags"] = [str(f) for f in own[0]] + extra
        runs.append(run)
    step_flags = [str(f) for f in flags] + extra
    batch_path = folder / "batch.json"
    # the final weights evaluated again alone: the reference of a distributed evaluation
    alone = step >= 3 if evaluate_alone is None else evaluate_alone
    batch_path.write_text(
        json.dumps(
            {"folder": str(folder), "flags": step_flags, "runs": runs, "evaluate_alone": alone},
            indent=1,
        )
    )
    return batch_path


def run_within(launches, seconds, popen=None):
    """Run launches ([(command, environment), ...]) side by side from the repository root
    (accelerate_course/running.py: each in a process group of its own, so that a stop signal
    reaches every process once); return [(its output, stdout and stderr together; its exit
    code), ...]. Past `seconds` every process they started is killed and
    running.TimeLimitReached raised; on a stop signal, running.Stopped. popen: Popen's extra
    arguments (a graded run's user: accelerate_course/sandbox.py), its "environment" a
    function that turns each launch's environment into the one it gets."""
    popen = dict(popen or {})
    environment = popen.pop("environment", lambda env: env)
    with tempfile.TemporaryDirectory() as folder:
        files = [open(Path(folder) / f"launch{i}.out", "w+") for i in range(len(launches))]
        try:
            processes = running.run(
                [
                    (
                        command,
                        dict(
                            cwd=REPO,
                            env=environment(env),
                            stdout=out,
                            stderr=subprocess.STDOUT,
                            text=True,
                            **popen,
                        ),
                    )
                    for (command, env), out in zip(launches, files)
                ],
                seconds,
            )
            outputs = []
            for out in files:
                out.seek(0)
                outputs.append(out.read())
        finally:
            for out in files:
                out.close()
    return [(output, process.returncode) for output, process in zip(outputs, processes)]


class LabBatch(NamedTuple):
    """One launch of the driver, ready to start: its batch file, its command and environment."""

    batch_path: Path
    folder: Path
    processes: int  # how many processes report (1 for step 1)
    command: list
    env: dict


def lab_batch(
    step,
    scripts,
    folder,
    flags=SHORT_RUN,
    processes=None,
    env=None,
    launcher=None,
    use_cpu=True,
    evaluate_alone=None,
):
    """Return the LabBatch that runs scripts ({name: path, or (path, env), or (path, env,
    flags)}) as step `step` runs (see run_scripts): on `processes` processes (None: the
    step's lab_processes), started as the step's record says (commands.command_for: python,
    or the README's accelerate launch on CPU processes, or torchrun; launcher="accelerate"
    with one process: accelerate launch with the course's one-process config, which gives its
    process one thread), with ACCELERATE_USE_CPU=1 for a launcher's processes unless
    use_cpu=False, and the step's lab_env."""
    record = STEPS[step]
    n = processes or record.lab_processes
    batch_path = write_batch(step, scripts, folder, flags, n, evaluate_alone)
    one = n == 1 and launcher != "accelerate"
    # a free port of its own for each launch of several processes: batches run side by side
    port = free_port() if n > 1 and record.started_by != "itself" else None
    command = command_for(
        step, DRIVER, n, launcher if launcher or one else "accelerate", port=port
    ) + [str(batch_path)]
    says_cpu = use_cpu and n > 1 and record.started_by != "itself"
    return LabBatch(
        batch_path,
        Path(folder),
        n if record.joins_processes else 1,
        command,
        lab_environment(
            **{**({"ACCELERATE_USE_CPU": "1"} if says_cpu else {}), **record.lab_env, **(env or {})}
        ),
    )


def run_batches(batches, time_limit=900, popen=None):
    """Run LabBatches side by side; return their measurements, [{name: Run}, ...]."""
    done = run_within([(batch.command, batch.env) for batch in batches], time_limit, popen)
    return [
        measured_batch(batch.batch_path, batch.folder, batch.processes, output, code)
        for batch, (output, code) in zip(batches, done)
    ]


def run_on_two_machines(
    step,
    scripts,
    folder,
    flags=SHORT_RUN,
    time_limit=900,
    launcher="accelerate",
    machine_env=None,
    popen=None,
):
    """Run scripts as run_scripts does, as 2 machines of 1 process each on 127.0.0.1, one
    launcher per "machine": accelerate launch --num_machines 2 or torchrun --nnodes 2, on the
    CPU (ACCELERATE_USE_CPU=1, as the README's command; torchrun with one thread per process,
    which accelerate launch sets by itself); machine_env(rank): what else that machine's
    launcher sees (a cluster's variables). Return {name: measurement}."""
    batch_path = write_batch(step, scripts, folder, flags, 2)
    port = free_port()
    env = {
        "ACCELERATE_USE_CPU": "1",
        **({} if launcher == "accelerate" else {"OMP_NUM_THREADS": "1"}),
    }
    launches = [
        (
            command_for(step, DRIVER, 2, launcher, machine=(rank, port)) + [str(batch_path)],
            lab_environment(**env, **(machine_env(rank) if machine_env else {})),
        )
        for rank in (0, 1)
    ]
    outputs = run_within(launches, time_limit, popen)
    return measured_batch(
        batch_path,
        folder,
        2,
        "".join(output for output, _ in outputs),
        next((code for _, code in outputs if code), 0),
    )


class LaunchFailed(RuntimeError):
    """A launch failed in a way that is not a run's own error (a process killed, or ended
    before its driver reported); last_line: the last line its processes printed that is not
    a launcher's traceback."""

    def __init__(self, exit_code, output):
        super().__init__(f"the lab's launch failed (exit {exit_code}):\n{output[-3000:]}")
        self.last_line = last_own_line(output) or f"exit code {exit_code}"


def last_own_line(output):
    """Return the last line of a launch's output that a run said itself: an `error:` line
    (the course's one line), else the last exception line, never the launcher's own report
    (accelerate launch and torchrun end a failed launch with a traceback of their own)."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("error: "):
            return line
    launcher = (
        "subprocess.CalledProcessError",
        "torch.distributed.elastic",
        "ChildFailedError",
        "accelerate.commands",
    )
    for line in reversed(lines):
        if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt): ", line) and not any(
            word in line for word in launcher
        ):
            return line
    return None


def measured_batch(batch_path, folder, processes, output, exit_code):
    """Keep a batch's output in folder/launch.out; return its measurements (see measure),
    or raise LaunchFailed when the launch failed in a way that is not a run's own error."""
    (Path(folder) / "launch.out").write_text(output)
    measured = measure_batch(batch_path, processes)
    if exit_code != 0 and not all(m.error for m in measured.values()):
        raise LaunchFailed(exit_code, output)
    return measured


def run_scripts(
    step,
    scripts,
    folder,
    flags=SHORT_RUN,
    processes=None,
    env=None,
    launcher=None,
    use_cpu=True,
    time_limit=900,
    evaluate_alone=None,
    popen=None,
):
    """Run scripts ({name: path or (path, env)}) as step `step` runs, all in one launch;
    return {name: measurement} (see measure). folder keeps every report. Past time_limit
    seconds the launch is stopped, every process of it, and running.TimeLimitReached raised.
    popen: see run_within."""
    return run_batches(
        [
            lab_batch(
                step, scripts, folder, flags, processes, env, launcher, use_cpu, evaluate_alone
            )
        ],
        time_limit,
        popen,
    )[0]


def checkpoint_without_dropout(folder):
    """Return a copy of the embedded checkpoint, in folder, whose config turns dropout off:
    two runs that differ only in tensor shapes (padding) then compute the same function."""
    import shutil

    from common.checkpoint import EMBEDDED_CHECKPOINT

    target = Path(folder) / "bert-without-dropout"
    if not target.exists():
        shutil.copytree(EMBEDDED_CHECKPOINT, target)
        config = json.loads((target / "config.json").read_text())
        config.update(
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout=0.0
        )
        (target / "config.json").write_text(json.dumps(config))
    return target


def lab_flags(step, folder):
    """Return the flags of a step's lab runs: the short run, on a copy of the checkpoint with
    dropout off where its record says (step 4: so that it and its variants can be compared
    with step 3 exactly; with dropout on, padding to 128 tokens draws other dropout masks:
    another seed, in effect)."""
    if STEPS[step].lab_dropout:
        return list(SHORT_RUN)
    return [*SHORT_RUN, "--checkpoint", str(checkpoint_without_dropout(folder))]
