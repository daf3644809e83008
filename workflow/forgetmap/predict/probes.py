"""Which k examples of a new task to measure (beyond the paper, which draws them at random).

A new task's row is folded in from its k measured entries by a ridge regression on the column
factors of the train rows (`FoldInMF`): the measured columns are the design of that regression. The
strategies choose that design before anything of the new task is known, from the train rows alone,
so the same k columns serve every test task:

- `random`: k columns drawn without replacement with `default_rng(seed)` (the paper; the baseline).
- `dopt`: greedy D-optimal design: add, one at a time, the column that most increases
  det(Σ_S φ φᵀ / σ² + λI), Φ = [1, factors] the fold-in's design, λ its ridge and σ_j² column j's
  residual variance about the rank-r fit of the train rows (a measurement of a noisy column says less
  about the task's weights: weighted least squares' information; without the weights the design
  chases the largest, noisiest columns and loses to random probes on the demo). By the matrix
  determinant lemma the best column has the largest φᵀ A⁻¹ φ / σ² (its predictive variance over its
  noise), and a Sherman–Morrison step updates every column's score in O(N r): k = 50 of 141,871
  columns at rank 5 is a few k·N·r operations. Deterministic: every seed chooses the same columns.
- `medoids`: k-means (k-means++ start from `seed`, Lloyd steps) on the columns' factor rows, and in
  each cluster the column nearest its centre: probes that cover the kinds of examples.
"""

from __future__ import annotations

import numpy as np

STRATEGIES = ("random", "dopt", "medoids")


def design(train: np.ndarray) -> tuple[np.ndarray, float, np.ndarray]:
    """(Φ = [1, factors] (N, r + 1) float64, the fold-in's ridge λ, each column's residual standard
    deviation σ about the rank-r fit) of the train rows: FoldInMF with its rank and ridge validated on
    them. The factors carry the singular values over √M, so a column's variance over the train rows
    less its squared factors is what the fit leaves (floored at 1e-3 of the median variance)."""
    from .conformal import ColumnScale
    from .continuous import FoldInMF

    fitted = FoldInMF().fit(train)
    factors = fitted.factors_.astype(np.float64)
    phi = np.concatenate([np.ones((factors.shape[0], 1)), factors], axis=1)
    variance = ColumnScale(train).all() ** 2
    residual = np.maximum(variance - (factors * factors).sum(1), 1e-3 * np.median(variance))
    return phi, float(fitted.reg_), np.sqrt(residual)


def dopt(phi: np.ndarray, k: int, reg: float) -> np.ndarray:
    """Greedy D-optimal: `k` sorted column indices maximising det(Φ_Sᵀ Φ_S + reg·I) one column at a time."""
    phi = np.asarray(phi, dtype=np.float64)
    n, d = phi.shape
    if not 0 < k <= n:
        raise ValueError(f"cannot choose {k} probes among {n} columns")
    inverse = np.eye(d) / max(reg, 1e-12)
    score = (phi * phi).sum(1) / max(reg, 1e-12)  # φᵀ A⁻¹ φ with A = reg·I
    chosen = np.empty(k, dtype=np.int64)
    for step in range(k):
        best = int(np.argmax(score))
        chosen[step] = best
        u = inverse @ phi[best]
        gain = 1.0 + phi[best] @ u
        projection = phi @ u  # φ_jᵀ A⁻¹ φ_best for every column j
        score -= projection * projection / gain  # Sherman–Morrison: A⁻¹ loses u uᵀ / gain
        inverse -= np.outer(u, u) / gain
        score[chosen[:step + 1]] = -np.inf
    return np.sort(chosen)


def medoids(phi: np.ndarray, k: int, seed: int, n_iter: int = 10) -> np.ndarray:
    """k-means of the columns' factor rows (the constant column of Φ dropped); each cluster's member
    nearest its centre. `k` sorted distinct column indices. Distances in float32 (they only rank)."""
    points = np.asarray(phi[:, 1:] if phi.shape[1] > 1 else phi, dtype=np.float32)
    n = len(points)
    if not 0 < k <= n:
        raise ValueError(f"cannot choose {k} probes among {n} columns")
    rng = np.random.default_rng(seed)
    norms = (points * points).sum(1)

    def squared_distances(centres):  # (n, c): |p|² - 2 p·c + |c|²
        out = points @ (-2 * centres.T)
        out += norms[:, None]
        out += (centres * centres).sum(1)[None, :]
        return out

    centres = np.empty((k, points.shape[1]), dtype=np.float32)
    centres[0] = points[rng.integers(n)]
    nearest = np.full(n, np.inf, dtype=np.float32)
    for c in range(1, k):  # k-means++: each new centre drawn in proportion to its squared distance
        nearest = np.minimum(nearest, np.maximum(squared_distances(centres[c - 1:c])[:, 0], 0))
        total = float(nearest.sum(dtype=np.float64))
        centres[c] = points[rng.choice(n, p=nearest / total) if total > 0 else rng.integers(n)]
    for _ in range(n_iter):
        label = squared_distances(centres).argmin(1)
        counts = np.bincount(label, minlength=k)
        sums = np.stack([np.bincount(label, weights=points[:, j], minlength=k) for j in range(points.shape[1])], 1)
        filled = counts > 0
        centres[filled] = sums[filled] / counts[filled, None]
    distance = squared_distances(centres)
    taken = np.zeros(n, dtype=bool)
    chosen = []
    for c in np.argsort(distance.min(0), kind="stable"):  # each centre's nearest column not yet taken
        pick = int(np.argmin(np.where(taken, np.inf, distance[:, c])))
        taken[pick] = True
        chosen.append(pick)
    return np.sort(np.array(chosen, dtype=np.int64))


def choose_probes(strategy: str, n: int, k: int, seed: int, phi: np.ndarray | None = None,
                  reg: float = 1.0, noise: np.ndarray | None = None) -> np.ndarray:
    """`k` sorted column indices of `n` by `strategy` (dopt and medoids need the design `phi`; dopt
    weighs each column by 1 / `noise` where given)."""
    if strategy == "random":
        return np.sort(np.random.default_rng(seed).choice(n, k, replace=False))
    if phi is None or len(phi) != n:
        raise ValueError(f"probe strategy {strategy!r} needs the design of all {n} columns")
    if strategy == "dopt":
        return dopt(phi if noise is None else phi / noise[:, None], k, reg)
    if strategy == "medoids":
        return medoids(phi, k, seed)
    raise ValueError(f"unknown probe strategy {strategy!r}; allowed: {', '.join(STRATEGIES)}")
