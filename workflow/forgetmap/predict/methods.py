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

from .metrics import roc_auc


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
        return np.broadcast_to(self.column_mean_.astype(np.float32), (len(known_columns), len(self.column_mean_))).copy()


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
        """(T, N) float32: μ + a_task + b_example."""
        out = np.empty((len(task_offsets), len(self.example_offset_)), dtype=np.float32)
        np.add(self.mu_ + task_offsets[:, None], self.example_offset_[None, :], out=out, casting="same_kind")
        return out

    def predict(self, known_columns, known_values):
        return self.baseline(self.fold_in(known_columns, np.asarray(known_values, dtype=np.float64)))


class KNNBaseline(CompletionMethod):
    name = "knn"

    def __init__(self, k: int = 40, reg: float = 1.0):
        self.k = k
        self.reg = reg

    def fit(self, train):
        train = np.asarray(train)
        self.additive_ = Additive(self.reg).fit(train)
        add = self.additive_
        self.residual_ = np.empty(train.shape, dtype=np.float32)  # the train rows are residual + baseline
        for i, row in enumerate(train):  # row by row: no float64 M x N baseline
            self.residual_[i] = row - (add.mu_ + add.task_offset_[i] + add.example_offset_)
        return self

    def predict(self, known_columns, known_values):
        known_values = np.asarray(known_values, dtype=np.float64)
        add = self.additive_
        # (T, M): mean squared difference with every train task on each new task's known columns
        neighbours = (self.residual_[:, known_columns] + add.example_offset_[known_columns]
                      + (add.mu_ + add.task_offset_)[:, None, None])     # (M, T, k) train values
        msd = ((neighbours - known_values[None]) ** 2).mean(axis=2).T    # (T, M)
        sim = 1.0 / (1.0 + msd)
        k = min(self.k, sim.shape[1])
        cut = np.partition(sim, sim.shape[1] - k, axis=1)[:, sim.shape[1] - k][:, None]
        weights = np.where(sim >= cut, sim, 0.0)
        weights /= weights.sum(axis=1, keepdims=True)
        base = self.additive_.baseline(self.additive_.fold_in(known_columns, known_values))
        base += weights.astype(np.float32) @ self.residual_
        return base


class FoldInMF(CompletionMethod):
    """Rank-r factors of the column-centred train rows; new rows by ridge regression on known columns.

    Everything comes from one pass over the train rows: their Gram matrix (M x M) gives the spectrum of
    any subset of them, centred, by an eigendecomposition; the factors of rank r are the rows' product
    with r eigenvectors. Validation scores every (rank, ridge) on the hidden entries of held-out rows
    from low-dimensional sums, never forming a prediction."""

    name = "mf"

    def __init__(self, rank: int | None = None, reg: float | None = None, ranks=(1, 2, 3, 5, 8),
                 regs=(0.001, 0.01, 0.1, 1.0, 10.0), validation_k: int = 30, seed: int = 0):
        self.rank, self.reg = rank, reg
        self.ranks, self.regs = ranks, regs
        self.validation_k, self.seed = validation_k, seed

    @staticmethod
    def _gram(train, block: int = 1 << 14) -> np.ndarray:
        """X Xᵀ in float64, accumulated over column blocks (no float64 copy of X)."""
        gram = np.zeros((len(train), len(train)))
        for start in range(0, train.shape[1], block):
            part = np.asarray(train[:, start:start + block], dtype=np.float64)
            gram += part @ part.T
        return gram

    @staticmethod
    def _spectrum(train, gram, rows, max_rank):
        """Column means of `rows` and the top `max_rank` right singular vectors of those rows, centred,
        scaled by singular value / √rows (like the data): (N,), (N, r)."""
        count = len(rows)
        centre = np.eye(count) - 1.0 / count
        values, vectors = np.linalg.eigh(centre @ gram[np.ix_(rows, rows)] @ centre)
        top = np.argsort(values)[::-1][:min(max_rank, count - 1)]
        top = top[values[top] > 1e-12 * max(values.max(), 1e-300)]
        # V S = Xcᵀ U, and the centred U is orthogonal to 1, so Xcᵀ U = Xᵀ U: one (N x r + 1) product
        weights = np.zeros((len(train), len(top) + 1))
        weights[rows, 0] = 1.0 / count
        weights[rows, 1:] = vectors[:, top] / np.sqrt(count)
        projected = np.asarray(train).T @ weights.astype(train.dtype)
        return projected[:, 0].astype(np.float64), projected[:, 1:].astype(np.float32)

    @staticmethod
    def _weights(factors, reg, known_columns, residual):
        """Ridge weights [offset, factors] of each new row from its known residuals: (T, r + 1)."""
        x = np.concatenate([np.ones(known_columns.shape + (1,)), factors[known_columns]], axis=2)  # (T,k,r+1)
        penalty = reg * np.eye(x.shape[2])
        penalty[0, 0] = 0.0  # the offset is not shrunk
        xt = x.transpose(0, 2, 1)
        return np.linalg.solve(xt @ x + penalty, xt @ residual[..., None])[..., 0]

    def validation_errors(self, train, gram) -> tuple[dict[tuple[int, float], float], np.ndarray, np.ndarray]:
        """Hold out up to 20 train rows in 5 folds and reveal k random columns of each: the squared error
        on their hidden entries of every (rank, ridge), with the held-out rows and their known columns.
        With design Φ = [1, factors], the error over all columns is eᵀe - 2 wᵀΦᵀe + wᵀΦᵀΦw; the known
        columns' share is subtracted."""
        rng = np.random.default_rng(self.seed)
        m, n = train.shape
        rows = rng.permutation(m)[:min(m, 20)]
        k = min(self.validation_k, n - 1)
        known = np.stack([rng.choice(n, k, replace=False) for _ in rows])
        errors: dict[tuple[int, float], float] = {}
        for held in np.array_split(np.arange(len(rows)), min(len(rows), 5)):
            rest = np.setdiff1d(np.arange(m), rows[held])
            mean, factors = self._spectrum(train, gram, rest, max(self.ranks))
            residual = np.asarray(train[rows[held]], dtype=np.float64) - mean   # (h, N)
            phi_e = np.concatenate([residual.sum(1, keepdims=True), residual @ factors], axis=1)  # Φᵀe
            ee = (residual * residual).sum(1)
            phi = np.concatenate([np.ones((n, 1), np.float32), factors], axis=1)
            gram_phi = phi.T.astype(np.float64) @ phi  # ΦᵀΦ
            known_residual = np.take_along_axis(residual, known[held], axis=1)
            for rank in self.ranks:
                if rank > factors.shape[1]:
                    continue
                cols = np.arange(rank + 1)
                for reg in self.regs:
                    w = self._weights(factors[:, :rank], reg, known[held], known_residual)
                    total = ee - 2 * (w * phi_e[:, cols]).sum(1) + np.einsum("ha,ab,hb->h", w, gram_phi[:rank + 1, :rank + 1], w)
                    on_known = known_residual - (phi[known[held]][..., :rank + 1] @ w[..., None])[..., 0]
                    error = float((total - (on_known ** 2).sum(1)).sum())
                    errors[(rank, reg)] = errors.get((rank, reg), 0.0) + error
        return errors, rows, known

    def _validate(self, train, gram):
        """The (rank, ridge) with the smallest validation error."""
        errors = self.validation_errors(train, gram)[0]
        return min(errors, key=errors.get) if errors else (1, 1.0)

    def fit(self, train):
        train = np.asarray(train)
        gram = self._gram(train)
        if self.rank is None or self.reg is None:
            self.rank_, self.reg_ = self._validate(train, gram) if len(train) >= 3 else (1, 1.0)
        else:
            self.rank_, self.reg_ = self.rank, self.reg
        self.mean_, self.factors_ = self._spectrum(train, gram, np.arange(len(train)), max(self.rank_, 1))
        self.rank_ = self.factors_.shape[1]
        return self

    def predict(self, known_columns, known_values):
        residual = np.asarray(known_values, dtype=np.float64) - self.mean_[known_columns]
        w = self._weights(self.factors_, self.reg_, known_columns, residual)
        pred = w[:, 1:].astype(np.float32) @ self.factors_.T
        pred += self.mean_.astype(np.float32)
        pred += w[:, :1].astype(np.float32)
        return pred


def sample_columns(n: int, count: int, seed) -> np.ndarray:
    """`count` sorted random examples of n (all of them when n <= count); `seed` an int or a Generator."""
    if n <= count:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, count, replace=False))


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
        y = np.asarray(train) > self.threshold  # one train task: rank 0, offsets only
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
                             np.asarray(known_values) > self.threshold)


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
        self.model_.fit(_positives(train[:, sample] > self.threshold), show_progress=False)
        items = np.empty((n, self.model_.item_factors.shape[1]), dtype=np.float32)
        for start in range(0, n, block):
            part = _positives((train[:, start:start + block] > self.threshold).T)
            items[start:start + block] = self.model_.recalculate_item(np.arange(part.shape[0]), part)
        self.model_.item_factors, self.model_._YtY = items, None  # every example, for recalculate_user
        self.n_ = n
        return self

    def predict(self, known_columns, known_values):
        mask = np.zeros((len(known_columns), self.n_), dtype=bool)
        np.put_along_axis(mask, known_columns, np.asarray(known_values) > self.threshold, axis=1)
        users = self.model_.recalculate_user(np.arange(len(known_columns)), _positives(mask))
        return np.asarray(users) @ np.asarray(self.model_.item_factors).T


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


METHODS = {cls.name: cls for cls in (ColumnMean, Additive, KNNBaseline, FoldInMF, LogisticMF, ImplicitALS,
                                     SemanticSimilarity, AllForgotten, RandomScores)}


def make_method(name: str, **params) -> CompletionMethod:
    from .reference import NAMES as REFERENCE, SurpriseMethod

    if name in REFERENCE:
        return SurpriseMethod(name, **params)
    if name not in METHODS:
        raise KeyError(f"unknown prediction method {name!r}; available: {', '.join([*METHODS, *REFERENCE])}")
    return METHODS[name](**params)
