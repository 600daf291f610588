"""Two baselines for the validation split, to put the model's accuracy in context.

    python -m accelerate_course.maintain.baselines [--dataset embedded|glue|FOLDER]

- majority class: always predict the more frequent label of the train split;
- word overlap: scikit-learn logistic regression on four overlap features of each pair
  (Jaccard similarity of the two word sets, the share of each sentence's words found in the
  other, and the relative difference in length), fitted on the train split.
"""

import argparse
import re

import numpy as np
from sklearn.linear_model import LogisticRegression

from common.data import load_splits


def words(text):
    """Return the set of lower-cased words of a sentence."""
    return set(re.findall(r"\w+", text.lower()))


def overlap_features(sentence1, sentence2):
    """Return [jaccard, share of 1 in 2, share of 2 in 1, relative length difference]."""
    a, b = words(sentence1), words(sentence2)
    shared = len(a & b)
    return [
        shared / max(len(a | b), 1),
        shared / max(len(a), 1),
        shared / max(len(b), 1),
        abs(len(a) - len(b)) / max(len(a), len(b), 1),
    ]


def baselines(raw):
    """Return {"majority": accuracy, "overlap": accuracy, "overlap_predictions": [...]} on the
    validation split of a raw MRPC DatasetDict."""
    train, validation = raw["train"], raw["validation"]
    y_train = np.array(train["label"])
    y_valid = np.array(validation["label"])
    majority_label = int(np.bincount(y_train).argmax())
    x_train = [overlap_features(a, b) for a, b in zip(train["sentence1"], train["sentence2"])]
    x_valid = [
        overlap_features(a, b) for a, b in zip(validation["sentence1"], validation["sentence2"])
    ]
    predictions = LogisticRegression().fit(x_train, y_train).predict(x_valid)
    return {
        "majority": float(np.mean(y_valid == majority_label)),
        "overlap": float(np.mean(predictions == y_valid)),
        "overlap_predictions": predictions.tolist(),
    }


def main():
    parser = argparse.ArgumentParser(
        prog="python -m accelerate_course.maintain.baselines", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--dataset", default="embedded")
    args = parser.parse_args()
    result = baselines(load_splits(args.dataset))
    print(f"majority class: accuracy {result['majority']:.4f}")
    print(f"word overlap (logistic regression): accuracy {result['overlap']:.4f}")


if __name__ == "__main__":
    main()
