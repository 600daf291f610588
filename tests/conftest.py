"""Helpers shared by the tests: run a step script as a real subprocess and read its results,
and the lab's runs (tools/lab.py), made once per session and shared by the tests that read
them: the comparison tests of each step, the what-if tests and the grader's tests."""

import functools
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
GRID = REPO / "tests" / "helpers" / "truncation_grid.py"
sys.path.insert(0, str(REPO))
from tools import check, exercise, lab  # noqa: E402
from tools.steps import TRAIN_PY  # noqa: E402

sys.path.insert(0, str(REPO / "tests" / "helpers"))
import step3_mistakes  # noqa: E402

STEPS = TRAIN_PY  # {step: its train.py}, from tools/steps.py


def offline_env(**extra):
    """Return an environment in which the hub is unreachable at once (a closed local port), so
    no test waits for network retries, and in which nothing is set that a step or a launch
    command is meant to do by itself (not ACCELERATE_USE_CPU, which step 4's
    Accelerator(cpu=...) line and the README's step 3 command each set in their own way; a
    test passes it where the command it runs has it). The lab's own environment."""
    return lab.lab_environment(**extra)


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
    """Full default runs (3 epochs, 1,377 optimizer steps) of steps 1 and 2, once per session,
    each with `python stepN/train.py` on one thread, as `make course` runs them (so the
    README's numbers are these): the two at once, one core each."""
    runs = {}
    for step in (1, 2):
        out = tmp_path_factory.mktemp(f"step{step}_default")
        runs[step] = (out, subprocess.Popen(
            [sys.executable, str(STEPS[step]), "--output-dir", str(out)], cwd=REPO,
            env=offline_env(OMP_NUM_THREADS="1"), stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True))
    for step, (out, process) in runs.items():
        output, _ = process.communicate(timeout=900)
        assert process.returncode == 0, output[-3000:]
    return {step: read_metrics(out) for step, (out, _) in runs.items()}


@pytest.fixture(scope="session")
def checkpoint_without_dropout(tmp_path_factory):
    """A copy of the embedded checkpoint whose config turns dropout off: two runs that differ
    only in tensor shapes (padding) then compute the same function."""
    return lab.checkpoint_without_dropout(tmp_path_factory.mktemp("no_dropout"))


# graded again on 2 machines with evaluation batches of 5 (check.UNSEEN_FLAGS): the lesson
# and an equivalent solution (gather_for_metrics), which must pass, and the two cheats only
# that setting catches
UNSEEN_RUNS = ["lesson", "gather_for_metrics", "hardcoded_cut", "local_main_writes"]


class LabRuns:
    """The lab's runs of one step, each launch made when a test first needs it: the step and
    its what-if variants in one launch (with the step's exercise beside them, and for step 3
    the grid of sizes, and step 4's reference when step 4's tests run too), and what grading
    needs besides (tools/check.py: step 2 on 1 process beside step 1 and step 3; its variants
    and exercise only when step 2's tests run). Short runs: lab.SHORT_RUN."""

    def __init__(self, step, folder, step3_reference=None, selected=(1, 2, 3, 4)):
        self.step, self.folder, self.step3_reference = step, folder, step3_reference
        # selected: the steps whose tests this session runs (all, or the one of make test
        # STEP=N); a run only another step's tests read is made only when they run
        self.selected = selected
        self.extra = {}
        if step > 1:
            path = folder / "exercise" / "train.py"
            path.parent.mkdir(parents=True)
            path.write_text(exercise.exercise(step))
            self.extra["exercise"] = path
        if step == 3:  # in the same launch: the grid of sizes, and step 4's reference
            self.extra["grid"] = (GRID, {"ACCELERATE_USE_CPU": "1"}, ["--processes", "2"])
            if 4 in selected:
                self.extra["lesson without dropout"] = (STEPS[3], {}, lab.step4_flags(folder))
            # the cheats and crashes the grader must fail (a collective only one process joins
            # would stall the shared launch: test_exercises runs it alone)
            self.extra.update(step3_mistakes.write_all(
                folder / "mistakes", [n for n in step3_mistakes.MISTAKES if n != "gather_on_main_only"]))
        self.scripts = {**lab.variant_scripts(step, folder=folder), "exercise": self.extra.get("exercise"),
                        **{name: path for name, path in self.extra.items()
                           if name in step3_mistakes.MISTAKES}}
        del self.scripts["lesson"]
        if step == 1:
            del self.scripts["exercise"]

    @functools.cached_property
    def _what_if(self):
        return lab.what_if(self.step, self.folder, extra=self.extra)

    @property
    def rows(self):
        return self._what_if[0]

    @property
    def measured(self):
        return self._what_if[1]

    @functools.cached_property
    def one(self):
        """Step 2's one-process launch: step 1, step 2, its variants and exercise (when step 2's
        own tests run: they grade them), and step 3."""
        candidates = self.scripts if 2 in self.selected else {}
        return check.one_process_runs({**candidates, "step3": STEPS[3]}, self.folder)

    @functools.cached_property
    def runs(self):
        runs = check.runs_for(self.step, self.scripts, self.folder, measured=self.measured,
                              step3_reference=self.step3_reference and self.step3_reference(),
                              one=self.one if self.step == 2 else None, unseen=False)
        if self.step == 3:  # the setting no exercise shows, for the runs whose grade it decides
            runs["unseen"] = lab.run_on_two_machines(
                3, {name: self.scripts.get(name, STEPS[3]) for name in UNSEEN_RUNS},
                self.folder / "unseen", check.UNSEEN_FLAGS)
        return runs

    @functools.cached_property
    def graded(self):
        return {name: check.grade(self.step, name, self.runs) for name in ["lesson", *self.scripts]}

    def __getitem__(self, name):
        return self.measured[name]


def selected_steps(session):
    """Return the steps whose lesson tests the session runs: all four, unless it runs one
    lesson's alone (pytest -m stepN, as make test STEP=N does)."""
    steps = {step for item in session.items for step in (1, 2, 3, 4)
             if item.get_closest_marker(f"step{step}")}
    return tuple(sorted(steps)) if len(steps) == 1 else (1, 2, 3, 4)


@pytest.fixture(scope="session")
def lab_runs(tmp_path_factory, request):
    """lab_runs(step) -> LabRuns of that step, made once per session."""
    made = {}
    selected = selected_steps(request.session)

    def step3_reference():
        """Step 4's reference (step 3 with dropout off), from step 3's lab launch when that
        launch runs in this session anyway; else None: check.runs_for then runs it alone."""
        return get(3)["lesson without dropout"] if 3 in selected else None

    def get(step):
        if step not in made:
            made[step] = LabRuns(step, tmp_path_factory.mktemp(f"lab_step{step}"),
                                 step3_reference if step == 4 else None, selected)
        return made[step]

    return get


def pytest_collection_modifyitems(items):
    """A test parametrized by `step` belongs to that step's lesson: make test STEP=N runs it
    (the README's own tests aside: they check the README, not a lesson)."""
    for item in items:
        step = getattr(item, "callspec", None) and item.callspec.params.get("step")
        if step in (1, 2, 3, 4) and item.path.name != "test_readme.py":
            item.add_marker(getattr(pytest.mark, f"step{step}"))


@pytest.fixture(scope="session")
def two_machines(tmp_path_factory):
    """Step 3 as 2 machines of 1 process each on 127.0.0.1, with the README's accelerate
    launch command (ACCELERATE_USE_CPU=1): (its measurement, its run folder)."""
    from test_step3_distributed import launch_two_machines
    folder = tmp_path_factory.mktemp("two_machines")
    return launch_two_machines(folder, "accelerate")[0], folder


@pytest.fixture(scope="session")
def readme_run(two_machines):
    """A run of the README's command for step 3 on 2 processes (ACCELERATE_USE_CPU=1
    accelerate launch --multi_gpu ...), here across two "machines": the reference the other
    launches must equal. (On one machine, the lab's launch equals it: tests/test_step3_...)"""
    return two_machines[0]


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
