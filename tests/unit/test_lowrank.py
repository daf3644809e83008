"""R² by rank, as the reference defines it."""

import numpy as np

from forgetmap.lowrank import r2_by_rank, row_shuffled_null


def reference_r2(z, r):
    u, s, vt = np.linalg.svd(z, full_matrices=False)
    approx = (u[:, :r] * s[:r]) @ vt[:r]
    return 1 - ((z - approx) ** 2).mean() / ((z - z.mean()) ** 2).mean()


def test_r2_matches_explicit_truncations():
    rng = np.random.default_rng(0)
    z = rng.normal(size=(7, 40)) + 0.3
    assert np.allclose(r2_by_rank(z), [reference_r2(z, r) for r in range(1, 8)])
    assert abs(r2_by_rank(z)[-1] - 1.0) < 1e-9


def test_low_rank_matrix_beats_its_row_shuffled_null():
    rng = np.random.default_rng(1)
    z = rng.normal(size=(12, 2)) @ rng.normal(size=(2, 300)) + 0.05 * rng.normal(size=(12, 300))
    assert r2_by_rank(z, 2)[-1] > 0.99
    assert r2_by_rank(row_shuffled_null(z), 2)[-1] < 0.6
