"""Low-rank structure of a forgetting matrix: R² of rank-r SVD truncations (paper §3.1)."""

from __future__ import annotations

import numpy as np


def r2_by_rank(z: np.ndarray, max_rank: int | None = None) -> np.ndarray:
    """R²(r) for r = 1..max_rank: 1 - mean((Z - Z_r)²) / mean((Z - mean Z)²).

    Z_r is the rank-r truncation of the thin SVD of the *uncentred* Z, and the total sum of squares
    is centred on the single global mean, exactly as the reference computes it, so rank 1 already
    absorbs the overall level. The residual of every rank comes from the singular values alone:
    ||Z - Z_r||² = ||Z||² - sum_{i<=r} s_i².
    """
    z = np.asarray(z, dtype=np.float64)
    s = np.linalg.svd(z, compute_uv=False)
    max_rank = min(len(s), max_rank or len(s))
    sst = ((z - z.mean()) ** 2).sum()
    residual = (z ** 2).sum() - np.cumsum(s[:max_rank] ** 2)
    return 1.0 - np.maximum(residual, 0.0) / sst


def row_shuffled_null(z: np.ndarray, seed: int = 0) -> np.ndarray:
    """Each row permuted independently: keeps row means and spreads, destroys shared column structure."""
    rng = np.random.default_rng(seed)
    return np.stack([rng.permutation(row) for row in np.asarray(z)])
