"""The shipped GLUE MRPC metric module, through evaluate's own API, against scikit-learn."""

import random

import pytest
import torch
from sklearn.metrics import accuracy_score, f1_score

from common.metric import GLUE_MRPC_METRIC


@pytest.fixture(scope="module")
def metric():
    # imported here, not at the top: `import evaluate` takes seconds (it imports transformers'
    # pipelines), and every session pays a module's top-level imports when it collects it,
    # make test STEP=N too, which runs none of these tests
    import evaluate

    return evaluate.load(GLUE_MRPC_METRIC)


def cases():
    rng = random.Random(7)
    yield [1, 0, 1, 1, 0, 1], [1, 1, 1, 0, 0, 1]
    yield [0, 0, 0, 0], [1, 0, 1, 0]  # no paraphrase predicted: F1 is 0
    yield [1, 1, 1], [1, 1, 1]
    for n in (1, 7, 408, 1000):
        yield [rng.randint(0, 1) for _ in range(n)], [rng.randint(0, 1) for _ in range(n)]


@pytest.mark.parametrize("predictions,references", list(cases()))
def test_compute_matches_scikit_learn(metric, predictions, references):
    result = metric.compute(predictions=predictions, references=references)
    assert set(result) == {"accuracy", "f1"}
    # the same ratios of small integers, computed in a different order: equal to 1e-12
    assert result["accuracy"] == pytest.approx(accuracy_score(references, predictions), abs=1e-12)
    assert result["f1"] == pytest.approx(
        f1_score(references, predictions, zero_division=0.0), abs=1e-12
    )


def test_add_batch_with_tensors_equals_one_compute(metric):
    rng = random.Random(3)
    predictions = [rng.randint(0, 1) for _ in range(50)]
    references = [rng.randint(0, 1) for _ in range(50)]
    for start in range(0, 50, 8):  # batches of 8 tensors, as the training loops add them
        metric.add_batch(
            predictions=torch.tensor(predictions[start : start + 8]),
            references=torch.tensor(references[start : start + 8]),
        )
    assert metric.compute() == metric.compute(predictions=predictions, references=references)


def test_known_values(metric):
    # 3 true positives, 1 false positive, 1 false negative, 1 true negative:
    # accuracy 4/6, precision 3/4, recall 3/4, F1 3/4
    result = metric.compute(predictions=[1, 1, 1, 1, 0, 0], references=[1, 1, 1, 0, 1, 0])
    assert result == {"accuracy": 4 / 6, "f1": 0.75}
