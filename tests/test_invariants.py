"""The invariants lab (accelerate_course/invariants.py): what stays the same when a run is
scaled, measured. Each row of the tables on docs/invariants.md is checked here from the runs
themselves: gradient accumulation against more processes, saving and resuming in a new
launch, the logged loss reduced across processes, bf16 autocast; and the learning rate
against the global batch, which is not an invariant and is reported as measured."""

import pytest

from accelerate_course import invariants

GRADIENT_TOLERANCE = invariants.GRADIENT_TOLERANCE  # explained there: another order of sums


def rows(lab_runs, step):
    return {row.invariant: row for row in lab_runs(step).invariant_rows}


@pytest.mark.step3
def test_accumulating_2_batches_on_1_process_takes_the_steps_of_2_processes(lab_runs):
    runs = lab_runs(3).measured
    one, two = runs["accumulate 2, 1 process"], runs["seedable, 2 processes"]
    assert one.accelerator_processes == 1 and two.accelerator_processes == 2
    assert two.distributed_type == "DistributedType.MULTI_CPU"
    assert len(one.learning_rates) == len(two.learning_rates) == 30
    assert one.learning_rates == two.learning_rates
    assert abs(one.grad_norm - two.grad_norm) <= GRADIENT_TOLERANCE * two.grad_norm
    assert one.predictions == two.predictions and one.accuracy[0] == two.accuracy[0]
    assert rows(lab_runs, 3)["gradient accumulation"].holds


@pytest.mark.step3
def test_the_accumulation_variable_alone_halves_the_loss_and_steps_at_every_batch(lab_runs):
    runs = lab_runs(3).measured
    alone, plain = runs["the variable alone, 1 process"], runs["seedable, 1 process"]
    assert len(alone.learning_rates) == len(plain.learning_rates) == 30  # a step every batch
    assert abs(alone.grad_norm - plain.grad_norm / 2) <= GRADIENT_TOLERANCE * plain.grad_norm
    assert alone.weights != plain.weights  # AdamW's eps: a halved gradient is not quite the same
    assert rows(lab_runs, 3)["gradient accumulation: the variable alone"].holds


@pytest.mark.step3
@pytest.mark.parametrize("processes", ["2 processes", "1 process"])
def test_a_run_resumed_in_a_new_launch_is_the_uninterrupted_run_bit_for_bit(lab_runs, processes):
    runs = lab_runs(3).measured
    saved, resumed = runs[f"saved, {processes}"], runs[f"resumed, {processes}"]
    assert saved.error is None and resumed.error is None, (saved.error, resumed.error)
    assert resumed.accelerator_processes == saved.accelerator_processes == int(processes[0])
    assert len(saved.losses) == 30 and resumed.losses == saved.losses[15:]
    assert resumed.learning_rates == saved.learning_rates[15:]
    assert resumed.weights == saved.weights and resumed.predictions == saved.predictions
    assert rows(lab_runs, 3)[f"saving and resuming, {processes}"].holds


@pytest.mark.step3
def test_save_state_on_the_main_process_alone_resumes_to_another_run(lab_runs):
    runs = lab_runs(3).measured
    uninterrupted = runs["saved, 2 processes"]
    saved, resumed = (
        runs["saved by the main process alone"],
        runs["resumed from the main process's save"],
    )
    # process 1 never called save_state: the folder holds the main process's random state alone
    assert "random_states_0.pkl" in saved.state_files
    assert "random_states_1.pkl" not in saved.state_files
    assert "random_states_1.pkl" in uninterrupted.state_files
    # the resumed run finishes, without an error, and is not the uninterrupted one
    assert resumed.error is None and len(resumed.losses) == 15
    assert resumed.losses != uninterrupted.losses[15:]
    assert rows(lab_runs, 3)["saving and resuming: save_state on the main process alone"].holds


@pytest.mark.step3
def test_a_state_resumes_on_another_number_of_processes_and_repeats_neither_run(lab_runs):
    runs = lab_runs(3).measured
    two_to_one, one_to_two = (
        runs["resumed on 1 process from 2"],
        runs["resumed on 2 processes from 1"],
    )
    assert two_to_one.error is None and one_to_two.error is None
    assert two_to_one.accelerator_processes == 1 and one_to_two.accelerator_processes == 2
    assert two_to_one.losses != runs["saved, 1 process"].losses[15:]
    assert one_to_two.losses != runs["saved, 2 processes"].losses[15:]
    assert rows(lab_runs, 3)["resuming on another number of processes"].holds


@pytest.mark.step3
def test_the_reduced_loss_changes_the_curve_and_not_the_training(lab_runs):
    lesson, reduced = lab_runs(3)["lesson"], lab_runs(3)["reduced loss"]
    assert reduced.weights == lesson.weights and reduced.predictions == lesson.predictions
    assert reduced.losses != lesson.losses
    # the reduced loss is the mean of both processes' losses: on average as far from rank 0's
    # own as two batches' losses are from each other, a few hundredths here
    assert 0 < invariants.mean_difference(reduced.losses, lesson.losses) < 0.1
    assert rows(lab_runs, 3)["the logged loss"].holds


@pytest.mark.step3
def test_the_learning_rate_against_the_global_batch_is_measured(lab_runs):
    runs = lab_runs(3).measured
    doubled, longer = runs["2 x lr"], runs["1 process, 60 steps"]
    assert doubled.learning_rates[0] == 2 * lab_runs(3)["lesson"].learning_rates[0]
    assert len(longer.learning_rates) == 60 and longer.accelerator_processes == 1
    row = rows(lab_runs, 3)["the learning rate and the global batch"]
    assert row.holds and row.verdict.startswith("not an invariant")


@pytest.mark.step2
def test_bf16_autocast_on_the_cpu_scales_no_loss(lab_runs):
    fp32, bf16 = lab_runs(2)["float32"], lab_runs(2)["bf16"]
    assert fp32.mixed_precision == "no" and bf16.mixed_precision == "bf16"
    assert bf16.grad_scaler is None and fp32.grad_scaler is None  # a GradScaler: fp16 only
    assert bf16.losses != fp32.losses  # bfloat16 products: other numbers
    assert bf16.error is None and len(bf16.predictions) == len(fp32.predictions) == 408
    assert bf16.accelerator_processes == fp32.accelerator_processes == 1
    assert rows(lab_runs, 2)["mixed precision: bf16 autocast"].holds
