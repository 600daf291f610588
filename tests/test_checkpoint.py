"""The embedded checkpoint loads like a hub checkpoint, from its own folder or a copy."""

import logging
import shutil

import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer
from common.checkpoint import EMBEDDED_CHECKPOINT, resolve_checkpoint


def test_the_folder_holds_what_save_pretrained_writes_and_nothing_else():
    names = {p.name for p in EMBEDDED_CHECKPOINT.iterdir()}
    assert names == {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}


def test_loads_from_a_copied_folder_with_a_new_classification_head(tmp_path, caplog):
    folder = tmp_path / "my-bert"
    shutil.copytree(EMBEDDED_CHECKPOINT, folder)
    assert resolve_checkpoint(str(folder)) == str(folder.resolve())

    # transformers' usual load report, as a user sees it, names the new head as missing
    with caplog.at_level(logging.WARNING):
        model = AutoModelForSequenceClassification.from_pretrained(folder, num_labels=2)
    missing = [line for line in caplog.text.splitlines() if "MISSING" in line]
    assert any("classifier.weight" in line for line in missing)
    assert any("classifier.bias" in line for line in missing)

    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert model.config.num_hidden_layers == 2 and model.config.hidden_size == 128

    batch = tokenizer(["Shares of Atlas Bank rose 5 percent."],
                      ["Atlas Bank shares gained 5 percent."], return_tensors="pt")
    assert tokenizer.convert_ids_to_tokens(batch["input_ids"][0])[0] == "[CLS]"
    assert batch["token_type_ids"][0].max() == 1  # the second sentence is segment 1
    with torch.no_grad():
        logits = model(**batch).logits
    assert logits.shape == (1, 2)


def test_the_encoder_is_pretrained_not_random():
    pretrained = AutoModelForSequenceClassification.from_pretrained(EMBEDDED_CHECKPOINT,
                                                                    num_labels=2)
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
    from common.embedded import build_checkpoint
    monkeypatch.delenv("MKL_CBWR", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        build_checkpoint.build(tmp_path / "out")
    message = str(exit_info.value)
    assert message.startswith("error: the builder needs ATEN_CPU_CAPABILITY=avx2 "
                              "MKL_CBWR=COMPATIBLE set before it starts")
    assert "python -m common.embedded.build_checkpoint" in message
    assert not (tmp_path / "out").exists()  # nothing written


def test_the_pair_objective_restates_a_sentence_by_one_part_between_commas():
    # "the same" in the pair objective is A itself or A with one detail less or more, as
    # MRPC's paraphrases often are: the shortest part after the first comma dropped, or the
    # shortest such part of another sentence added, never one A already has
    import random
    from common.embedded.build_checkpoint import clauses, corrupt, restate, train_sentences
    sentence = "Acme will buy Beta for $5 billion, the company said, a record."
    donor = "Police arrested a man, one of 30 cases this year."
    rng = random.Random(0)
    told = {" ".join(restate(sentence, [donor], rng)) for _ in range(100)}
    assert told == {"Acme will buy Beta for $5 billion, the company said.",
                    "Acme will buy Beta for $5 billion, the company said, a record, "
                    "one of 30 cases this year."}
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
