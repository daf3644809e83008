"""Completion of the continuous matrix Z: column means, additive baselines, kNN, low-rank fold-in.

Every `predict` is batched over the T new tasks: no Python loop runs over tasks, examples or entries.

- `mean`: each example's mean forgetting over the train tasks.
- `additive`: Z ≈ μ + a_task + b_example; a new task's offset is a ridge estimate from its known
  entries (the reference's BaselineOnly, solved in closed form instead of 1,000 SGD epochs).
- `knn`: the reference's KNNBaseline: the additive baseline plus the similarity-weighted residuals
  of the k most similar train tasks, similarity 1 / (1 + mean squared difference on the known columns).
- `mf`: a rank-r factorisation of the column-centred train rows (their top right singular vectors);
  a new row is folded in by one ridge solve on its known columns (offset plus r factors). Rank and
  ridge are chosen by validation inside the train rows.
"""

from __future__ import annotations

import numpy as np

from .interface import CompletionMethod


class ColumnMean(CompletionMethod):
    name = "mean"

    def fit(self, train):
        self.column_mean_ = np.asarray(train).mean(axis=0, dtype=np.float64)
        return self

    def without(self, train, row: int) -> "ColumnMean":
        """Fitted on the train rows less `row`, from this fit's means (no copy of the rows)."""
        fold = ColumnMean()
        m = len(train)
        fold.column_mean_ = (self.column_mean_ * m - np.asarray(train[row], dtype=np.float64)) / (m - 1)
        return fold

    def predict(self, known_columns, known_values):
        return np.broadcast_to(self.column_mean_.astype(np.float32), (len(known_columns), len(self.column_mean_))).copy()


class Additive(CompletionMethod):
    """μ + a_task + b_example, fitted by alternating ridge means (exact least squares for λ = 0)."""

    name = "additive"

    def __init__(self, reg: float = 1.0, n_iter: int = 10):
        self.reg = reg
        self.n_iter = n_iter

    def fit(self, train):
        return self._fit_sums(train.sum(axis=1, dtype=np.float64), train.sum(axis=0, dtype=np.float64))

    def _fit_sums(self, row_sums, col_sums):
        m, n = len(row_sums), len(col_sums)
        self.mu_ = row_sums.sum() / (m * n)
        a, b = np.zeros(m), np.zeros(n)
        # alternating ridge means need only row and column sums: no M x N temporary
        for _ in range(self.n_iter):  # complete data: converges in a couple of sweeps
            b = (col_sums - m * self.mu_ - a.sum()) / (m + self.reg)
            a = (row_sums - n * self.mu_ - b.sum()) / (n + self.reg)
        self.task_offset_, self.example_offset_ = a, b
        self.row_sums_, self.col_sums_ = row_sums, col_sums
        return self

    def without(self, train, row: int) -> "Additive":
        """Fitted on the train rows less `row`, from this fit's row and column sums (no copy of the rows)."""
        left_out = np.asarray(train[row], dtype=np.float64)
        return Additive(self.reg, self.n_iter)._fit_sums(np.delete(self.row_sums_, row), self.col_sums_ - left_out)

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
        self.train_baseline_ = (add.mu_, add.task_offset_, add.example_offset_)  # residual_ + this = train
        # a fold (`without`) shares residual_: its own residuals are residual_ + row_shift_ + col_shift_
        self.row_shift_, self.col_shift_, self.excluded_ = np.zeros(len(train)), 0.0, None
        return self

    def without(self, train, row: int) -> "KNNBaseline":
        """Fitted on the train rows less `row` without copying them: the fold's residuals differ from
        these by a row and a column offset (its additive fit's), and `row` is never a neighbour."""
        fold = KNNBaseline(self.k, self.reg)
        fold.additive_ = self.additive_.without(train, row)
        fold.residual_, fold.train_baseline_ = self.residual_, self.train_baseline_
        mu, a, b = self.train_baseline_
        rest = np.delete(np.arange(len(a)), row)
        fold.row_shift_ = np.zeros(len(a))
        fold.row_shift_[rest] = (mu - fold.additive_.mu_) + (a[rest] - fold.additive_.task_offset_)
        fold.col_shift_ = b - fold.additive_.example_offset_
        fold.excluded_ = row
        return fold

    def predict(self, known_columns, known_values):
        known_values = np.asarray(known_values, dtype=np.float64)
        mu, a, b = self.train_baseline_
        # (T, M): mean squared difference with every train task on each new task's known columns
        neighbours = self.residual_[:, known_columns] + b[known_columns] + (mu + a)[:, None, None]  # (M, T, k)
        msd = ((neighbours - known_values[None]) ** 2).mean(axis=2).T    # (T, M)
        sim = 1.0 / (1.0 + msd)
        candidates = sim.shape[1]
        if self.excluded_ is not None:
            sim[:, self.excluded_] = 0.0
            candidates -= 1
        k = min(self.k, candidates)
        cut = np.partition(sim, sim.shape[1] - k, axis=1)[:, sim.shape[1] - k][:, None]
        weights = np.where((sim >= cut) & (sim > 0), sim, 0.0)
        weights /= weights.sum(axis=1, keepdims=True)
        base = self.additive_.baseline(self.additive_.fold_in(known_columns, known_values))
        base += weights.astype(np.float32) @ self.residual_
        if self.excluded_ is not None:
            base += ((weights @ self.row_shift_)[:, None] + weights.sum(1)[:, None] * self.col_shift_[None, :]).astype(
                np.float32)
        return base


class FoldInMF(CompletionMethod):
    """Rank-r factors of the column-centred train rows; new rows by ridge regression on known columns.

    Everything comes from one pass over the train rows: their Gram matrix (M x M) gives the spectrum of
    any subset of them, centred, by an eigendecomposition; the factors of rank r are the rows' product
    with r eigenvectors. Validation scores every (rank, ridge) on the hidden entries of held-out rows
    from low-dimensional sums, never forming a prediction.

    A new row is the column means plus an offset plus the factors, weighted to fit its known values (the
    paper's fold-in). `origin`: the column means get a weight of their own too, fitted unshrunk as the offset
    is, so the row is linear in its known values: all of them 0 give 0, and small ones a small row (a
    forecast part-way through a fine-tune, whose probes have barely moved, is near 0, where the plain fold-in
    gives the fit rows' mean). Once the known values look like a fit row's, the mean's weight is about 1 and
    the two agree."""

    name = "mf"

    def __init__(self, rank: int | None = None, reg: float | None = None, ranks=(1, 2, 3, 5, 8),
                 regs=(0.001, 0.01, 0.1, 1.0, 10.0), validation_k: int = 30, seed: int = 0, origin: bool = False):
        self.rank, self.reg = rank, reg
        self.ranks, self.regs = ranks, regs
        self.validation_k, self.seed = validation_k, seed
        self.origin = origin

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
        self.gram_ = gram
        return self

    def without(self, train, row: int) -> "FoldInMF":
        """The same rank and ridge fitted on the train rows less `row`, from the Gram matrix `fit` kept
        (one N x M product instead of a refit); `train` is the matrix `fit` saw."""
        rest = np.delete(np.arange(len(train)), row)
        fold = FoldInMF(self.rank_, self.reg_, origin=self.origin)
        fold.rank_, fold.reg_ = self.rank_, self.reg_
        fold.mean_, fold.factors_ = self._spectrum(np.asarray(train), self.gram_, rest, max(self.rank_, 1))
        return fold

    def predict(self, known_columns, known_values):
        if self.origin:
            return self._through_origin(known_columns, known_values)
        residual = np.asarray(known_values, dtype=np.float64) - self.mean_[known_columns]
        w = self._weights(self.factors_, self.reg_, known_columns, residual)
        pred = w[:, 1:].astype(np.float32) @ self.factors_.T
        pred += self.mean_.astype(np.float32)
        pred += w[:, :1].astype(np.float32)
        return pred

    def _through_origin(self, known_columns, known_values):
        """`origin`'s rows: ridge weights of [offset, column means, factors] (the first two unshrunk, bar a
        trace-relative 1e-9 that keeps a near-constant mean at the probes solvable) fitted to the known values
        themselves, so that values of 0 give weights, and a row, of 0."""
        values = np.asarray(known_values, dtype=np.float64)
        columns = np.asarray(known_columns)
        basis = np.concatenate([self.mean_[:, None], self.factors_.astype(np.float64)], axis=1)  # (N, r + 1)
        x = np.concatenate([np.ones(columns.shape + (1,)), basis[columns]], axis=2)  # (T, k, r + 2)
        xt = x.transpose(0, 2, 1)
        gram = xt @ x
        penalty = self.reg_ * np.eye(x.shape[2])
        penalty[0, 0] = penalty[1, 1] = 0.0
        jitter = 1e-9 * np.trace(gram, axis1=1, axis2=2)[:, None, None] * np.eye(x.shape[2])
        w = np.linalg.solve(gram + penalty + jitter, xt @ values[..., None])[..., 0]  # (T, r + 2)
        pred = (w[:, 1:] @ basis.T).astype(np.float32)
        pred += w[:, :1].astype(np.float32)
        return pred

