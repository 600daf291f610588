"""The take-home task on saving (takehome/mrpc-resume/): a model that reloads to the run's own
predictions, and a run that resumes from its saved state to the same weights. Its answer is
in no public file (a teacher keeps one in a private copy: make private-copy), so no test here
builds it: the untouched script and two mistakes that hold none of its lines are graded end to
end, and the resume check's verdicts on runs made up here, without a process."""

import types

import pytest
import torch

from accelerate_course import check, evidence, takehome

TASK = "mrpc-resume"
START = takehome.tasks()[TASK].start.read_text()
SAVE_GUARD = "    if accelerator.is_main_process:\n        # the trained model"

# name -> (the file, the check that must fail, its hint)
MISTAKES = {
    # every process saves the model and writes metrics.json, into the same folders
    "every_process_saves": (
        START.replace(SAVE_GUARD, "    if True:\n        # the trained model"),
        "one_writer",
        "metrics.json was written 2 times",
    ),
    # --resume-from read, then dropped: the "resumed" run trains from the start
    "resume_ignored": (
        START.replace("saving.save_state_at, saving.resume_from", "saving.save_state_at, None"),
        "resumes",
        "the resumed run trained 120 optimizer steps, of the 120 of "
        "a whole run: it did not go on from the saved state",
    ),
}


def grade_resume(folder):
    """{name: (its checks, its score)} for the untouched script and each mistake."""
    texts = {"untouched": START, **{name: text for name, (text, _, _) in MISTAKES.items()}}
    assert all(text != START for text in list(texts.values())[1:])  # each replacement found
    paths = {}
    for name, text in texts.items():
        (folder / name).mkdir()
        paths[name] = folder / name / "train.py"
        paths[name].write_text(text)
    grading = check.grading_of(TASK)
    runs = check.runs_for(grading, paths, folder / "runs")
    return {
        name: (checks, check.score(grading, checks))
        for name in paths
        for checks in [check.grade(grading, name, runs)]
    }


# made while other tests run (tests/helpers/ahead.py)
MADE_AHEAD = {"graded": grade_resume}


@pytest.fixture(scope="module")
def graded(made_ahead):
    result = made_ahead(grade_resume)
    for name, (checks, score) in result.items():
        print(
            f"\n{name}: {score} | "
            + " | ".join(f"FAIL {c.key}: {c.hint}" for c in checks if not c.passed)
        )
    return result


@pytest.mark.runs
def test_the_untouched_script_fails_both_saves_and_scores_nothing(graded):
    checks, score = graded["untouched"]
    failed = {c.key: c.hint for c in checks if not c.passed}
    assert sorted(failed) == ["own_predictions", "resumes", "two_machines"]
    assert score == (0, 10)
    # the model it saved does not predict what it wrote (its weights are the wrapper's,
    # named module.*, which from_pretrained leaves out: a new head and encoder drawn at random)
    assert (
        "of the predictions written differ from what the model predicts for the split "
        "(408 pairs)" in failed["own_predictions"]
    )
    # process 1's random generators were never saved: its dropout goes on otherwise
    assert failed["resumes"] == (
        "the resumed run ended with other weights than the run that saved the state: the "
        "state was not saved whole (its folder holds custom_checkpoint_0.pkl, "
        "model.safetensors, optimizer.bin, random_states_0.pkl, steps.txt)"
    )


@pytest.mark.runs
@pytest.mark.parametrize("name", sorted(MISTAKES))
def test_each_mistake_fails_its_check_with_its_hint(graded, name):
    _, key, hint = MISTAKES[name]
    checks, score = graded[name]
    failed = {c.key: c.hint for c in checks if not c.passed}
    assert key in failed and hint in failed[key], failed
    assert score == (0, 10)


def made_up_run(folder, steps, tensors, error=None, state=("random_states_0.pkl",)):
    """A run as resume_problem reads it: its folder (with a saved state), its optimizer steps
    as its processes reported them, the hash of the weights it saved."""
    (folder / "output" / "state").mkdir(parents=True, exist_ok=True)
    for name in state:
        (folder / "output" / "state" / name).write_text("")
    return types.SimpleNamespace(
        folder=str(folder),
        error=error,
        learning_rates=[0.1] * steps,
        outside=types.SimpleNamespace(saved_tensors=tensors),
    )


def test_a_resume_passes_when_it_trains_the_steps_left_to_the_same_weights(tmp_path):
    run = made_up_run(tmp_path / "run", 120, "abc")
    assert check.resume_problem(run, made_up_run(tmp_path / "resumed", 75, "abc")) == ""
    assert check.resume_problem(run, made_up_run(tmp_path / "resumed", 75, "abd")).startswith(
        "the resumed run ended with other weights than the run that saved the state"
    )
    assert check.resume_problem(run, made_up_run(tmp_path / "resumed", 120, "abc")).startswith(
        "the resumed run trained 120 optimizer steps"
    )
    assert check.resume_problem(run, made_up_run(tmp_path / "resumed", 75, None)).startswith(
        "the grader found no weights file to compare"
    )
    assert (
        check.resume_problem(made_up_run(tmp_path / "none", 120, "abc", state=()), None)
        == "the run saved no training state in <output-dir>/state to resume from"
    )


def test_the_saved_tensors_are_compared_whatever_the_weights_file_and_the_names(tmp_path):
    # the same tensors, as save_pretrained writes them and as a wrapper's state_dict saved
    # with torch.save names them: one hash; one value changed: another
    from safetensors.torch import save_file

    tensors = {
        "bert.embeddings.word_embeddings.weight": torch.arange(6.0).reshape(2, 3),
        "classifier.bias": torch.tensor([0.5, -0.5]),
    }
    (tmp_path / "a").mkdir()
    save_file(tensors, tmp_path / "a" / "model.safetensors")
    (tmp_path / "b").mkdir()
    torch.save({f"module.{k}": v for k, v in tensors.items()}, tmp_path / "b" / "pytorch_model.bin")
    (tmp_path / "c").mkdir()
    save_file(
        {**tensors, "classifier.bias": torch.tensor([0.5, -0.25])},
        tmp_path / "c" / "model.safetensors",
    )
    hashes = [evidence.saved_tensors(tmp_path / x) for x in "abc"]
    assert hashes[0] == hashes[1] != hashes[2] and None not in hashes
    assert evidence.saved_tensors(tmp_path / "nothing") is None
