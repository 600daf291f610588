"""The what-if lab: every variant applies to today's step, runs for real, and has the
consequence the lessons' pages' tables say it has.

The runs are short (accelerate_course/lab_runs.py's SHORT_RUN: 30 optimizer steps) and shared:
one launch per step runs the step and all its variants (tests/helpers/shared_runs.py). Each
test asserts the measured consequence against the lesson's run of the same launch: a
difference where the README says there is one, equality where it says there is none.
"""

import re

import pytest
from conftest import REPO, STEPS

from accelerate_course import diagnosis, lab, patches, whatif
from accelerate_course.maintain import update_readme
from accelerate_course.steps import code_of

ALL_VARIANTS = [(step, v.name) for step in STEPS for v in patches.variants(step)]


@pytest.mark.parametrize("step,name", ALL_VARIANTS)
def test_every_patch_applies_to_todays_step(step, name):
    variant = next(v for v in patches.variants(step) if v.name == name)
    text = STEPS[step].read_text()
    patched = patches.apply_patch(variant.path, text)
    assert patched != text
    # a variant changes one lesson line or a few; the unwrapped main-process evaluation is the
    # seed notebook's "standard evaluation loop" in place of the lesson's: it takes out the
    # gather and the cut too, and the others meet the main process at the lesson's barrier
    # before they stop (14 changed lines)
    limit = 14 if name == "main_process_evaluates_alone_unwrapped" else 10
    assert 1 <= len(variant.changes) <= limit, "a variant changes one lesson line or a few"


@pytest.mark.parametrize(
    "step,kind,name",
    [
        (step, kind, v.name)
        for step in STEPS
        for kind in ("whatif", "invariants")
        for v in patches.variants(step, kind)
    ],
)
def test_every_patched_step_is_python(step, kind, name):
    # a patch's added lines go in as deep as the step's code around them now sits: an import
    # added beside the imports lands inside the steps' try block (make readme WHATIF=1
    # stopped on four invariants patches when the imports moved into that block)
    variant = next(v for v in patches.variants(step, kind) if v.name == name)
    compile(patches.apply_patch(variant.path, STEPS[step].read_text()), str(variant.path), "exec")


def test_a_step_that_changed_under_a_patch_fails_with_the_patchs_name():
    variant = next(v for v in patches.variants(3) if v.name == "no_cut")
    text = (
        STEPS[3]
        .read_text()
        .replace("gathered[: eval_dataloader.total_dataset_length]", "gathered[:408]")
    )
    assert text != STEPS[3].read_text()
    with pytest.raises(patches.PatchError) as error:
        patches.apply_patch(variant.path, text)
    assert "step3_distributed_eval/whatif/no_cut.patch" in str(error.value)
    assert "its code is no longer in step3_distributed_eval/train.py" in str(error.value)


@pytest.mark.parametrize("step", sorted(STEPS))
def test_a_mended_comment_breaks_no_patch(step):
    # every comment of the step reworded, every code line kept: each patch still applies and
    # changes the same code (patches are found by their code lines, not their comments)
    text = STEPS[step].read_text()
    mended = re.sub(r"(?m)(#(?! %%) ?)(\S)", r"\1mended: \2", text)
    assert mended != text
    code = lambda script: [code_of(line) for line in script.splitlines() if code_of(line)]
    for kind in ("whatif", "invariants"):
        for variant in patches.variants(step, kind):
            assert code(patches.apply_patch(variant.path, mended)) == code(
                patches.apply_patch(variant.path, text)
            ), variant.name


def test_there_are_the_variants_the_course_promises():
    names = {step: {v.name for v in patches.variants(step)} for step in STEPS}
    assert names[1] == {"no_zero_grad", "no_scheduler_step", "no_model_eval"}
    assert names[2] == {"model_not_prepared", "loss_backward", "scheduler_prepared"}
    assert names[3] == {
        "no_gather",
        "no_cut",
        "every_process_prints_and_writes",
        "gather_for_metrics",
        "labels_not_gathered",
        "no_end_training",
        "main_process_evaluates_alone",
        "main_process_evaluates_alone_unwrapped",
        "prepared_model_saved",
        "prepared_state_dict_saved",
        "every_process_saves",
        "load_state_without_wait",
    }
    assert {step: {v.name for v in patches.variants(step, "invariants")} for step in STEPS} == {
        1: set(),
        2: {"mixed_precision_bf16"},
        4: set(),
        3: {
            "seedable_batches",
            "accumulate_2",
            "save_state",
            "resume_state",
            "reduced_loss",
            "save_state_main_only",
        },
    }
    assert names[4] == {
        "accelerator_without_cpu",
        "accelerator_before_launch",
        "dynamic_padding",
        "loss_item_every_step",
    }


# step 1, one process ---------------------------------------------------------------------


@pytest.mark.step1
def test_step1_without_zero_grad_adds_up_the_gradients(lab_runs):
    lesson, run = lab_runs(1)["lesson"], lab_runs(1)["no_zero_grad"]
    # the first update uses one batch's gradients either way; from the second update on the
    # gradients of all the earlier batches are added in, so the losses part from step 3
    assert run.losses[:2] == lesson.losses[:2]
    assert run.losses[2] != lesson.losses[2]
    assert run.learning_rates == lesson.learning_rates


@pytest.mark.step1
def test_step1_without_the_scheduler_step_keeps_the_peak_learning_rate(lab_runs):
    lesson, run = lab_runs(1)["lesson"], lab_runs(1)["no_scheduler_step"]
    assert set(run.learning_rates) == {5e-5}
    assert lesson.learning_rates[0] == 5e-5 and lesson.learning_rates[-1] < 5e-6
    assert run.losses[:2] == lesson.losses[:2] and run.losses != lesson.losses


@pytest.mark.step1
def test_step1_without_model_eval_trains_the_same_and_predicts_otherwise(lab_runs):
    lesson, run = lab_runs(1)["lesson"], lab_runs(1)["no_model_eval"]
    assert run.losses == lesson.losses  # training is untouched
    assert run.predictions != lesson.predictions  # dropout stays on while predicting


# step 2, two processes -------------------------------------------------------------------


@pytest.mark.step2
def test_step2_on_two_processes_scores_each_share_apart(lab_runs):
    lesson = lab_runs(2)["lesson"]
    assert (
        lesson.processes_reporting == lesson.accelerator_processes == 2
        and lesson.processes_alone == 0
    )
    assert lesson.weights_equal  # one model: DDP averaged the gradients
    assert lesson.scored == [208, 208]  # what step 3 fixes: no gather
    assert lesson.writes == 2


@pytest.mark.step2
def test_step2_model_not_prepared_trains_two_models(lab_runs):
    lesson, run = lab_runs(2)["lesson"], lab_runs(2)["model_not_prepared"]
    assert lesson.weights_equal and not run.weights_equal
    assert run.processes_alone == 0  # the processes did form a group; the model just never used it


@pytest.mark.step2
def test_step2_loss_backward_is_the_same_here_and_not_with_accumulation(lab_runs):
    runs = lab_runs(2)
    assert runs["loss_backward"].losses == runs["lesson"].losses
    assert runs["loss_backward"].predictions == runs["lesson"].predictions
    assert runs["loss_backward"].grad_norm == runs["lesson"].grad_norm
    lesson = runs["lesson, with ACCELERATE_GRADIENT_ACCUMULATION_STEPS=2"]
    plain = runs["loss_backward, with ACCELERATE_GRADIENT_ACCUMULATION_STEPS=2"]
    # accelerator.backward divides the loss by 2, loss.backward() does not: the gradients
    # at the first step (the same weights, the same batch) differ by exactly that factor, to
    # the float rounding of two backward passes (1e-6 relative)
    assert plain.grad_norm == pytest.approx(2 * lesson.grad_norm, rel=1e-6)
    assert lesson.grad_norm == pytest.approx(runs["lesson"].grad_norm / 2, rel=1e-6)


@pytest.mark.step2
def test_step2_prepared_scheduler_steps_once_per_process(lab_runs):
    lesson, run = lab_runs(2)["lesson"], lab_runs(2)["scheduler_prepared"]
    steps = len(lesson.learning_rates)
    # two scheduler steps per optimizer step: the linear schedule over 30 steps reaches 0
    # after 15
    assert run.learning_rates[steps // 2 :] == [0.0] * (steps - steps // 2)
    assert min(lesson.learning_rates) > 0
    assert run.losses[:2] == lesson.losses[:2] and run.losses != lesson.losses


# step 3, two processes -------------------------------------------------------------------


@pytest.mark.step3
def test_step3_without_gather_each_process_scores_its_share(lab_runs):
    lesson, run = lab_runs(3)["lesson"], lab_runs(3)["no_gather"]
    assert lesson.scored == [408, 408]
    assert run.scored == [208, 208]  # 26 batches of 8 each, the duplicated tail included
    assert run.losses == lesson.losses  # training is untouched
    assert run.predictions != run.alone_predictions


@pytest.mark.step3
def test_step3_without_the_cut_counts_the_duplicated_tail(lab_runs):
    lesson, run = lab_runs(3)["lesson"], lab_runs(3)["no_cut"]
    assert run.scored == [416, 416] and len(run.predictions) == 416
    assert run.predictions[:408] == lesson.predictions
    assert run.predictions[408:] == lesson.predictions[:8]  # the start, again


@pytest.mark.step3
def test_step3_every_process_printing_and_writing(lab_runs):
    lesson, run = lab_runs(3)["lesson"], lab_runs(3)["every_process_prints_and_writes"]
    assert (lesson.writes, lesson.printed, lesson.bars) == (1, 1, 1)
    assert (run.writes, run.printed, run.bars) == (2, 2, 2)
    assert run.predictions == lesson.predictions


@pytest.mark.step3
def test_step3_with_the_labels_not_gathered_the_metric_refuses_after_training(lab_runs):
    lesson, run = lab_runs(3)["lesson"], lab_runs(3)["labels_not_gathered"]
    assert "Mismatch in the number of predictions (408) and references (208)" in run.error
    assert run.learning_rates == lesson.learning_rates  # it trained; the metric refused
    # the line its record names (from the exception, in the process that raised it) is the
    # script's own call of the metric, the line a student is sent to
    lines = lab_runs(3).scripts["labels_not_gathered"].read_text().splitlines()
    assert run.error_line and "metric.compute(" in lines[run.error_line - 1]
    assert run.bars == 1  # its training bar ran to its end, on the main process alone


@pytest.mark.step3
def test_step3_without_end_training_the_numbers_are_the_same_and_no_process_leaves(lab_runs):
    lesson, run = lab_runs(3)["lesson"], lab_runs(3)["no_end_training"]
    assert lesson.left_group is True and run.left_group is False
    for field in ("losses", "predictions", "accuracy", "f1", "scored", "writes"):
        assert getattr(run, field) == getattr(lesson, field), field


@pytest.mark.step3
def test_step3_gather_for_metrics_is_identical(lab_runs):
    lesson, run = lab_runs(3)["lesson"], lab_runs(3)["gather_for_metrics"]
    for field in ("losses", "predictions", "accuracy", "f1", "scored", "writes"):
        assert getattr(run, field) == getattr(lesson, field), field


@pytest.mark.step3
def test_step3_evaluating_on_the_main_process_alone_with_the_prepared_model_fails(lab_runs):
    # the seed notebook's "standard evaluation loop launched on the main process only", with
    # the model prepare() returned: DDP's forward broadcasts the buffers to processes that
    # stopped, and gloo says the peer closed its connection (in a launch of its own)
    run = lab_runs(3)["main_process_evaluates_alone"]
    assert run.error is not None and "Connection closed by peer" in run.error, run.error
    assert run.learning_rates and run.writes == 0  # it trained, then stopped evaluating


@pytest.mark.step3
def test_step3_evaluating_on_the_main_process_alone_unwrapped_works_and_costs(lab_runs):
    lesson, run = lab_runs(3)["lesson"], lab_runs(3)["main_process_evaluates_alone_unwrapped"]
    assert run.error is None and run.predictions == lesson.predictions
    assert run.losses == lesson.losses and run.writes == 1
    assert run.eval_forwarded == [408, 0] and lesson.eval_forwarded == [208, 208]


@pytest.mark.step3
def test_step3_the_lessons_saved_model_reloads_to_its_trained_weights(lab_runs):
    lesson = lab_runs(3)["lesson"]
    assert lesson.saves == 1
    assert lesson.saved_files == [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    assert lesson.reloaded == lesson.weights and lesson.saved_first_name.startswith("bert.")


@pytest.mark.step3
def test_step3_saving_the_prepared_model_stops_the_main_process(lab_runs):
    # DistributedDataParallel has no save_pretrained: the main process stops after training
    # and evaluating, at the save, and writes neither the model nor metrics.json
    run = lab_runs(3)["prepared_model_saved"]
    assert run.error == (
        "AttributeError: 'DistributedDataParallel' object has no attribute 'save_pretrained'"
    ), run.error
    assert run.learning_rates and run.writes == 0 and run.saved_files is None


@pytest.mark.step3
def test_step3_the_prepared_models_state_dict_reloads_to_random_weights(lab_runs):
    # torch.save of the wrapper's state_dict: every name gains "module.", from_pretrained
    # finds none of the names it expects, and starts from new weights without an error
    lesson, run = lab_runs(3)["lesson"], lab_runs(3)["prepared_state_dict_saved"]
    assert run.error is None and run.predictions == lesson.predictions
    assert run.saved_first_name.startswith("module.bert.")
    assert "pytorch_model.bin" in run.saved_files and run.reloaded != run.weights
    assert not run.reloaded.startswith("cannot load")


@pytest.mark.step3
def test_step3_every_process_saving_into_one_folder_is_said(lab_runs):
    # each process fills its own folder aside and puts it in place: the last one stays, and
    # process 1's holds no weights (transformers writes them on rank 0 alone), so which
    # folder stays depends on which process finishes last; the two saves are what is sure
    lesson, run = lab_runs(3)["lesson"], lab_runs(3)["every_process_saves"]
    assert run.saves == 2 and run.writes == 1 and run.predictions == lesson.predictions
    assert run.saved_files in (lesson.saved_files, ["tokenizer.json", "tokenizer_config.json"])


@pytest.mark.step3
def test_step3_load_state_right_after_save_state_stops_a_process(lab_runs):
    # without wait_for_everyone, process 1 reads the state while the main process still
    # writes it: the file is missing or half written (in a launch of its own)
    run = lab_runs(3)["load_state_without_wait"]
    # the main process lost its connection to process 1, which had stopped with its own error
    assert "Connection closed by peer" in run.error, run.error
    assert "; process 1 stopped with: " in run.error and run.writes == 0, run.error
    from accelerate_course.diagnosis import process_symptoms

    assert [s.name for s in process_symptoms(run)] == ["read_unfinished"]
    assert run.learning_rates  # it trained, then stopped at the load


# step 4, notebook_launcher on two processes, dropout off -----------------------------------


@pytest.mark.step4
def test_step4_plain_accelerator_on_a_cpu_leaves_each_process_alone(lab_runs):
    lesson, run = lab_runs(4)["lesson"], lab_runs(4)["accelerator_without_cpu"]
    assert lesson.processes_alone == 0 and lesson.accelerator_processes == 2
    assert run.processes_reporting == 2 and run.processes_alone == 2
    assert run.distributed_type == "DistributedType.NO"
    assert run.scored == [408, 408] and run.writes == 2
    assert run.weights_equal  # the same training, done twice


@pytest.mark.step4
def test_step4_dynamic_padding_computes_the_same_function(lab_runs):
    lesson, run = lab_runs(4)["lesson"], lab_runs(4)["dynamic_padding"]
    assert lesson.lengths == [128] and len(run.lengths) > 10
    assert run.predictions == lesson.predictions
    assert diagnosis.close(run.losses, lesson.losses)  # to a relative 1e-4, explained in lab


@pytest.mark.step4
def test_step4_loss_item_at_every_step_is_the_same_on_a_cpu(lab_runs):
    lesson, run = lab_runs(4)["lesson"], lab_runs(4)["loss_item_every_step"]
    # the same floats: .item() and one .tolist() at the end read the same values; what it
    # costs on XLA is measured by the XLA lane (tests/test_xla.py)
    assert run.losses == lesson.losses and run.predictions == lesson.predictions


# the README's tables ---------------------------------------------------------------------


def masked(table):
    """Return a what-if table without its last column (the time, which no two runs share)."""
    return [re.sub(r"\|[^|]*\|\s*$", "|", line) for line in table.strip().splitlines()]


def untimed(text):
    """Return a table's text with its times in seconds masked (no two runs share them)."""
    return re.sub(r"\b\d+(\.\d+)? s\b", "<time> s", text)


def measured_on_this_processor():
    """Return whether this processor is the one docs/invariants.md names as the one its
    tables were measured on ("an AMD EPYC (family 26, model 2)")."""
    from accelerate_course.machine import cpuinfo

    page = (REPO / "docs" / "invariants.md").read_text()
    named = re.search(r"family (\d+), model (\d+)\)", page)
    info = cpuinfo()
    return bool(named) and named.groups() == (info.get("cpu family"), info.get("model"))


def bf16_kernels_masked(table):
    """Return an invariants table with the numbers of its bf16 row that depend on the
    processor's bf16 kernels masked: the bf16 run's accuracy, how many predictions and how
    much the losses differ, and so the verdict's first words (on an AMD EPYC Zen 5: 0.5833,
    1 of 408; on an Intel Xeon model 167: 0.5858, 0 of 408). The float32 run's accuracy and
    what accelerator.backward does in bf16 stay compared."""

    def mask(line):
        if not line.startswith("| mixed precision: bf16"):
            return line
        line = re.sub(r"accuracy [\d.]+ against", "accuracy <bf16> against", line)
        line = re.sub(r"\d+ of (\d+) predictions differ", r"<n> of \1 predictions differ", line)
        line = re.sub(r"losses differ by [\d.]+", "losses differ by <bf16>", line)
        return re.sub(
            r"\| (the same predictions|other numbers, as another seed would give);",
            "| <bf16's verdict>;",
            line,
        )

    return "\n".join(map(mask, table.splitlines()))


@pytest.mark.parametrize("step", sorted(STEPS))
def test_the_readme_shows_each_steps_table_as_the_lab_measures_it(lab_runs, step):
    # the English pages; a Chinese page's block is the same table with the notes in Chinese
    # (tests/test_zh_pages.py holds the two equal)
    english = update_readme.ENGLISH
    shown = dict(
        (int(m.group(2)), m.group(3)) for m in update_readme.shown(update_readme.WHATIF, english)
    )
    assert step in shown, f"no lesson page has a what-if table for step {step}"
    measured = update_readme.whatif_block(step, lab_runs(step).rows)
    assert masked(shown[step]) == masked(measured), (
        f"the step {step} what-if table is stale: run make readme WHATIF=1"
    )
    invariants = dict(
        (int(m.group(2)), m.group(3))
        for m in update_readme.shown(update_readme.INVARIANTS, english)
    )
    rows = lab_runs(step).invariant_rows
    assert (step in invariants) == bool(rows), f"step {step}'s invariants table"
    if rows:  # (times aside, as in the what-if tables: "training 0.93 s against 0.85 s")
        shown_table = untimed(invariants[step])
        measured_table = untimed(update_readme.invariants_block(step, rows))
        if not measured_on_this_processor():  # bf16's kernels are the processor's own
            shown_table, measured_table = map(bf16_kernels_masked, (shown_table, measured_table))
        assert shown_table == measured_table, (
            f"the step {step} invariants table is stale: run make readme WHATIF=1"
        )
    questions = dict(
        (int(m.group(2)), m.group(3)) for m in update_readme.shown(update_readme.QUESTIONS, english)
    )
    assert questions.get(step) == update_readme.questions_block(step, lab_runs(step).rows), (
        f"the teacher's page's questions for step {step} are stale: run make readme WHATIF=1"
    )


def test_the_terminal_gets_plain_text_and_the_pages_markdown():
    # make what-if prints for a person at a terminal; the pages get the Markdown: the same
    # rows, as data, rendered twice
    rows = [
        lab.Row("lesson", [], 0, None, ["2 processes", "scored 208 + 208"], "-", 1.0),
        lab.Row("no_cut", ["- a", "+ b"], 7, None, ["2 processes"], "the cut is gone", 1.2),
    ]
    text = whatif.plain_text(3, lab.WhatIf(rows, [], {}))
    assert not any(mark in text for mark in ("<br>", "`", "| ", "**"))
    assert "  change    - a\n            + b\n            and 7 more lines" in text
    assert "  result    the cut is gone" in text
    page = update_readme.whatif_block(3, rows)
    assert (
        "| no_cut | `- a`<br>`+ b`<br>and 7 more lines | 2 processes | the cut is gone | 1.2 s |"
        in page
    )


def test_a_stopped_runs_line_holds_nothing_that_changes_from_run_to_run():
    # the tables and the teacher's questions quote it: gloo's source location on the machine
    # that built torch, and the peer's port, would make every measurement a new table
    from accelerate_course.lab_driver import first_line

    gloo = RuntimeError(
        "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] "
        "Connection closed by peer [127.0.0.1]:14361\nmore"
    )
    assert first_line(gloo) == "Connection closed by peer [127.0.0.1]"
    plain = ValueError("Mismatch in the number of predictions (416) and references (408)")
    assert first_line(plain) == str(plain)
