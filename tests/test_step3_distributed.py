"""Step 3 on real processes (gloo on the CPU): the distributed evaluation equals a
single-process evaluation of the same weights, and gather-and-truncate keeps every
validation sample exactly once.

Each multi-process test checks, from inside every launched process, that the number of
processes is the one asked for and that Accelerate runs them as MULTI_CPU: the failure this
lesson is about is a launch that silently runs one process, or several that each think
they are alone. The runs are the lab's (accelerate_course/lab_driver.py reports from inside each
process, and the process of rank 0 evaluates the final weights once more, alone, on a plain
dataloader): the README's command for 2 processes is shared with the what-if tests.
"""

import json

import pytest
from conftest import GRID, REPO, STEPS

from accelerate_course.lab_runs import run_scripts

VALIDATION_SIZE = 408
pytestmark = pytest.mark.step3


def check_inside(run_folder, n):
    """Every process of the run says it is one of n, MULTI_CPU over gloo."""
    ranks = sorted(
        (json.loads(p.read_text()) for p in run_folder.glob("rank*.json")),
        key=lambda r: r["process_index"],
    )
    assert [r["process_index"] for r in ranks] == list(range(n))
    for rank in ranks:
        assert rank["num_processes"] == n
        assert rank["distributed_type"] == "DistributedType.MULTI_CPU"
        assert rank["backend"] == "gloo"


def test_one_process_is_identical_to_step2(lab_runs):
    runs = lab_runs(2).one  # step 2 and step 3, each on one process
    two, three = runs["lesson"], runs["step3"]
    assert three.error is None
    assert three.predictions == two.predictions
    assert (three.accuracy, three.f1) == (two.accuracy, two.f1)
    assert three.losses == two.losses
    assert three.gathered == three.scored[0] == VALIDATION_SIZE
    out = (lab_runs(2).folder / "one" / "step3" / "rank0.out").read_text()
    assert "gathered 408 predictions, kept 408" in out


def check_two_or_three(run, run_folder, n):
    check_inside(run_folder, n)
    assert run.accelerator_processes == n and run.processes_alone == 0
    # the padded count: every process runs ceil(51 batches / n) batches of 8
    batches_per_process = -(-51 // n)
    assert run.gathered == batches_per_process * n * 8  # 2 -> 416, 3 -> 408
    assert len(run.predictions) == VALIDATION_SIZE
    # the same weights evaluated by one process, unsharded: same predictions, bit for bit
    assert run.predictions == run.alone_predictions
    labels = [
        json.loads(line)["label"]
        for line in (REPO / "common" / "embedded" / "data" / "validation.jsonl")
        .read_text()
        .splitlines()
    ]
    correct = sum(p == y for p, y in zip(run.alone_predictions, labels))
    assert run.accuracy[0] == round(correct / VALIDATION_SIZE, 4)
    # what a student sees: the state of process 0, and the counts, from one process only
    out = (run_folder / "rank0.out").read_text()
    assert "Distributed environment: DistributedType.MULTI_CPU  Backend: gloo" in out
    assert f"Num processes: {n}" in out
    assert f"gathered {run.gathered} predictions, kept 408" in out
    assert run.printed == 1 and run.writes == 1
    assert run.left_group  # every process left the process group (end_training)


def test_two_processes_evaluate_like_one_process(lab_runs):
    runs = lab_runs(3)
    check_two_or_three(runs["lesson"], runs.folder / "runs" / "lesson", 2)


def run_on_three_processes(folder):
    """Step 3 and the grid of sizes on 3 processes, in one launch of the README's command."""
    runs = run_scripts(
        3, {"lesson": STEPS[3], "grid": (GRID, {}, ["--processes", "3"])}, folder, processes=3
    )
    return runs, folder


# made while other tests run (tests/helpers/ahead.py)
MADE_AHEAD = {"three_processes": run_on_three_processes}


@pytest.fixture(scope="module")
def three_processes(made_ahead):
    return made_ahead(run_on_three_processes)


def test_three_processes_evaluate_like_one_process(three_processes):
    runs, folder = three_processes
    check_two_or_three(runs["lesson"], folder / "lesson", 3)


@pytest.mark.parametrize("n", [2, 3])
def test_gather_and_truncate_over_a_grid_of_sizes(lab_runs, three_processes, n):
    # the grid runs in the same launches as step 3 (accelerate_course/lab_driver.py), on 2 and 3
    # processes
    runs, folder = (
        (lab_runs(3).measured, lab_runs(3).folder / "runs") if n == 2 else three_processes
    )
    assert runs["grid"].error is None, runs["grid"].error
    report = json.loads((folder / "grid" / "output" / "grid.json").read_text())
    assert report["num_processes"] == n
    assert report["distributed_type"] == "DistributedType.MULTI_CPU"
    assert len(report["cases"]) == 15 * 4
    assert {
        "size": 408,
        "batch_size": 8,
        "gathered": 416 if n == 2 else 408,
        "kept": 408,
    } in report["cases"]


def test_two_machines_on_loopback_equal_one_machine_with_two_processes(lab_runs, two_machines):
    one_machine = lab_runs(3)["lesson"]
    run, folder = two_machines
    check_inside(folder, 2)
    assert run.accelerator_processes == 2 and run.gathered == 416
    assert run.predictions == one_machine.predictions
    assert (run.accuracy, run.f1) == (one_machine.accuracy, one_machine.f1)
    assert run.losses == one_machine.losses
    # accelerator.print prints on the local main process of each machine: here both
    # "machines" are local mains (process index 0 and 1, local index 0 each), so the result
    # line is printed twice, once per machine; metrics.json is written once, by process 0
    assert run.printed == 2 and run.writes == 1
