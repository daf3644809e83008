"""Predictors that complete nothing: side information alone, and the binary metrics' baselines.

- `semantic`: an offset plus a slope on task-example embedding similarity (the paper's §4.1 finding).
- `all_forgotten`, `random`: the trivial and chance baselines of the binary metrics.
"""

from __future__ import annotations

import numpy as np

from .interface import CompletionMethod


class SemanticSimilarity(CompletionMethod):
    """Forgetting from sentence-embedding similarity alone (the paper's negative finding, §4.1):
    Z ≈ a_task + b · cosine(task, example). The slope b is fitted once on the train rows (after
    removing each row's mean); a new task's offset a comes from its known entries. Needs the
    similarity rows of the train and test tasks (`semantic_similarity.npy` of the correlation stage),
    as 2-D arrays or sequences of rows (views of the full similarity matrix: no copy)."""

    name = "semantic"

    def __init__(self, similarity_train=None, similarity_test=None):
        self.similarity_train = similarity_train
        self.similarity_test = similarity_test

    def fit(self, train):
        if self.similarity_train is None or self.similarity_test is None:
            raise ValueError("the semantic method needs the tasks' similarity rows (semantic_similarity.npy)")
        numerator = denom = 0.0
        for z, sim in zip(np.asarray(train), self.similarity_train):  # a row at a time, in float64
            z, sim = z.astype(np.float64), np.asarray(sim, dtype=np.float64)
            sim -= sim.mean()
            numerator += float((z - z.mean()) @ sim)
            denom += float(sim @ sim)
        self.slope_ = numerator / denom if denom > 0 else 0.0
        return self

    def predict(self, known_columns, known_values):
        pred = np.empty((len(known_columns), len(self.similarity_test[0])), dtype=np.float32)
        for row, (sim, columns, values) in enumerate(zip(self.similarity_test, known_columns, known_values)):
            offset = float(np.mean(np.asarray(values, dtype=np.float64) - self.slope_ * sim[columns]))
            np.multiply(sim, self.slope_, out=pred[row], casting="same_kind")
            pred[row] += offset
        return pred


class AllForgotten(CompletionMethod):
    """The trivial baseline for the binary metrics: every example forgotten (a constant score)."""

    name = "all_forgotten"
    regression = False

    def fit(self, train):
        self.n_ = np.asarray(train).shape[1]
        return self

    def predict(self, known_columns, known_values):
        return np.ones((len(known_columns), self.n_), dtype=np.float32)


class RandomScores(CompletionMethod):
    """The chance baseline for the binary metrics: seeded standard-normal scores."""

    name = "random"
    regression = False

    def __init__(self, seed: int = 0):
        self.seed = seed

    def fit(self, train):
        self.n_ = np.asarray(train).shape[1]
        return self

    def predict(self, known_columns, known_values):
        seed = [self.seed, *np.asarray(known_columns)[0, :4].tolist()]  # a different draw per known set
        return np.random.default_rng(seed).standard_normal(size=(len(known_columns), self.n_), dtype=np.float32)
