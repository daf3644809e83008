"""Completion of the binary matrix of forgotten examples (`forgetmap.matrix.forgotten`).

- `logistic_mf`: logistic matrix factorisation (reference §5.4), fitted in two bounded stages.
- `implicit_als`: the implicit package's ALS for implicit feedback, forgotten examples as positives.

Both fold a new task in from its known entries; their predictions are scores (logits), not Z.
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit

from ..matrix import forgotten
from .interface import CompletionMethod, sample_columns
from .metrics import roc_auc


def ridge_logistic(design: np.ndarray, labels: np.ndarray, offset: np.ndarray, penalty: np.ndarray,
                   steps: int = 25) -> np.ndarray:
    """B independent ridge logistic regressions at once by Newton's method: design (B, k, p), labels
    and offsets (B, k), penalty (p, p) -> weights (B, p)."""
    w = np.zeros((design.shape[0], design.shape[2]))
    for _ in range(steps):
        p = expit((design @ w[..., None])[..., 0] + offset)
        grad = (design * (p - labels)[..., None]).sum(1) + w @ penalty
        hess = (design.transpose(0, 2, 1) * (p * (1 - p))[:, None, :]) @ design + penalty
        w -= np.linalg.solve(hess, grad[..., None])[..., 0]
    return w


class LogisticMF(CompletionMethod):
    """Logistic matrix factorisation of the binary matrix Y = 1[Z > threshold] (reference §5.4).

    P(Y = 1) = σ(c_task + d_example + w_taskᵀ h_example) with an L2 penalty `reg` on w, d and h,
    `reg` chosen from `regs` by the ROC-AUC on the hidden labels of a quarter of the train rows (at most 5)
    folded in from k known columns, as a new task is (its best value differs between 7 and 46 train
    tasks by 30x). Fitted on the train rows in two stages that bound time and memory:
    1. the task side (c, w) jointly with the example side of `fit_columns` random examples: started
       from the rank-r SVD of the linearised centred labels, 4 (Y - column mean), and the column
       log-odds, then `max_iter` L-BFGS steps in float32;
    2. every example's (d, h) given (c, w): a small ridge logistic regression on its M labels, all
       examples batched (the joint optimum satisfies exactly this, so stage 2 only extends stage 1).
    (The reference runs 5,000 full-batch ascent steps from a random start, per test task.) A new task's
    (c, w) is a ridge logistic regression (`fold_reg`) on its k known entries. Predictions are logits.
    """

    name = "logistic_mf"
    regression = False

    def __init__(self, rank: int = 5, reg: float | None = None, regs=(0.1, 1.0, 3.0), fold_reg: float = 3.0,
                 threshold: float = 0.0, max_iter: int = 50, fit_columns: int = 20_000, validation_k: int = 30,
                 seed: int = 0):
        self.rank, self.reg, self.regs, self.fold_reg, self.threshold = rank, reg, regs, fold_reg, threshold
        self.max_iter, self.fit_columns, self.validation_k, self.seed = max_iter, fit_columns, validation_k, seed

    def _start(self, y):
        """Column log-odds, then the top-r SVD of the linearised centred labels split evenly into w and h."""
        m, n = y.shape
        positive = y.sum(axis=0, dtype=np.float64)
        d = np.log((positive + 0.5) / (m - positive + 0.5))
        centred = y.astype(np.float32)
        centred -= (positive / m).astype(np.float32)
        centred *= 4.0
        rank = min(self.rank, m - 1)
        values, vectors = np.linalg.eigh((centred @ centred.T).astype(np.float64))  # (m, m) Gram: no SVD of m x n
        top = np.argsort(values)[::-1][:rank]
        s = np.sqrt(np.clip(values[top], 1e-12, None))
        w = vectors[:, top] * np.sqrt(s)                                    # (m, r): U √S
        h = (vectors[:, top].T.astype(np.float32) @ centred) / np.sqrt(s)[:, None]  # (r, n): √S Vᵀ = S^-½ Uᵀ X
        return np.zeros(m), d, w, h

    def _fit_joint(self, y, reg):
        """Stage 1: (c, w) of the tasks by L-BFGS on the labels y (M, n)."""
        from scipy.optimize import minimize

        m, n = y.shape
        c0, d0, w0, h0 = self._start(y)
        r = w0.shape[1]
        sign = np.where(y, np.int8(1), np.int8(-1))  # the log-likelihood is log σ(sign · logit)

        def unpack(x):
            c, d = x[:m], x[m:m + n]
            w = x[m + n:m + n + m * r].reshape(m, r)
            h = x[m + n + m * r:].reshape(r, n)
            return c, d, w, h

        def objective(x):
            c, d, w, h = (a.astype(np.float32) for a in unpack(x))
            a = w @ h  # in place from here on: two m x n float32 arrays at most
            a += c[:, None]
            a += d[None, :]
            a *= sign
            np.clip(a, -80.0, 80.0, out=a)  # σ stays above float32's smallest normal number
            expit(a, out=a)  # P(observed label): one transcendental pass (logaddexp is 4x slower)
            nll = -np.log(a).sum(dtype=np.float64)
            a -= 1.0
            a *= sign  # d nll / d logit = σ(logit) - y
            penalty = 0.5 * reg * (float((w ** 2).sum()) + float((d ** 2).sum()) + float((h ** 2).sum()))
            grad = np.concatenate([a.sum(1), a.sum(0) + reg * d, (a @ h.T + reg * w).ravel(),
                                   (w.T @ a + reg * h).ravel()])
            return nll + penalty, grad.astype(np.float64)

        # L-BFGS on x / scale: a task parameter sums n terms, an example parameter m, so scaling each by
        # 1/√(its count) evens the curvature (unscaled, the first steps throw the task offsets far off)
        scale = np.concatenate([np.full(m, n ** -0.5), np.full(n, m ** -0.5), np.full(m * r, n ** -0.5),
                                np.full(r * n, m ** -0.5)])

        def scaled(u):
            value, grad = objective(u * scale)
            return value, grad * scale

        x0 = np.concatenate([c0, d0, w0.ravel(), h0.ravel()])
        result = minimize(scaled, x0 / scale, jac=True, method="L-BFGS-B", options={"maxiter": self.max_iter})
        self.iterations_ = int(result.nit)
        c, _, w, _ = unpack(result.x * scale)
        return c, w

    def _fit_examples(self, y, task_bias, task_factors, reg, steps: int = 20, block: int = 16_384):
        """Stage 2: every example's (d, h) given the tasks' (c, w), by Böhning's bounded-Hessian steps
        (σ' ≤ 1/4, so one (r+1) x (r+1) matrix serves every example and each step decreases the loss),
        from the column log-odds, a block of examples at a time."""
        m, n = y.shape
        design = np.concatenate([np.ones((m, 1)), task_factors], axis=1)  # (M, r + 1)
        penalty = reg * np.eye(design.shape[1])
        step = np.linalg.inv(design.T @ design / 4 + penalty).astype(np.float32)
        design32, bias32 = design.astype(np.float32), task_bias.astype(np.float32)[:, None]
        weights = np.zeros((design.shape[1], n), dtype=np.float32)
        positive = y.sum(axis=0, dtype=np.float64)
        weights[0] = np.log((positive + 0.5) / (m - positive + 0.5)) - task_bias.mean()
        for start in range(0, n, block):
            labels = y[:, start:start + block]
            theta = weights[:, start:start + block]  # a view: updated in place
            for _ in range(steps):
                g = expit(design32 @ theta + bias32)
                g -= labels
                theta -= step @ (design32.T @ g + reg * theta)
        return np.ascontiguousarray(weights[0]), np.ascontiguousarray(weights[1:])

    def _factorise(self, y, reg):
        """(d, h) of every example, h scaled to unit RMS per factor."""
        n = y.shape[1]
        sample = sample_columns(n, self.fit_columns, self.seed)
        task_bias, task_factors = self._fit_joint(y[:, sample], reg)
        bias, factors = self._fit_examples(y, task_bias, task_factors, reg)
        # the factorisation's scale is a gauge (w h = (w s)(h / s)); unit-RMS example factors make the
        # fold-in's ridge `fold_reg` mean the same whatever balance of |w| and |h| the fit reached
        rms = np.sqrt((factors.astype(np.float64) ** 2).mean(axis=1, keepdims=True))
        return bias, (factors / np.where(rms > 0, rms, 1.0)).astype(np.float32)

    def _validate(self, y):
        """The reg of `regs` with the best ROC-AUC on held-out rows' hidden labels, over a sample of
        `fit_columns` examples."""
        rng = np.random.default_rng(self.seed)
        if y.shape[1] > self.fit_columns:
            y = y[:, sample_columns(y.shape[1], self.fit_columns, rng)]
        m, n = y.shape
        held = rng.permutation(m)[:min(5, max(1, m // 4))]
        rest = np.setdiff1d(np.arange(m), held)
        k = min(self.validation_k, n - 1)
        known = np.stack([rng.choice(n, k, replace=False) for _ in held])
        hidden = np.ones((len(held), n), dtype=bool)
        np.put_along_axis(hidden, known, False, axis=1)
        labels = y[held]
        scores = {}
        for reg in self.regs:
            logits = self._fold_in(*self._factorise(y[rest], reg), known, np.take_along_axis(labels, known, axis=1))
            scores[reg] = roc_auc(labels[hidden], logits[hidden])
        scores = {reg: score for reg, score in scores.items() if np.isfinite(score)}
        return max(scores, key=scores.get) if scores else 1.0

    def fit(self, train):
        y = forgotten(np.asarray(train), self.threshold)  # one train task: rank 0, offsets only
        self.reg_ = self.reg if self.reg is not None else (self._validate(y) if len(y) >= 4 else 1.0)
        self.example_bias_, self.example_factors_ = self._factorise(y, self.reg_)
        return self

    def _fold_in(self, bias, factors, known_columns, labels):
        """Logits of new tasks over every example from their known labels: (c, w) by ridge logistic
        regression with a firmer ridge than the fit's (k labels cannot pin down rank + 1 weights)."""
        y = np.asarray(labels, dtype=np.float64)                                   # (T, k)
        x = np.concatenate([np.ones(known_columns.shape + (1,)),
                            factors[:, known_columns].transpose(1, 2, 0)], axis=2)  # (T, k, r+1)
        penalty = self.fold_reg * np.eye(x.shape[2])
        penalty[0, 0] = 1e-6
        w = ridge_logistic(x, y, bias[known_columns].astype(np.float64), penalty)
        pred = w[:, 1:].astype(np.float32) @ factors
        pred += bias[None, :]
        pred += w[:, :1].astype(np.float32)
        return pred

    def predict(self, known_columns, known_values):
        return self._fold_in(self.example_bias_, self.example_factors_, known_columns,
                             forgotten(np.asarray(known_values), self.threshold))


def _positives(mask: np.ndarray):
    """The True entries of a 2-D boolean array as a float32 CSR matrix of ones, built row by row
    (no dense float copy, no int64 index pairs)."""
    from scipy.sparse import csr_matrix

    columns = [np.flatnonzero(row).astype(np.int32) for row in mask]
    indptr = np.concatenate([[0], np.cumsum([len(c) for c in columns])]).astype(np.int32)
    indices = np.concatenate(columns) if columns else np.zeros(0, np.int32)
    return csr_matrix((np.ones(len(indices), np.float32), indices, indptr), shape=mask.shape)


class ImplicitALS(CompletionMethod):
    """ALS for implicit feedback (the implicit package) on the binary matrix Y = 1[Z > threshold]:
    forgotten examples are positives, the rest weighted zeros. Fitted on the train rows over
    `fit_columns` random examples; every example's factors then come from `recalculate_item` given the
    tasks' factors, a block at a time (the positives of a paper-scale Y as CSR, twice, in implicit's
    fit would be 2x the matrix); a new task is folded in with `recalculate_user` from its known
    forgotten examples. Predictions are scores."""

    name = "implicit_als"
    regression = False

    def __init__(self, factors: int = 8, regularization: float = 0.1, alpha: float = 1.0, iterations: int = 5,
                 threshold: float = 0.0, fit_columns: int = 20_000, seed: int = 0):
        self.factors, self.regularization, self.alpha = factors, regularization, alpha
        self.iterations, self.threshold, self.seed = iterations, threshold, seed
        self.fit_columns = fit_columns

    def fit(self, train, block: int = 16_384):
        from implicit.cpu.als import AlternatingLeastSquares

        train = np.asarray(train)
        m, n = train.shape
        sample = sample_columns(n, self.fit_columns, self.seed)
        self.model_ = AlternatingLeastSquares(factors=self.factors, regularization=self.regularization,
                                              alpha=self.alpha, iterations=self.iterations, random_state=self.seed,
                                              num_threads=1, calculate_training_loss=False)
        self.model_.fit(_positives(forgotten(train[:, sample], self.threshold)), show_progress=False)
        items = np.empty((n, self.model_.item_factors.shape[1]), dtype=np.float32)
        for start in range(0, n, block):
            part = _positives(forgotten(train[:, start:start + block], self.threshold).T)
            items[start:start + block] = self.model_.recalculate_item(np.arange(part.shape[0]), part)
        self.model_.item_factors, self.model_._YtY = items, None  # every example, for recalculate_user
        self.n_ = n
        return self

    def predict(self, known_columns, known_values):
        mask = np.zeros((len(known_columns), self.n_), dtype=bool)
        np.put_along_axis(mask, known_columns, forgotten(np.asarray(known_values), self.threshold), axis=1)
        users = self.model_.recalculate_user(np.arange(len(known_columns)), _positives(mask))
        return np.asarray(users) @ np.asarray(self.model_.item_factors).T
