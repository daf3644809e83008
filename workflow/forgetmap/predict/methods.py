"""Completion methods: fit on the rows of known tasks, fold in new rows from their known columns.

Every `predict` is batched over the T new tasks: no Python loop runs over tasks, examples or entries.

- `mean`: each example's mean forgetting over the train tasks.
- `additive`: Z ≈ μ + a_task + b_example; a new task's offset is a ridge estimate from its known
  entries (the reference's BaselineOnly, solved in closed form instead of 1,000 SGD epochs).
- `knn`: the reference's KNNBaseline: the additive baseline plus the similarity-weighted residuals
  of the k most similar train tasks, similarity 1 / (1 + mean squared difference on the known columns).
- `mf`: a rank-r factorisation of the column-centred train rows (their top right singular vectors);
  a new row is folded in by one ridge solve on its known columns (offset plus r factors). Rank and
  ridge are chosen by validation inside the train rows.
- `logistic_mf`, `implicit_als`: the binary matrix 1[Z > threshold], by logistic MF and by the
  implicit package's ALS, each folding a new task in from its known entries.
- `semantic`: an offset plus a slope on task-example embedding similarity (no completion at all).
- `all_forgotten`, `random`: the trivial and chance baselines of the binary metrics.
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit


class CompletionMethod:
    """fit(train (M, N)) -> self; predict(known_columns (T, k) int, known_values (T, k)) -> (T, N)."""

    name = "base"
    regression = True  # False: a baseline for the binary metrics only (its RMSE is not reported)

    def fit(self, train: np.ndarray) -> "CompletionMethod":
        raise NotImplementedError

    def predict(self, known_columns: np.ndarray, known_values: np.ndarray) -> np.ndarray:
        raise NotImplementedError


class ColumnMean(CompletionMethod):
    name = "mean"

    def fit(self, train):
        self.column_mean_ = np.asarray(train).mean(axis=0, dtype=np.float64)
        return self

    def predict(self, known_columns, known_values):
        return np.broadcast_to(self.column_mean_, (len(known_columns), len(self.column_mean_))).copy()


class Additive(CompletionMethod):
    """μ + a_task + b_example, fitted by alternating ridge means (exact least squares for λ = 0)."""

    name = "additive"

    def __init__(self, reg: float = 1.0, n_iter: int = 10):
        self.reg = reg
        self.n_iter = n_iter

    def fit(self, train):
        m, n = train.shape
        row_sums = train.sum(axis=1, dtype=np.float64)
        col_sums = train.sum(axis=0, dtype=np.float64)
        self.mu_ = row_sums.sum() / (m * n)
        a, b = np.zeros(m), np.zeros(n)
        # alternating ridge means need only row and column sums: no M x N temporary
        for _ in range(self.n_iter):  # complete data: converges in a couple of sweeps
            b = (col_sums - m * self.mu_ - a.sum()) / (m + self.reg)
            a = (row_sums - n * self.mu_ - b.sum()) / (n + self.reg)
        self.task_offset_, self.example_offset_ = a, b
        return self

    def fold_in(self, known_columns, known_values):
        residual = known_values - self.mu_ - self.example_offset_[known_columns]
        return residual.sum(1) / (known_columns.shape[1] + self.reg)

    def baseline(self, task_offsets):
        return self.mu_ + task_offsets[:, None] + self.example_offset_[None, :]

    def predict(self, known_columns, known_values):
        return self.baseline(self.fold_in(known_columns, np.asarray(known_values, dtype=np.float64)))


class KNNBaseline(CompletionMethod):
    name = "knn"

    def __init__(self, k: int = 40, reg: float = 1.0):
        self.k = k
        self.reg = reg

    def fit(self, train):
        self.train_ = np.asarray(train)
        self.additive_ = Additive(self.reg).fit(self.train_)
        add = self.additive_
        self.residual_ = np.empty(self.train_.shape, dtype=np.float32)
        for i, row in enumerate(self.train_):  # row by row: no float64 M x N baseline
            self.residual_[i] = row - (add.mu_ + add.task_offset_[i] + add.example_offset_)
        return self

    def predict(self, known_columns, known_values):
        known_values = np.asarray(known_values, dtype=np.float64)
        # (T, M): mean squared difference with every train task on each new task's known columns
        neighbours = self.train_[:, known_columns].astype(np.float64)    # (M, T, k)
        msd = ((neighbours - known_values[None]) ** 2).mean(axis=2).T    # (T, M)
        sim = 1.0 / (1.0 + msd)
        k = min(self.k, sim.shape[1])
        cut = np.partition(sim, sim.shape[1] - k, axis=1)[:, sim.shape[1] - k][:, None]
        weights = np.where(sim >= cut, sim, 0.0)
        weights /= weights.sum(axis=1, keepdims=True)
        base = self.additive_.baseline(self.additive_.fold_in(known_columns, known_values))
        return base + weights @ self.residual_


class FoldInMF(CompletionMethod):
    """Rank-r factors of the column-centred train rows; new rows by ridge regression on known columns."""

    name = "mf"

    def __init__(self, rank: int | None = None, reg: float | None = None, ranks=(1, 2, 3, 5, 8),
                 regs=(0.001, 0.01, 0.1, 1.0, 10.0), validation_k: int = 30, seed: int = 0):
        self.rank, self.reg = rank, reg
        self.ranks, self.regs = ranks, regs
        self.validation_k, self.seed = validation_k, seed

    @staticmethod
    def _spectrum(train):
        """Column means and the SVD of the centred rows; factors of any rank are slices of it."""
        mean = train.mean(axis=0, dtype=np.float64)
        _, s, vt = np.linalg.svd((train - mean).astype(np.float32), full_matrices=False)
        return mean, vt.T * (s / np.sqrt(len(train))).astype(np.float32)  # (N, min(M, N)), scaled like the data

    @staticmethod
    def _fold(mean, factors, reg, known_columns, known_values):
        """Ridge regression of each new row's known entries on [1, factors]: one small solve per row."""
        x = np.concatenate([np.ones(known_columns.shape + (1,)), factors[known_columns]], axis=2)  # (T,k,r+1)
        y = known_values - mean[known_columns]
        penalty = reg * np.eye(x.shape[2])
        penalty[0, 0] = 0.0  # the offset is not shrunk
        xt = x.transpose(0, 2, 1)
        w = np.linalg.solve(xt @ x + penalty, xt @ y[..., None])[..., 0]
        return mean[None, :] + w[:, :1] + w[:, 1:] @ factors.T

    def _validate(self, train):
        """Hold out up to 20 train rows in 5 folds, reveal k random columns of each, and keep the
        (rank, ridge) with the smallest squared error on their hidden entries."""
        rng = np.random.default_rng(self.seed)
        m, n = train.shape
        rows = rng.permutation(m)[:min(m, 20)]
        k = min(self.validation_k, n - 1)
        known = np.stack([rng.choice(n, k, replace=False) for _ in rows])
        hidden = np.ones((len(rows), n), dtype=bool)
        np.put_along_axis(hidden, known, False, axis=1)
        errors: dict[tuple[int, float], float] = {}
        for held in np.array_split(np.arange(len(rows)), min(len(rows), 5)):
            rest = np.setdiff1d(np.arange(m), rows[held])
            mean, factors = self._spectrum(train[rest])
            truth = train[rows[held]]
            for rank in self.ranks:
                if rank > min(len(rest) - 1, factors.shape[1]):
                    continue
                for reg in self.regs:
                    pred = self._fold(mean, factors[:, :rank], reg, known[held],
                                      np.take_along_axis(truth, known[held], axis=1))
                    errors[(rank, reg)] = errors.get((rank, reg), 0.0) + float(
                        ((pred - truth) ** 2)[hidden[held]].sum(dtype=np.float64))
        return min(errors, key=errors.get) if errors else (1, 1.0)

    def fit(self, train):
        train = np.asarray(train)
        if self.rank is None or self.reg is None:
            self.rank_, self.reg_ = self._validate(train) if len(train) >= 3 else (1, 1.0)
        else:
            self.rank_, self.reg_ = self.rank, self.reg
        self.mean_, factors = self._spectrum(train)
        self.rank_ = max(1, min(self.rank_, factors.shape[1]))
        self.factors_ = factors[:, :self.rank_]
        return self

    def predict(self, known_columns, known_values):
        return self._fold(self.mean_, self.factors_, self.reg_, known_columns,
                          np.asarray(known_values, dtype=np.float64))


class LogisticMF(CompletionMethod):
    """Logistic matrix factorisation of the binary matrix Y = 1[Z > threshold] (reference §5.4).

    P(Y = 1) = σ(c_task + d_example + w_taskᵀ h_example), fitted once on the train rows by L-BFGS on the
    L2-penalised log-likelihood (the reference runs 5,000 full-batch ascent steps per test task); a new
    task's (c, w) is a ridge logistic regression (`fold_reg`) on its k known entries, a few batched
    Newton steps.
    Predictions are logits.
    """

    name = "logistic_mf"
    regression = False

    def __init__(self, rank: int = 5, reg: float = 0.1, fold_reg: float = 3.0, threshold: float = 0.0,
                 max_iter: int = 300, seed: int = 0):
        self.rank, self.reg, self.fold_reg, self.threshold = rank, reg, fold_reg, threshold
        self.max_iter, self.seed = max_iter, seed

    def fit(self, train):
        from scipy.optimize import minimize

        y = (np.asarray(train) > self.threshold).astype(np.float64)
        m, n = y.shape
        r = self.rank
        rng = np.random.default_rng(self.seed)
        x0 = np.concatenate([np.zeros(m + n), 0.01 * rng.normal(size=(m + n) * r)])

        def unpack(x):
            c, d = x[:m], x[m:m + n]
            w = x[m + n:m + n + m * r].reshape(m, r)
            h = x[m + n + m * r:].reshape(r, n)
            return c, d, w, h

        def objective(x):
            c, d, w, h = unpack(x)
            logits = c[:, None] + d[None, :] + w @ h
            p = expit(logits)
            nll = (np.logaddexp(0.0, logits) - y * logits).sum()
            g = p - y  # d nll / d logits
            penalty = 0.5 * self.reg * ((w ** 2).sum() + (h ** 2).sum())
            grad = np.concatenate([g.sum(1), g.sum(0), (g @ h.T + self.reg * w).ravel(), (w.T @ g + self.reg * h).ravel()])
            return nll + penalty, grad

        result = minimize(objective, x0, jac=True, method="L-BFGS-B", options={"maxiter": self.max_iter})
        _, self.example_bias_, _, self.example_factors_ = unpack(result.x)
        return self

    def predict(self, known_columns, known_values):
        y = (np.asarray(known_values) > self.threshold).astype(np.float64)          # (T, k)
        x = np.concatenate([np.ones(known_columns.shape + (1,)),
                            self.example_factors_[:, known_columns].transpose(1, 2, 0)], axis=2)  # (T, k, r+1)
        offset = self.example_bias_[known_columns]
        w = np.zeros((len(y), x.shape[2]))
        # k binary labels cannot pin down rank + 1 weights: a firmer ridge than the fit's keeps them sane
        penalty = self.fold_reg * np.eye(x.shape[2])
        penalty[0, 0] = 1e-6
        for _ in range(25):  # Newton steps, all tasks at once
            logits = (x @ w[..., None])[..., 0] + offset
            p = expit(logits)
            grad = (x * (p - y)[..., None]).sum(1) + w @ penalty
            hess = (x.transpose(0, 2, 1) * (p * (1 - p))[:, None, :]) @ x + penalty
            w -= np.linalg.solve(hess, grad[..., None])[..., 0]
        return w[:, :1] + self.example_bias_[None, :] + w[:, 1:] @ self.example_factors_


class ImplicitALS(CompletionMethod):
    """ALS for implicit feedback (the implicit package) on the binary matrix Y = 1[Z > threshold]:
    forgotten examples are positives, the rest weighted zeros; a new task is folded in with
    `recalculate_user` from its known forgotten examples. Predictions are scores."""

    name = "implicit_als"
    regression = False

    def __init__(self, factors: int = 8, regularization: float = 0.1, alpha: float = 1.0, iterations: int = 15,
                 threshold: float = 0.0, seed: int = 0):
        self.factors, self.regularization, self.alpha = factors, regularization, alpha
        self.iterations, self.threshold, self.seed = iterations, threshold, seed

    def fit(self, train):
        from implicit.cpu.als import AlternatingLeastSquares
        from scipy.sparse import csr_matrix

        self.model_ = AlternatingLeastSquares(factors=self.factors, regularization=self.regularization,
                                              alpha=self.alpha, iterations=self.iterations, random_state=self.seed,
                                              num_threads=1, calculate_training_loss=False)
        self.model_.fit(csr_matrix((np.asarray(train) > self.threshold).astype(np.float32)), show_progress=False)
        self.n_ = np.asarray(train).shape[1]
        return self

    def predict(self, known_columns, known_values):
        from scipy.sparse import csr_matrix

        positive = np.asarray(known_values) > self.threshold
        rows = np.repeat(np.arange(len(known_columns)), known_columns.shape[1])[positive.ravel()]
        cols = np.asarray(known_columns).ravel()[positive.ravel()]
        items = csr_matrix((np.ones(len(rows), np.float32), (rows, cols)), shape=(len(known_columns), self.n_))
        users = self.model_.recalculate_user(np.arange(len(known_columns)), items)
        return np.asarray(users) @ np.asarray(self.model_.item_factors).T


class SemanticSimilarity(CompletionMethod):
    """Forgetting from sentence-embedding similarity alone (the paper's negative finding, §4.1):
    Z ≈ a_task + b · cosine(task, example). The slope b is fitted once on the train rows (after
    removing each row's mean); a new task's offset a comes from its known entries. Needs the
    similarity rows of the train and test tasks (`semantic_similarity.npy` of the correlation stage)."""

    name = "semantic"

    def __init__(self, similarity_train=None, similarity_test=None):
        self.similarity_train = similarity_train
        self.similarity_test = similarity_test

    def fit(self, train):
        if self.similarity_train is None or self.similarity_test is None:
            raise ValueError("the semantic method needs the tasks' similarity rows (semantic_similarity.npy)")
        z = np.asarray(train, dtype=np.float64)
        sim = np.asarray(self.similarity_train, dtype=np.float64)
        zc, sc = z - z.mean(1, keepdims=True), sim - sim.mean(1, keepdims=True)
        denom = (sc * sc).sum()
        self.slope_ = float((zc * sc).sum() / denom) if denom > 0 else 0.0
        return self

    def predict(self, known_columns, known_values):
        sim = np.asarray(self.similarity_test, dtype=np.float64)
        offset = (np.asarray(known_values) - self.slope_ * np.take_along_axis(sim, known_columns, axis=1)).mean(1)
        return offset[:, None] + self.slope_ * sim


class AllForgotten(CompletionMethod):
    """The trivial baseline for the binary metrics: every example forgotten (a constant score)."""

    name = "all_forgotten"
    regression = False

    def fit(self, train):
        self.n_ = np.asarray(train).shape[1]
        return self

    def predict(self, known_columns, known_values):
        return np.ones((len(known_columns), self.n_))


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
        return np.random.default_rng(seed).normal(size=(len(known_columns), self.n_))


METHODS = {cls.name: cls for cls in (ColumnMean, Additive, KNNBaseline, FoldInMF, LogisticMF, ImplicitALS,
                                     SemanticSimilarity, AllForgotten, RandomScores)}


def make_method(name: str, **params) -> CompletionMethod:
    from .reference import NAMES as REFERENCE, SurpriseMethod

    if name in REFERENCE:
        return SurpriseMethod(name, **params)
    if name not in METHODS:
        raise KeyError(f"unknown prediction method {name!r}; available: {', '.join([*METHODS, *REFERENCE])}")
    return METHODS[name](**params)
