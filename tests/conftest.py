"""Helpers shared by the tests: run a step script as a real subprocess and read its results;
the lab's runs (tests/helpers/shared_runs.py decides which share a launch), made once per
session for the comparison tests of each step, the what-if tests and the grader's tests."""

import json
import multiprocessing.process
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
import step3_mistakes  # tests/helpers/ (pytest's pythonpath, in pyproject.toml)
from ahead import THREAD, Ahead  # tests/helpers/
from shared_runs import SharedRuns  # tests/helpers/

from accelerate_course import running
from accelerate_course.lab_runs import SHORT_RUN, lab_environment, run_within
from accelerate_course.lab_runs import checkpoint_without_dropout as copy_without_dropout
from accelerate_course.steps import STEPS as RECORDS
from accelerate_course.steps import TRAIN_PY

REPO = Path(__file__).resolve().parent.parent
GRID = REPO / "tests" / "helpers" / "truncation_grid.py"
STEPS = TRAIN_PY  # {step: its train.py}, from accelerate_course/steps.py


def pytest_configure(config):
    """Declare one marker per step of the course's records (make test STEP=N selects it)."""
    for number in RECORDS:
        config.addinivalue_line(
            "markers",
            f"step{number}: step {number}'s comparison and what-if tests (make test STEP={number})",
        )


def port_is_taken(port):
    """Return whether something on this machine holds the TCP port (it cannot be bound)."""
    with socket.socket() as probe:
        try:
            probe.bind(("", port))
        except OSError:
            return True
    return False


@pytest.fixture(scope="session", autouse=True)
def port_29500_taken():
    """Hold port 29500 for the whole session, as another user's launch holds it on a shared
    server: it is the default port of accelerate launch, torchrun and notebook_launcher, and
    every launch the tests make (the lab's, the grader's, the steps' own) must run without
    it. If something else holds it already, so much the better."""
    holder = socket.socket()
    try:
        holder.bind(("", 29500))
        holder.listen()
    except OSError:
        pass  # held by someone else
    assert port_is_taken(29500)
    yield
    holder.close()


def enterable_by_others(path):
    """Let other users enter path and every folder above it (o+x), as they may enter a
    runner's /home/runner/work, Gradescope's /autograder or a Colab runtime's /content: where
    the tests run as root, the grader runs a graded file as a user of its own, who must read
    the course and its Python (pytest makes its temporary folders for their owner alone)."""
    for folder in [Path(path), *Path(path).parents]:
        folder.chmod(folder.stat().st_mode | 0o001)


def offline_env(**extra):
    """Return an environment in which the hub is unreachable at once (a closed local port), so
    no test waits for network retries, and in which nothing is set that a step or a launch
    command is meant to do by itself (not ACCELERATE_USE_CPU, which step 4's
    Accelerator(cpu=...) line and the README's step 3 command each set in their own way; a
    test passes it where the command it runs has it). The lab's own environment."""
    return lab_environment(**extra)


def run_command(command, timeout=600, cwd=REPO, environment=None, **env):
    """Run a command (from the repository root unless cwd says) in offline_env(**env), or in
    the whole environment given; return the CompletedProcess (text output). Past timeout
    seconds the command and every process it started are killed, forked ones included
    (running.run; subprocess.run's timeout kills the command alone), and the test fails saying
    so."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        popen = dict(
            cwd=cwd, env=environment or offline_env(**env), stdout=out, stderr=err, text=True
        )
        try:
            [process] = running.run([(command, popen)], seconds=timeout)
        except running.TimeLimitReached as late:
            out.seek(0), err.seek(0)
            pytest.fail(
                f"{' '.join(map(str, command))}: {late}, stopped with every process "
                f"it started\n{out.read()[-3000:]}\n{err.read()[-3000:]}"
            )
        out.seek(0), err.seek(0)
        return subprocess.CompletedProcess(command, process.returncode, out.read(), err.read())


def step_command(step, output_dir, *args):
    """Return the command that runs step N's train.py with python."""
    return [sys.executable, str(STEPS[step]), "--output-dir", str(output_dir), *map(str, args)]


def run_step(step, output_dir, *args, **env):
    """Run step N's train.py with python; return the CompletedProcess."""
    return run_command(step_command(step, output_dir, *args), **env)


def read_metrics(output_dir):
    """Return the metrics.json a run wrote into output_dir."""
    return json.loads((Path(output_dir) / "metrics.json").read_text())


def assert_ok(result):
    assert result.returncode == 0, (
        f"exit {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )


def full_default_runs(folder):
    """Full default runs (3 epochs, 1,377 optimizer steps) of steps 1 and 2, each with
    `python stepN/train.py` on one thread, as `make course` runs them (so the README's numbers
    are these): the two at once, one core each; {step: its metrics, and "saved_to": its
    output folder, where its model is}."""
    done = run_within(
        [
            (step_command(step, folder / f"step{step}"), offline_env(OMP_NUM_THREADS="1"))
            for step in (1, 2)
        ],
        900,
    )
    for output, code in done:
        assert code == 0, output[-3000:]
    return {
        step: dict(read_metrics(folder / f"step{step}"), saved_to=folder / f"step{step}")
        for step in (1, 2)
    }


@pytest.fixture(scope="session")
def default_runs(made_ahead):
    """The full default runs of steps 1 and 2 (full_default_runs), once per session."""
    return made_ahead(full_default_runs)


@pytest.fixture(scope="session")
def checkpoint_without_dropout(tmp_path_factory):
    """A copy of the embedded checkpoint whose config turns dropout off: two runs that differ
    only in tensor shapes (padding) then compute the same function."""
    return copy_without_dropout(tmp_path_factory.mktemp("no_dropout"))


# graded again on 2 machines with evaluation batches of 5 (check.UNSEEN_FLAGS): the lesson
# and an equivalent solution (gather_for_metrics), which must pass, the untouched exercise,
# the variant whose score is not 0 (no_end_training: 9 of 10, the two-machine check's 2
# points in it), and the cheats whose scores the tests read (the last three only that
# setting catches)
UNSEEN_RUNS = [
    "lesson",
    "gather_for_metrics",
    "exercise",
    "no_end_training",
    "copied_predictions",
    "no_training_whole_split",
    "hardcoded_cut",
    "local_main_writes",
    "fixed_predictions",
    # what step 3's page calls the same as the lesson, graded in full as the lesson is
    "main_process_evaluates_alone_unwrapped",
]
# run last in step 2's one-process launch (lab_runs(2).one), one thread as the others there:
# step 1 with deterministic kernels only, which make course asks for on a CUDA GPU
DETERMINISTIC = "step1 --deterministic"
# in the same two-machine launch, each launcher started as SLURM's srun starts it
# (slurm_task): step 3 with the README's flags, the reference of the other launches
README_COMMAND = "readme command"


def step3_extras(step, folder):
    """What the tests add to step 3's lab launch: the grid of sizes, the grader's reference
    (step 2 on the same 2 processes: check.reference_script), and the cheats and crashes the
    grader must fail (not the gather only one process joins: it would stall the shared
    launch; test_exercises runs it alone)."""
    if step != 3:
        return {}
    return {
        "grid": (GRID, {"ACCELERATE_USE_CPU": "1"}, ["--processes", "2"]),
        "reference": STEPS[2],
        **step3_mistakes.write_all(
            folder / "mistakes",
            [name for name in step3_mistakes.MISTAKES if name != "gather_on_main_only"],
        ),
    }


def selected_steps(session):
    """Return the steps whose lesson tests the session runs: all four, unless it runs one
    lesson's alone (pytest -m stepN, as make test STEP=N does)."""
    steps = {
        step
        for item in session.items
        for step in (1, 2, 3, 4)
        if item.get_closest_marker(f"step{step}")
    }
    return tuple(sorted(steps)) if len(steps) == 1 else (1, 2, 3, 4)


@pytest.fixture(scope="session")
def lab_runs(tmp_path_factory, request):
    """lab_runs(step) -> that step's runs (tests/helpers/shared_runs.py), made once per
    session, each launch when a test first reads it (or, for the grader's, ahead: see ahead)."""
    return SharedRuns(
        lambda step: tmp_path_factory.mktemp(f"lab_step{step}"),
        selected_steps(request.session),
        extra_for=step3_extras,
        on_one_process={DETERMINISTIC: (STEPS[1], {}, [*SHORT_RUN, "--deterministic"])},
        unseen=UNSEEN_RUNS,
        on_two_machines={README_COMMAND: (STEPS[3], {}, SHORT_RUN)},
        machine_env=slurm_task,
    )


@pytest.fixture(scope="session", autouse=True)
def ahead(request, tmp_path_factory):
    """The session's Ahead (tests/helpers/ahead.py), which makes the shared runs that its
    tests read later while other tests run, the one read last first: the full default runs,
    each step's lab launch and the grader's runs (test_exercises.py), step 3's two-machine
    launch, and what a test module names in MADE_AHEAD ({fixture name: function(folder)
    whose result it returns})."""
    tmp_path_factory.getbasetemp()  # made here: its first making is not safe in two threads
    made = Ahead(tmp_path_factory.mktemp)
    lab_runs = request.getfixturevalue("lab_runs")  # not a parameter: every test would read it
    first_read = {}  # {key: (the index of the first test that reads it, make)}
    for index, item in enumerate(request.session.items):
        fixtures = set(getattr(item, "fixturenames", ()))
        if "default_runs" in fixtures:
            first_read.setdefault(full_default_runs, (index, made.in_a_folder(full_default_runs)))
        step = getattr(item, "callspec", None) and item.callspec.params.get("step")
        if "lab_runs" in fixtures:  # a test of one step reads that step's runs
            for read in [step] if step in lab_runs.selected else lab_runs.selected:
                first_read.setdefault(
                    f"step {read}", (index, lambda read=read: lab_runs(read).measured)
                )
        if "lab_runs" in fixtures and item.path.name == "test_exercises.py" and step:
            first_read.setdefault(
                f"graded {step}", (index, lambda step=step: lab_runs(step).graded)
            )
        if "two_machines" in fixtures:
            first_read.setdefault("two machines", (index, lambda: lab_runs(3).two_machines))
        for fixture, function in getattr(getattr(item, "module", None), "MADE_AHEAD", {}).items():
            if fixture in fixtures:
                first_read.setdefault(function, (index, made.in_a_folder(function)))
    for key, (_, make) in sorted(first_read.items(), key=lambda read: -read[1][0]):
        made.add(key, make)
    yield made
    made.stop()


@pytest.fixture(scope="session")
def made_ahead(ahead):
    """made_ahead(function) -> function(a new folder)'s result, once per session: made in
    Ahead's thread if it was queued there (waited for if under way)."""
    return lambda function: ahead.result(function, ahead.in_a_folder(function))


# the fixtures whose values are real runs: a test that reads one is a run test
RUN_FIXTURES = {
    "default_runs",
    "lab_runs",
    "two_machines",
    "readme_run",
    "three_processes",
    "made_ahead",
}


def pytest_collection_modifyitems(items):
    """A test parametrized by `step` belongs to that step's lesson: make test STEP=N runs it
    (the README's own tests aside: they check the README, not a lesson). A test that reads a
    run fixture is a run test (marker `runs`), as are those marked so by hand; those that
    read a run fixture run last, after every other test (see ahead)."""
    readers = set()
    for item in items:
        step = getattr(item, "callspec", None) and item.callspec.params.get("step")
        if step in RECORDS and item.path.name != "test_readme.py":
            item.add_marker(getattr(pytest.mark, f"step{step}"))
        if RUN_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.runs)
            readers.add(item)
    # the tests that read shared runs last: the runs are made ahead while the others run
    items.sort(key=lambda item: item in readers)


@pytest.fixture(autouse=True)
def unit_tests_start_no_process(request, monkeypatch):
    """A test not marked `runs` is a unit test, and make test-unit runs those alone, in
    seconds: starting a process (subprocess, multiprocessing) fails it, naming the marker
    (Ahead's thread, which makes later tests' runs meanwhile, starts its own)."""
    if request.node.get_closest_marker("runs"):
        return

    def refused(start):
        def refuse(self, *args, **kwargs):
            if threading.current_thread().name.startswith(THREAD):
                return start(self, *args, **kwargs)
            raise AssertionError(
                f"{request.node.nodeid} starts a process: a run test, so mark it @pytest.mark.runs"
            )

        return refuse

    monkeypatch.setattr(subprocess.Popen, "__init__", refused(subprocess.Popen.__init__))
    monkeypatch.setattr(
        multiprocessing.process.BaseProcess,
        "start",
        refused(multiprocessing.process.BaseProcess.start),
    )


def slurm_task(rank):
    """What a SLURM job of 2 nodes gives the launcher on node `rank`, started by
    `srun --ntasks-per-node 1` (docs/cluster.md): srun's variables (its step has 2 tasks, one
    per node) and the MASTER_ADDR the job script exports."""
    return dict(
        SLURM_JOB_ID="4242",
        SLURM_NNODES="2",
        SLURM_NTASKS="2",
        SLURM_STEP_NUM_TASKS="2",
        SLURM_PROCID=str(rank),
        SLURM_NODEID=str(rank),
        SLURM_LOCALID="0",
        MASTER_ADDR="127.0.0.1",
    )


@pytest.fixture(scope="session")
def two_machines(lab_runs):
    """Step 3 as 2 machines of 1 process each on 127.0.0.1, with the README's accelerate
    launch command (ACCELERATE_USE_CPU=1) and flags, each launcher started as SLURM's srun
    starts it: (its measurement, its run folder). It shares its launch with the grader's
    unseen setting (lab_runs(3).two_machines)."""
    runs = lab_runs(3)
    return runs.two_machines[README_COMMAND], runs.folder / "two_machines" / README_COMMAND


@pytest.fixture(scope="session")
def readme_run(two_machines):
    """A run of the README's command for step 3 on 2 processes (ACCELERATE_USE_CPU=1
    accelerate launch --multi_gpu ...), here across two "machines": the reference the other
    launches must equal. (On one machine, the lab's launch equals it: tests/test_step3_...)"""
    return two_machines[0]


# (kind, case, the error line) of every bad input the tests refused: printed at the end
BAD_INPUT_ROWS = []


def pytest_sessionstart(session):
    """SIGTERM to the tests (kill, make, a CI runner's cancel) stops them as Ctrl-C does:
    pytest's own interruption, each test's processes stopped by the code that started them."""
    signal.signal(signal.SIGTERM, stopped_by)


def stopped_by(signum, frame):
    raise running.Stopped(signum)


def pytest_keyboard_interrupt(excinfo):
    """Remember which signal stopped the tests (Ctrl-C or SIGTERM)."""
    pytest_keyboard_interrupt.signum = getattr(excinfo.value, "signum", signal.SIGINT)


def pytest_sessionfinish(session, exitstatus):
    """Stopped tests end as a shell reports a process the signal killed: 130 for Ctrl-C,
    143 for SIGTERM (pytest's own code for an interruption is 2)."""
    if exitstatus == pytest.ExitCode.INTERRUPTED:
        session.exitstatus = 128 + getattr(pytest_keyboard_interrupt, "signum", signal.SIGINT)


def pytest_terminal_summary(terminalreporter):
    """Print the bad-input table: one line per malformed input, with the line it got."""
    if not BAD_INPUT_ROWS:
        return
    terminalreporter.section(f"bad input: {len(BAD_INPUT_ROWS)} cases, each refused in one line")
    width = max(len(name) for _, name, _ in BAD_INPUT_ROWS)
    for kind, name, line in sorted(BAD_INPUT_ROWS):  # the tests' temporary folders as <tmp>
        line = re.sub(r"/tmp/pytest-of-[^/]+/pytest-\d+/[^/]+", "<tmp>", line)
        terminalreporter.write_line(f"{kind:<10} {name:<{width}}  {line}")
