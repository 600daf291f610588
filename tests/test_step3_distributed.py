"""Step 3 on real processes (gloo on the CPU): the distributed evaluation equals a
single-process evaluation of the same weights, and gather-and-truncate keeps every
validation sample exactly once.

Each multi-process test checks, from inside every launched process, that the number of
processes is the one asked for and that Accelerate runs them as MULTI_CPU: the failure this
lesson is about is a launch that silently runs one process, or several that each think
they are alone.
"""

import json
import subprocess
import sys

import pytest

from conftest import (REPO, SHORT_RUN, STEPS, accelerate_launch_command, assert_ok, free_port,
                      offline_env, read_metrics, run_cpu_launch, run_step)

SPY = REPO / "tests" / "helpers" / "spy_run.py"
GRID = REPO / "tests" / "helpers" / "truncation_grid.py"
VALIDATION_SIZE = 408


def read_ranks(report_dir, n):
    return [json.loads((report_dir / f"rank{i}.json").read_text()) for i in range(n)]


def check_inside(report_dir, n):
    for i, rank in enumerate(read_ranks(report_dir, n)):
        assert rank["process_index"] == i
        assert rank["num_processes"] == n
        assert rank["distributed_type"] == "DistributedType.MULTI_CPU"
        assert rank["backend"] == "gloo"


def test_one_process_is_identical_to_step2(tmp_path):
    assert_ok(run_step(2, tmp_path / "step2", *SHORT_RUN))
    result = run_step(3, tmp_path / "step3", *SHORT_RUN)
    assert_ok(result)
    two, three = read_metrics(tmp_path / "step2"), read_metrics(tmp_path / "step3")
    assert three["predictions"] == two["predictions"]
    assert (three["accuracy"], three["f1"]) == (two["accuracy"], two["f1"])
    assert three["train_losses"] == two["train_losses"]
    assert three["eval_gathered"] == three["eval_samples"] == VALIDATION_SIZE
    assert "gathered 408 predictions, kept 408" in result.stdout


@pytest.fixture(scope="module")
def two_process_run(tmp_path_factory):
    """A short step 3 run on 2 processes, with reports from inside each process."""
    out = tmp_path_factory.mktemp("step3_two")
    result = run_cpu_launch(
        2, [SPY, out / "report", STEPS[3], "--output-dir", out, *SHORT_RUN])
    assert_ok(result)
    return out, result


@pytest.mark.parametrize("n", [2, 3])
def test_multi_process_evaluation_equals_single_process_evaluation(tmp_path, two_process_run, n):
    if n == 2:
        out, result = two_process_run
    else:
        out = tmp_path
        result = run_cpu_launch(
            n, [SPY, out / "report", STEPS[3], "--output-dir", out, *SHORT_RUN])
        assert_ok(result)
    check_inside(out / "report", n)
    metrics = read_metrics(out)
    assert metrics["num_processes"] == n
    # the padded count: every process runs ceil(51 batches / n) batches of 8
    batches_per_process = -(-51 // n)
    assert metrics["eval_gathered"] == batches_per_process * n * 8  # 2 -> 416, 3 -> 408
    assert metrics["eval_samples"] == VALIDATION_SIZE
    # the same weights evaluated by one process, unsharded: same predictions, bit for bit
    reference = json.loads((out / "report" / "single_process_eval.json").read_text())
    assert metrics["predictions"] == reference["predictions"]
    labels = [json.loads(line)["label"] for line in
              (REPO / "common" / "embedded_data" / "validation.jsonl").read_text().splitlines()]
    correct = sum(p == y for p, y in zip(reference["predictions"], labels))
    assert metrics["accuracy"] == correct / VALIDATION_SIZE
    # what a student sees: the state of process 0, and the counts
    assert "Distributed environment: DistributedType.MULTI_CPU  Backend: gloo" in result.stdout
    assert f"Num processes: {n}" in result.stdout
    assert f"gathered {metrics['eval_gathered']} predictions, kept 408" in result.stdout
    # one process prints: the result line appears once, not n times
    assert result.stdout.count("validation: accuracy") == 1


@pytest.mark.parametrize("n", [2, 3])
def test_gather_and_truncate_over_a_grid_of_sizes(tmp_path, n):
    result = run_cpu_launch(n, [GRID, tmp_path, n])
    assert_ok(result)
    report = json.loads((tmp_path / "grid.json").read_text())
    assert report["num_processes"] == n
    assert report["distributed_type"] == "DistributedType.MULTI_CPU"
    assert len(report["cases"]) == 15 * 4
    assert {"size": 408, "batch_size": 8, "gathered": 416 if n == 2 else 408, "kept": 408} \
        in report["cases"]


def test_two_machines_on_loopback_equal_one_machine_with_two_processes(tmp_path, two_process_run):
    one_machine, _ = two_process_run
    port = free_port()
    out = tmp_path / "two_machines"
    launches = [
        subprocess.Popen(
            accelerate_launch_command(
                2, [SPY, out / "report", STEPS[3], "--output-dir", out, *SHORT_RUN],
                num_machines=2, machine_rank=rank, port=port),
            cwd=REPO, env=offline_env(ACCELERATE_USE_CPU="1"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True)
        for rank in (0, 1)
    ]
    for launch in launches:
        output, _ = launch.communicate(timeout=600)
        assert launch.returncode == 0, output[-3000:]
    check_inside(out / "report", 2)
    a, b = read_metrics(one_machine), read_metrics(out)
    assert b["num_processes"] == 2 and b["eval_gathered"] == 416
    assert a["predictions"] == b["predictions"]
    assert (a["accuracy"], a["f1"]) == (b["accuracy"], b["f1"])
    assert a["train_losses"] == b["train_losses"]
