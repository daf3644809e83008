"""Low-rank analysis: R² by rank as the reference defines it, NaN handling, components, outputs."""

import json

import numpy as np
import pandas as pd
import pytest

from forgetmap.cli import main
from forgetmap.errors import DataError
from forgetmap.lowrank import (analyse, component_tops, drop_missing, gram_svd, r2_by_rank, row_shuffled_null,
                               two_proportion_z)
from forgetmap.matrix import ForgettingMatrix


def reference_r2(z, r):
    """The reference's computation, literally: full SVD of uncentred Z, global-mean SST."""
    u, s, vt = np.linalg.svd(z, full_matrices=False)
    approx = (u[:, :r] * s[:r]) @ vt[:r]
    return 1 - ((z - approx) ** 2).mean() / ((z - z.mean()) ** 2).mean()


def low_rank(m=12, n=300, seed=1, noise=0.05):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(m, 2)) @ rng.normal(size=(2, n)) + 0.3 + noise * rng.normal(size=(m, n))).astype(np.float32)


def test_r2_matches_explicit_truncations():
    z = np.random.default_rng(0).normal(size=(7, 40)) + 0.3
    assert np.allclose(r2_by_rank(z), [reference_r2(z, r) for r in range(1, 8)])
    assert abs(r2_by_rank(z)[-1] - 1.0) < 1e-9


def test_gram_svd_matches_numpy():
    z = low_rank()
    s, u = gram_svd(z)
    assert np.allclose(s, np.linalg.svd(z.astype(np.float64), compute_uv=False), rtol=1e-6, atol=1e-6)
    assert np.allclose(np.abs(u[:, 0]), np.abs(np.linalg.svd(z.astype(np.float64))[0][:, 0]), atol=1e-6)


def test_low_rank_matrix_beats_its_row_shuffled_null():
    z = low_rank()
    assert r2_by_rank(z, 3)[-1] > 0.99
    assert r2_by_rank(row_shuffled_null(z), 3)[-1] < 0.7


def test_single_task_is_exactly_rank_one():
    assert r2_by_rank(low_rank(m=1))[0] == pytest.approx(1.0)


def test_nan_columns_and_all_nan_rows_are_dropped_and_reported():
    z = low_rank(m=4, n=10)
    z[1, 3] = np.nan
    z[2, :] = np.nan
    cleaned = drop_missing(z, ["a", "b", "c", "d"])
    assert cleaned.dropped_tasks == ["c"] and cleaned.task_index.tolist() == [0, 1, 3]
    assert 3 not in cleaned.example_index and cleaned.z.shape == (3, 9) and np.isfinite(cleaned.z).all()


@pytest.mark.parametrize("z, message", [
    (np.full((3, 5), 0.25, np.float32), "constant"),
    (np.full((2, 5), np.nan, np.float32), "every task row"),
    (np.array([[np.nan, 1.0], [1.0, np.nan]], np.float32), "every upstream example"),
])
def test_unusable_matrices_are_clear_errors(z, message):
    with pytest.raises(DataError, match=message):
        drop_missing(z, [f"t{i}" for i in range(len(z))])


def test_component_tops_do_not_depend_on_the_svd_sign():
    rng = np.random.default_rng(3)
    u, v = rng.normal(size=6) + 1, rng.normal(size=50) + 0.5
    a = component_tops(u, 2.0, v, 3, 10)
    b = component_tops(-u, 2.0, -v, 3, 10)
    assert a[0].tolist() == b[0].tolist() and a[2].tolist() == b[2].tolist()


def test_two_proportion_z_test():
    z, p = two_proportion_z(30, 100, 100, 1000)
    pooled = 130 / 1100
    assert z == pytest.approx((0.3 - 0.1) / np.sqrt(pooled * (1 - pooled) * (1 / 100 + 1 / 1000)))
    assert 0 < p < 1e-6


def demo_matrix(m=6, n=200):
    z = low_rank(m=m, n=n)
    sources = np.array(["web", "code"] * (n // 2))
    z[:3, sources == "code"] += 1.0  # the first three tasks forget code
    tasks = [f"t{i}" for i in range(m)]
    return ForgettingMatrix(z, tasks, np.array([f"e{j}" for j in range(n)]), sources, np.ones(n, np.float32),
                            {t: "a" if i < 3 else "b" for i, t in enumerate(tasks)}, {"a": "in_domain", "b": "out_of_domain"})


def test_analyse_writes_tables_and_figures(tmp_path):
    summary = analyse(demo_matrix(), tmp_path, n_components=2, top_tasks=3, top_examples=20)
    r2 = pd.read_csv(tmp_path / "r2.tsv", sep="\t")
    assert list(r2.columns) == ["rank", "r2", "singular_value", "r2_row_shuffled"]
    assert r2["rank"].tolist() == list(range(1, 7)) and r2["r2"].is_monotonic_increasing
    assert summary["r2_rank_1_3_5"][0] == pytest.approx(r2["r2"][0], rel=1e-5)
    comps = pd.read_csv(tmp_path / "components.tsv", sep="\t")
    first = comps[(comps["component"] == 1) & (comps["kind"] == "task")]
    assert set(first["name"]) == {"t0", "t1", "t2"}
    sources = pd.read_csv(tmp_path / "component_sources.tsv", sep="\t").set_index(["component", "source"])
    assert sources.loc[(1, "code"), "share_top"] >= 0.9 and sources.loc[(1, "code"), "p_value"] < 1e-3
    for figure in ("spectrum.png", "heatmap.png", "components.png"):
        assert (tmp_path / figure).stat().st_size > 10_000


def test_cli_rejects_a_matrix_whose_tasks_disagree_with_the_config(tmp_path, capsys):
    demo_matrix().write(tmp_path / "z.parquet")
    outputs = [arg for name in ("r2", "spectrum", "heatmap", "components", "component-figure", "sources", "summary")
               for arg in (f"--{name}", str(tmp_path / "out" / name))]
    code = main(["lowrank", "--matrix", str(tmp_path / "z.parquet"), *outputs,
                 "--expected-tasks", json.dumps(["t0", "t1", "t9"])])
    assert code == 2
    err = capsys.readouterr().err
    assert "disagree with the config" in err and "'t9'" in err and "'t2'" in err
    assert not (tmp_path / "out").exists()  # nothing half-written
