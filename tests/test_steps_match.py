"""Step 1 (plain loop) and step 2 (Accelerate) on one process train and evaluate identically.

On one process `accelerator.prepare` neither reorders the shuffled batches nor draws random
numbers, and `accelerator.backward(loss)` is `loss.backward()`; with the same seed set at
the same point both runs do the same float operations in the same order. So the
comparisons here are exact: no tolerance.
"""

import pytest
from conftest import assert_ok, read_metrics, run_step

from accelerate_course import measuring
from accelerate_course.lab_runs import SHORT_RUN


@pytest.mark.step2
def test_short_runs_are_identical(lab_runs):
    # steps 1 and 2 on one process, run one after the other by the lab's driver (each run
    # starts from a fresh Accelerate state; accelerate_course/lab_driver.py)
    one = lab_runs(2).one["step1"]
    two = lab_runs(2).one["lesson"]
    assert one.error is None and two.error is None
    assert len(one.losses) == measuring.train_steps(SHORT_RUN) == 30
    assert one.losses == two.losses
    assert one.predictions == two.predictions
    assert (one.accuracy, one.f1) == (two.accuracy, two.f1)
    assert one.scored == two.scored == [408]
    assert one.processes_reporting == two.processes_reporting == two.accelerator_processes == 1


@pytest.mark.step2
def test_accelerate_launch_on_one_process_matches_python(tmp_path, lab_runs):
    # accelerate launch runs its process with OMP_NUM_THREADS=1; a matrix product on one
    # thread sums its floats in another order than on two, so compare like with like. The
    # launch is the lab's: `accelerate launch --num_processes 1` with every setting on the
    # command line, so that a user's `accelerate config` file cannot change it
    assert_ok(run_step(2, tmp_path, *SHORT_RUN, OMP_NUM_THREADS="1"))
    python, launched = read_metrics(tmp_path), lab_runs(2).one["lesson"]
    assert python["train_losses"] == launched.losses
    assert python["predictions"] == launched.predictions


def test_full_default_runs_are_identical_and_learn(default_runs):
    one, two = default_runs[1], default_runs[2]
    assert len(one["train_losses"]) == 1377  # 3 epochs x 459 batches of 8
    assert one["train_losses"] == two["train_losses"]
    assert one["predictions"] == two["predictions"]
    assert (one["accuracy"], one["f1"]) == (two["accuracy"], two["f1"])
    assert one["hyperparameters"] == two["hyperparameters"] | {
        "output_dir": one["hyperparameters"]["output_dir"]
    }


def test_the_model_really_learns(default_runs):
    run = default_runs[1]
    losses = run["train_losses"]
    first, last = sum(losses[:200]) / 200, sum(losses[-200:]) / 200
    assert last < 0.8 * first  # the training loss falls
    assert set(run["predictions"]) == {0, 1}  # both classes predicted
    majority = 279 / 408  # the validation split's share of paraphrases
    assert run["accuracy"] >= 0.80
    assert run["accuracy"] >= majority + 0.10
