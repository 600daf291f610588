"""The embedded checkpoint loads like a hub checkpoint, from its own folder or a copy."""

import shutil

import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from common.checkpoint import EMBEDDED_CHECKPOINT, resolve_checkpoint


def test_the_folder_holds_what_save_pretrained_writes_and_nothing_else():
    names = {p.name for p in EMBEDDED_CHECKPOINT.iterdir()}
    assert names == {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}


def test_loads_from_a_copied_folder_with_a_new_classification_head(tmp_path):
    folder = tmp_path / "my-bert"
    shutil.copytree(EMBEDDED_CHECKPOINT, folder)
    assert resolve_checkpoint(str(folder)) == str(folder.resolve())

    # the new head is what transformers finds missing (its load report lists it as MISSING);
    # asked of from_pretrained itself, not read from its log: a grading made ahead in another
    # thread (tests/helpers/ahead.py) turns transformers' logging down while it reloads models
    model, loading = AutoModelForSequenceClassification.from_pretrained(
        folder, num_labels=2, output_loading_info=True
    )
    assert {"classifier.weight", "classifier.bias"} <= set(loading["missing_keys"])

    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert model.config.num_hidden_layers == 2 and model.config.hidden_size == 128

    batch = tokenizer(
        ["Shares of Atlas Bank rose 5 percent."],
        ["Atlas Bank shares gained 5 percent."],
        return_tensors="pt",
    )
    assert tokenizer.convert_ids_to_tokens(batch["input_ids"][0])[0] == "[CLS]"
    assert batch["token_type_ids"][0].max() == 1  # the second sentence is segment 1
    with torch.no_grad():
        logits = model(**batch).logits
    assert logits.shape == (1, 2)


def test_the_encoder_is_pretrained_not_random():
    pretrained = AutoModelForSequenceClassification.from_pretrained(
        EMBEDDED_CHECKPOINT, num_labels=2
    )
    fresh = AutoModelForSequenceClassification.from_config(pretrained.config)
    a = pretrained.bert.encoder.layer[1].output.dense.weight
    b = fresh.bert.encoder.layer[1].output.dense.weight
    # a fresh layer keeps the initialiser's spread (std 0.02); training moved these weights
    assert abs(b.std().item() - 0.02) < 0.002
    assert abs(a.std().item() - 0.02) > 0.005


def test_a_folder_without_config_is_refused_with_one_line(tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        resolve_checkpoint(str(tmp_path))
    assert str(exit_info.value).startswith("error: checkpoint folder")
    assert "save_pretrained" in str(exit_info.value)


def test_the_builder_refuses_to_build_on_kernels_it_did_not_pin(tmp_path, monkeypatch):
    # torch reads ATEN_CPU_CAPABILITY when it starts and MKL reads MKL_CBWR at its first call,
    # so a build inside a process started without them (this one) would run this machine's
    # own kernels and give other bytes: build() refuses, and main() restarts itself with them
    from accelerate_course.maintain.embedded import build_checkpoint

    monkeypatch.delenv("MKL_CBWR", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        build_checkpoint.build(tmp_path / "out")
    message = str(exit_info.value)
    assert message.startswith(
        "error: the builder needs ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=COMPATIBLE set before it starts"
    )
    assert "python -m accelerate_course.maintain.embedded.build_checkpoint" in message
    assert not (tmp_path / "out").exists()  # nothing written


def test_the_pair_objective_restates_a_sentence_by_one_part_between_commas():
    # "the same" in the pair objective is A itself or A with one detail less or more, as
    # MRPC's paraphrases often are: the shortest part after the first comma dropped, or the
    # shortest such part of another sentence added, never one A already has
    import random

    from accelerate_course.maintain.embedded.build_checkpoint import (
        clauses,
        corrupt,
        restate,
        train_sentences,
    )

    sentence = "Acme will buy Beta for $5 billion, the company said, a record."
    donor = "Police arrested a man, one of 30 cases this year."
    rng = random.Random(0)
    told = {" ".join(restate(sentence, [donor], rng)) for _ in range(100)}
    assert told == {
        "Acme will buy Beta for $5 billion, the company said.",
        "Acme will buy Beta for $5 billion, the company said, a record, one of 30 cases this year.",
    }
    # nothing to drop or add: the sentence itself; a part it already has is not added again
    assert restate("Acme will buy Beta.", ["Beta rose."], rng) == "Acme will buy Beta.".split()
    told = {" ".join(restate(donor, [donor], rng)) for _ in range(100)}
    assert told == {"Police arrested a man.", donor}

    # in corrupt(), both count as "the same" (0); every other B that differs from A is 1
    sentences = train_sentences()
    firsts = random.Random(1).sample(sentences, 500)
    restated = 0
    rng = random.Random(2)
    for a in firsts:
        words, different = corrupt(a, sentences, rng)
        if different == 0 and words != a.split():
            restated += 1
            assert abs(len(clauses(a)) - len(clauses(" ".join(words)))) == 1
        elif words != a.split():
            assert different == 1
    # a restated B is drawn for 15 % of the pairs (one draw in [0.2, 0.35)); a few of those
    # come out as A itself (a sentence without commas whose 50 donors offer no new part)
    assert 40 <= restated <= 110


# checkpoints of other families, built here (tests/helpers/tiny_checkpoints.py): steps 1 and
# 4 train them as they train the embedded BERT; BART and T5 (encoder-decoders that have a
# classification head) on step 1
FAMILIES = {
    1: ("gpt2", "roberta", "distilbert", "bart", "t5"),
    4: ("gpt2", "roberta", "distilbert"),
}


@pytest.fixture(scope="module")
def other_families(tmp_path_factory):
    """{step: ({family: measuring.Run}, the folder of its runs)}: each step's runs of the tiny
    checkpoints, one launch a step, the launches side by side (one thread per process: step
    1's one and step 4's two share the 2 cores)."""
    import tiny_checkpoints
    from conftest import STEPS

    from accelerate_course import lab_runs

    folder = tmp_path_factory.mktemp("families")
    built = {kind: tiny_checkpoints.build(kind, folder / kind) for kind in tiny_checkpoints.KINDS}
    batches = [
        lab_runs.lab_batch(
            step,
            {
                kind: (STEPS[step], {}, ["--max-train-steps", "6", "--checkpoint", built[kind]])
                for kind in kinds
            },
            folder / f"step{step}",
            env={"OMP_NUM_THREADS": "1"},
        )
        for step, kinds in FAMILIES.items()
    ]
    return {
        step: (runs, folder / f"step{step}")
        for step, runs in zip(FAMILIES, lab_runs.run_batches(batches))
    }


@pytest.mark.runs
@pytest.mark.parametrize("step", sorted(FAMILIES))
def test_checkpoints_of_other_families_train(other_families, step):
    runs, _ = other_families[step]
    assert sorted(runs) == sorted(FAMILIES[step])
    for kind, run in runs.items():
        assert run.error is None, (kind, run.error)
        assert len(run.losses) == 6 and len(run.predictions) == 408, kind
        assert run.processes_reporting == (1 if step == 1 else 2), kind
        if step == 4:  # fixed shapes with every family's own padding token
            assert run.lengths == [128], (kind, run.lengths)
        # the saved model reloads to the trained weights, but a BART's, whose saved config
        # lacks its number of labels (test_a_saved_bart_reloads_only_told_its_two_labels)
        if kind == "bart":
            assert run.reloaded.startswith("cannot load"), run.reloaded
        else:
            assert run.reloaded == run.weights, (kind, run.reloaded)


@pytest.mark.runs
def test_a_saved_bart_reloads_only_told_its_two_labels(other_families):
    # transformers 5.24.0 leaves num_labels and id2label out of a saved config whose labels
    # are PretrainedConfig's default (2, LABEL_0 and LABEL_1); BartConfig's own default is 3,
    # so from_pretrained(folder) builds a 3-class head that the saved 2-class one does not
    # fit, and stops; told num_labels=2, it loads the trained weights
    import json

    from transformers import AutoModelForSequenceClassification

    from accelerate_course.measuring import fingerprint

    runs, folder = other_families[1]
    saved = folder / "bart" / "output" / "model"
    assert "id2label" not in json.loads((saved / "config.json").read_text())
    with pytest.raises(RuntimeError, match="ignore_mismatched_sizes"):
        AutoModelForSequenceClassification.from_pretrained(saved)
    reloaded = AutoModelForSequenceClassification.from_pretrained(saved, num_labels=2)
    assert fingerprint(reloaded) == runs["bart"].weights


@pytest.mark.runs
def test_a_tokenizer_without_a_padding_token_pads_with_its_end_of_text_token(other_families):
    # GPT-2's tokenizer has no padding token: one note line says what pads instead, on one
    # process only (step 4 runs 2)
    for step in FAMILIES:
        _, folder = other_families[step]
        notes = [
            line
            for out in sorted((folder / "gpt2").glob("rank*.out"))
            for line in out.read_text().splitlines()
            if line.startswith("note: the tokenizer")
        ]
        assert notes == [
            "note: the tokenizer of gpt2 has no padding token: it pads with its "
            "end-of-text token '<|endoftext|>' (id 0), and the model is told so"
        ], notes
