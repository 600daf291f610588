"""GLUE MRPC metric for `evaluate`: accuracy and F1 of the paraphrase class (label 1).

A local stand-in for `evaluate.load("glue", "mrpc")`, which fetches its script from the
Hugging Face Hub. It computes the same two numbers and is loaded the same way:
`evaluate.load("path/to/common/glue_mrpc")`, then `add_batch(...)` and `compute()`.
"""

import datasets
import evaluate
import numpy as np

_DESCRIPTION = "GLUE MRPC: accuracy, and F1 with label 1 (paraphrase) as the positive class."
_KWARGS_DESCRIPTION = """
Args:
    predictions: predicted labels, 0 or 1.
    references: true labels, 0 or 1.
Returns:
    accuracy: fraction of predictions equal to the references.
    f1: 2 * precision * recall / (precision + recall) for label 1; 0.0 when no label 1 is
        predicted or present.
"""
_CITATION = (
    "Dolan and Brockett (2005), Automatically Constructing a Corpus of Sentential Paraphrases."
)


class GlueMrpc(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {"predictions": datasets.Value("int64"), "references": datasets.Value("int64")}
            ),
        )

    def _compute(self, predictions, references):
        predictions = np.asarray(predictions)
        references = np.asarray(references)
        true_positives = int(np.sum((predictions == 1) & (references == 1)))
        predicted_positives = int(np.sum(predictions == 1))
        actual_positives = int(np.sum(references == 1))
        # F1 = 2 TP / (predicted positives + actual positives), the same as 2PR / (P + R)
        denominator = predicted_positives + actual_positives
        f1 = 2 * true_positives / denominator if denominator else 0.0
        accuracy = float(np.mean(predictions == references)) if len(references) else 0.0
        return {"accuracy": accuracy, "f1": float(f1)}
