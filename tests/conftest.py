"""Helpers shared by the tests: run a step script as a real subprocess and read its results,
and the lab's runs (tools/lab.py), made once per session and shared by the tests that read
them: the comparison tests of each step, the what-if tests and the grader's tests."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from tools import check, exercise, lab  # noqa: E402
STEPS = {
    1: REPO / "step1_plain_loop" / "train.py",
    2: REPO / "step2_accelerate" / "train.py",
    3: REPO / "step3_distributed_eval" / "train.py",
    4: REPO / "step4_tpu_notebook" / "train.py",
}
# A short run: enough optimizer steps that training visibly moves the weights, few enough
# that each run takes seconds. Evaluation always covers the whole validation split.
SHORT_RUN = ["--max-train-steps", "60"]


def offline_env(**extra):
    """Return an environment in which the hub is unreachable at once (a closed local port),
    so no test waits for network retries, whatever the machine.

    It sets nothing that a step or a launch command is meant to do by itself: in particular
    not ACCELERATE_USE_CPU, which step 4's Accelerator(cpu=...) line and the README's step 3
    command each set in their own way (a test passes it where the command it runs has it)."""
    env = dict(os.environ)
    env.update(HF_ENDPOINT="http://127.0.0.1:9", HF_HUB_DISABLE_TELEMETRY="1",
               TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1")
    for name in ("HF_HUB_OFFLINE", "ACCELERATE_USE_CPU", "WORLD_SIZE", "RANK", "LOCAL_RANK",
                 "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    env.update(extra)
    return env


def run_command(command, timeout=600, **env):
    """Run a command from the repository root; return the CompletedProcess (text output)."""
    return subprocess.run(command, cwd=REPO, env=offline_env(**env), capture_output=True,
                          text=True, timeout=timeout)


def run_step(step, output_dir, *args, **env):
    """Run step N's train.py with python; return the CompletedProcess."""
    return run_command([sys.executable, str(STEPS[step]), "--output-dir", str(output_dir),
                        *args], **env)


def read_metrics(output_dir):
    """Return the metrics.json a run wrote into output_dir."""
    return json.loads((Path(output_dir) / "metrics.json").read_text())


def assert_ok(result):
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"


@pytest.fixture(scope="session")
def default_runs(tmp_path_factory):
    """Full default runs (3 epochs, 1,377 optimizer steps) of steps 1 and 2, once per session."""
    runs = {}
    for step in (1, 2):
        out = tmp_path_factory.mktemp(f"step{step}_default")
        assert_ok(run_step(step, out))
        runs[step] = read_metrics(out)
    return runs


def free_port():
    """Return a TCP port on 127.0.0.1 that nothing listens on right now."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def accelerate_launch_command(num_processes, script_and_args, num_machines=1, machine_rank=0,
                              port=None):
    """Return the README's command that launches a script on real CPU processes (gloo).

    Run it with ACCELERATE_USE_CPU=1 in the environment, as the README does (use
    run_cpu_launch): without it, --multi_gpu on a CPU-only machine starts processes that each
    believe they are alone (the course's steps notice and join them; a plain script would
    not), and without --multi_gpu only one process starts. Every setting is on the command
    line, so an `accelerate config` file on the machine cannot change what runs.
    """
    command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu",
               "--num_processes", str(num_processes), "--num_machines", str(num_machines),
               "--mixed_precision", "no", "--dynamo_backend", "no",
               "--main_process_port", str(port or free_port())]
    if num_machines > 1:
        command += ["--machine_rank", str(machine_rank), "--main_process_ip", "127.0.0.1"]
    return command + [str(part) for part in script_and_args]


def run_cpu_launch(num_processes, script_and_args, **launch):
    """Run accelerate_launch_command(...) with ACCELERATE_USE_CPU=1, as the README types it."""
    return run_command(accelerate_launch_command(num_processes, script_and_args, **launch),
                       ACCELERATE_USE_CPU="1")


@pytest.fixture(scope="session")
def checkpoint_without_dropout(tmp_path_factory):
    """A copy of the embedded checkpoint whose config turns dropout off: two runs that differ
    only in tensor shapes (padding) then compute the same function."""
    return lab.checkpoint_without_dropout(tmp_path_factory.mktemp("no_dropout"))


class LabRuns:
    """The lab's runs of one step, made when first asked for: the step and its what-if
    variants in one launch (with the step's exercise beside them), and what grading needs
    besides (tools/check.py: step 2 on 1 process beside step 1 and step 3, step 3 as step
    4's reference). Short runs: lab.SHORT_RUN."""

    def __init__(self, step, folder):
        self.step, self.folder = step, folder
        extra = {}
        if step > 1:
            path = folder / "exercise" / "train.py"
            path.parent.mkdir(parents=True)
            path.write_text(exercise.exercise(step))
            extra["exercise"] = path
        self.rows, self.measured = lab.what_if(step, folder, extra=extra)
        self.scripts = {v.name: folder / "scripts" / v.name / "train.py" for v in lab.variants(step)}
        self.scripts.update(extra)
        self.graded = {}
        if step > 1:
            if step == 2:  # step 3 too, on one process: it must equal step 2 there
                self.scripts_one = {**self.scripts, "step3": STEPS[3]}
            self.runs = check.runs_for(step, getattr(self, "scripts_one", self.scripts), folder,
                                       measured=self.measured)
            names = ["lesson", *self.scripts]
            self.graded = {name: check.grade(step, name, self.runs) for name in names}

    def __getitem__(self, name):
        return self.measured[name]


@pytest.fixture(scope="session")
def lab_runs(tmp_path_factory):
    """lab_runs(step) -> LabRuns of that step, made once per session."""
    made = {}

    def get(step):
        if step not in made:
            made[step] = LabRuns(step, tmp_path_factory.mktemp(f"lab_step{step}"))
        return made[step]

    return get


def pytest_collection_modifyitems(items):
    """A test parametrized by `step` belongs to that step's lesson: make test STEP=N runs it."""
    for item in items:
        step = getattr(item, "callspec", None) and item.callspec.params.get("step")
        if step in (1, 2, 3, 4):
            item.add_marker(getattr(pytest.mark, f"step{step}"))


# (kind, case, the error line) of every bad input the tests refused: printed at the end
BAD_INPUT_ROWS = []


def pytest_terminal_summary(terminalreporter):
    """Print the bad-input table: one line per malformed input, with the line it got."""
    if not BAD_INPUT_ROWS:
        return
    terminalreporter.section(f"bad input: {len(BAD_INPUT_ROWS)} cases, each refused in one line")
    width = max(len(name) for _, name, _ in BAD_INPUT_ROWS)
    for kind, name, line in sorted(BAD_INPUT_ROWS):  # the tests' temporary folders as <tmp>
        line = re.sub(r"/tmp/pytest-of-[^/]+/pytest-\d+/[^/]+", "<tmp>", line)
        terminalreporter.write_line(f"{kind:<10} {name:<{width}}  {line}")
