"""Low-rank structure of a forgetting matrix (paper §3.1, §3.3).

R²(r) = 1 - mean((Z - Z_r)²) / mean((Z - mean Z)²), with Z_r the rank-r truncation of the thin SVD of
the *uncentred* Z and the total sum of squares centred on the single global mean, as the reference
computes it (so rank 1 already absorbs the overall level).

For an M x N matrix with M << N (85 x 141,871 in the paper) the SVD comes from the M x M Gram matrix
Z Zᵀ, accumulated in float64 over column blocks: singular values and left vectors from its
eigendecomposition, right vectors only for the components asked for. Memory stays a small multiple
of the float32 matrix and nothing of size N x N or M x N in float64 is ever built.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import DataError

BLOCK = 4096  # columns per float64 block (2.8 MB at M = 85)


@dataclass
class Cleaned:
    """The part of Z the SVD can use: rows and columns without NaN, and what was dropped."""

    z: np.ndarray
    task_index: np.ndarray     # rows of the original matrix that were kept
    example_index: np.ndarray  # columns kept
    dropped_tasks: list[str]


def drop_missing(z: np.ndarray, tasks: list[str]) -> Cleaned:
    """Drop all-NaN task rows, then every example column with a NaN left (reference §1.3 drops NaN
    columns too). Raises when nothing usable remains or Z is constant."""
    z = np.asarray(z, dtype=np.float32)
    # row by row: two N-sized masks instead of an M x N one
    all_nan_rows = np.array([bool(np.isnan(row).all()) for row in z])
    keep_rows = np.flatnonzero(~all_nan_rows)
    if len(keep_rows) == 0:
        raise DataError("every task row of the forgetting matrix is NaN: nothing to analyse")
    column_has_nan = np.zeros(z.shape[1], dtype=bool)
    for row in keep_rows:
        column_has_nan |= np.isnan(z[row])
    keep_cols = np.flatnonzero(~column_has_nan)
    if len(keep_cols) == 0:
        raise DataError("every upstream example has a NaN score in some task: nothing to analyse")
    kept = z if len(keep_rows) == len(z) and len(keep_cols) == z.shape[1] else z[np.ix_(keep_rows, keep_cols)]
    if float(kept.max()) == float(kept.min()):
        raise DataError(f"the forgetting matrix is constant ({float(kept.max())}): R² is undefined")
    return Cleaned(kept, keep_rows, keep_cols, [tasks[i] for i in np.flatnonzero(all_nan_rows)])


def gram_svd(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Singular values (descending, length M) and left singular vectors (M x M) of Z."""
    m = z.shape[0]
    gram = np.zeros((m, m))
    for start in range(0, z.shape[1], BLOCK):
        block = z[:, start:start + BLOCK].astype(np.float64)
        gram += block @ block.T
    eigenvalues, vectors = np.linalg.eigh(gram)
    order = np.argsort(eigenvalues)[::-1]
    return np.sqrt(np.clip(eigenvalues[order], 0.0, None)), vectors[:, order]


def right_vectors(z: np.ndarray, u: np.ndarray, s: np.ndarray, k: int) -> np.ndarray:
    """The first k right singular vectors (k x N), v_i = Zᵀ u_i / s_i."""
    out = np.empty((k, z.shape[1]))
    for start in range(0, z.shape[1], BLOCK):
        out[:, start:start + BLOCK] = u[:, :k].T @ z[:, start:start + BLOCK].astype(np.float64)
    return out / np.where(s[:k] > 0, s[:k], 1.0)[:, None]


def total_sum_of_squares(z: np.ndarray) -> tuple[float, float]:
    """(sum of Z², sum of (Z - mean Z)²), accumulated in float64 blocks."""
    total, square = 0.0, 0.0
    for start in range(0, z.shape[1], BLOCK):
        block = z[:, start:start + BLOCK].astype(np.float64)
        total += block.sum()
        square += np.einsum("ij,ij->", block, block)
    return square, square - total ** 2 / z.size


def r2_from_singular_values(s: np.ndarray, square: float, centred: float, max_rank: int) -> np.ndarray:
    """||Z - Z_r||² = ||Z||² - sum_{i<=r} s_i², so every rank's R² comes from the spectrum alone."""
    residual = square - np.cumsum(s[:max_rank] ** 2)
    return 1.0 - np.maximum(residual, 0.0) / centred


def r2_by_rank(z: np.ndarray, max_rank: int | None = None) -> np.ndarray:
    """R²(r) for r = 1..max_rank of a NaN-free matrix."""
    s, _ = gram_svd(z)
    square, centred = total_sum_of_squares(z)
    return r2_from_singular_values(s, square, centred, min(len(s), max_rank or len(s)))


def row_shuffled_null(z: np.ndarray, seed: int = 0) -> np.ndarray:
    """Each row permuted independently: keeps row means and spreads, destroys shared column structure."""
    rng = np.random.default_rng(seed)
    z = np.asarray(z)
    out = np.empty_like(z)
    for i, row in enumerate(z):  # one row at a time: no list of M copies
        out[i] = rng.permutation(row)
    return out


MEASURED_RANKS = 10  # a fractional map's R² on its measured cells: ranks fitted one by one (forgetmap.fractional)


def measured_r2(z: np.ndarray, measured: np.ndarray, ranks: int, seed: int = 0) -> dict[str, np.ndarray]:
    """A fractional map's R² by rank over its measured cells alone (forgetmap.fractional.masked_r2: the paper's
    definition with both sums over the measured cells) and its row-shuffled null (each row's measured values
    permuted among its measured cells), up to MEASURED_RANKS (NaN beyond: each rank is a fit, not a truncation of
    one SVD). Read the two side by side: as the rank nears the number of tasks an example is measured under, a
    rank-r fit follows any values, the shuffled ones too, and both near 1."""
    from .fractional import masked_r2

    rng = np.random.default_rng(seed)
    null = np.array(z, dtype=np.float64)
    for i in range(len(null)):
        cells = np.flatnonzero(measured[i])
        null[i, cells] = rng.permutation(null[i, cells])
    fitted = min(ranks, MEASURED_RANKS)
    pad = np.full(ranks - fitted, np.nan)
    return {"r2": np.concatenate([masked_r2(z, measured, fitted, seed), pad]),
            "r2_row_shuffled": np.concatenate([masked_r2(null, measured, fitted, seed), pad])}


def two_proportion_z(hits_a: int, n_a: int, hits_b: int, n_b: int) -> tuple[float, float]:
    """Pooled two-proportion z-test (reference §3.3): z and the two-sided p-value."""
    from scipy.stats import norm

    pooled = (hits_a + hits_b) / (n_a + n_b)
    se = np.sqrt(pooled * (1 - pooled) * (1 / n_a + 1 / n_b))
    if se == 0:
        return 0.0, 1.0
    z = (hits_a / n_a - hits_b / n_b) / se
    return float(z), float(2 * norm.sf(abs(z)))


def component_tops(u_k: np.ndarray, s_k: float, v_k: np.ndarray, n_tasks: int, n_examples: int):
    """Top tasks and examples of the rank-1 component C = s u vᵀ, ranked by row and column means of C.

    Row means of C are s u_i mean(v) and column means s v_j mean(u): ranking them is invariant to the
    sign ambiguity of the SVD, and "top" means most forgotten along this component.
    """
    row_mean = s_k * u_k * v_k.mean()
    col_mean = s_k * v_k * u_k.mean()
    top_tasks = np.argsort(-row_mean, kind="stable")[:n_tasks]
    top_examples = np.argsort(-col_mean, kind="stable")[:n_examples]
    return top_tasks, row_mean[top_tasks], top_examples, col_mean[top_examples]


OUTPUTS = {"r2": "r2.tsv", "spectrum": "spectrum.png", "heatmap": "heatmap.png", "components": "components.tsv",
           "component_figure": "components.png", "sources": "component_sources.tsv", "summary": "summary.json"}


def analyse(matrix, outputs, max_rank: int = 30, n_components: int = 4, top_tasks: int = 5,
            top_examples: int = 100, figures: bool = True) -> dict:
    """Write the R² table, components, their sources, a summary and three figures.

    `outputs` maps each key of OUTPUTS to its path, or is a directory that receives OUTPUTS' file names.
    NaN handling: all-NaN task rows are dropped, then every example with a NaN in a remaining row;
    both counts are in the summary. A matrix that is constant after that is an error.
    """
    import json
    from pathlib import Path

    import pandas as pd

    from . import plots
    from .io import atomic_path

    if not isinstance(outputs, dict):
        outputs = {key: Path(outputs) / name for key, name in OUTPUTS.items()}
    outputs = {key: Path(path) for key, path in outputs.items()}
    cleaned = drop_missing(matrix.values, matrix.tasks)
    z = cleaned.z
    tasks = [matrix.tasks[i] for i in cleaned.task_index]
    categories = [matrix.categories.get(t, "") for t in tasks]
    everything = len(cleaned.example_index) == matrix.shape[1]
    sources = matrix.sources if everything else matrix.sources[cleaned.example_index]
    ids = matrix.example_ids if everything else matrix.example_ids[cleaned.example_index]

    s, u = gram_svd(z)
    square, centred = total_sum_of_squares(z)
    ranks = min(len(s), max_rank)
    r2 = r2_from_singular_values(s, square, centred, ranks)
    if matrix.completed:  # R² and its null on the measured cells alone: a completion is low-rank by construction
        measured = matrix.measured[np.ix_(cleaned.task_index, cleaned.example_index)]
        table = pd.DataFrame({"rank": np.arange(1, ranks + 1), **measured_r2(z, measured, ranks),
                              "singular_value": s[:ranks], "r2_completed": r2})
    else:
        null = row_shuffled_null(z)
        s_null, _ = gram_svd(null)
        r2_null = r2_from_singular_values(s_null, *total_sum_of_squares(null), ranks)
        del null
        table = pd.DataFrame({"rank": np.arange(1, ranks + 1), "r2": r2, "singular_value": s[:ranks],
                              "r2_row_shuffled": r2_null})
    with atomic_path(outputs["r2"]) as tmp:
        table.to_csv(tmp, sep="\t", index=False, float_format="%.6g")

    k = int(min(n_components, np.count_nonzero(s > s[0] * 1e-9)))
    v = right_vectors(z, u, s, k)
    top_rows, source_rows = [], []
    all_counts = pd.Series(sources).value_counts()
    for c in range(k):
        t_idx, t_load, e_idx, e_load = component_tops(u[:, c], s[c], v[c], top_tasks, top_examples)
        top_rows += [{"component": c + 1, "kind": "task", "rank": r + 1, "name": tasks[i], "group": categories[i],
                      "loading": float(w)} for r, (i, w) in enumerate(zip(t_idx, t_load))]
        top_rows += [{"component": c + 1, "kind": "example", "rank": r + 1, "name": ids[i], "group": sources[i],
                      "loading": float(w)} for r, (i, w) in enumerate(zip(e_idx, e_load))]
        top_counts = pd.Series(sources[e_idx]).value_counts()
        for source, n_all in all_counts.items():
            hits = int(top_counts.get(source, 0))
            zscore, p = two_proportion_z(hits, len(e_idx), int(n_all), len(sources))
            source_rows.append({"component": c + 1, "source": source, "n_top": hits,
                                "share_top": hits / len(e_idx), "share_all": n_all / len(sources),
                                "z": zscore, "p_value": p})
    for key, rows in (("components", top_rows), ("sources", source_rows)):
        with atomic_path(outputs[key]) as tmp:
            pd.DataFrame(rows).to_csv(tmp, sep="\t", index=False, float_format="%.6g")

    if figures:
        plots.spectrum(s, r2, outputs["spectrum"])
        plots.heatmap(matrix.values, matrix.tasks, matrix.task_categories(), matrix.sources, outputs["heatmap"])
        cols = plots.column_order(sources)
        parts = [s[c] * np.outer(u[:, c], v[c, cols]) for c in range(k)]
        plots.components(parts, tasks, categories, sources[cols], outputs["component_figure"])
    summary = {"tasks": len(tasks), "examples": int(z.shape[1]), "tasks_dropped_all_nan": cleaned.dropped_tasks,
               "examples_dropped_nan": int(matrix.values.shape[1] - z.shape[1]),
               "r2_rank_1_3_5": [float(table["r2"].iloc[r - 1]) if r <= ranks else None for r in (1, 3, 5)],
               "reads": {"r2": matrix.reads(measured_only=True),
                         "spectrum, components and figures": matrix.reads()}}
    with atomic_path(outputs["summary"]) as tmp:
        tmp.write_text(json.dumps(summary, indent=1))
    return summary


def summarise(r2_tables: dict[str, str], ranks=(1, 3, 5)):
    """Model x rank table of R², as the paper's cross-model comparison (empty where rank > M)."""
    import pandas as pd

    rows = []
    for model, path in r2_tables.items():
        frame = pd.read_csv(path, sep="\t")
        table = frame.set_index("rank")["r2"]
        reads = "measured cells of a completed map" if "r2_completed" in frame else "measured"
        rows.append({"model": model, **{f"rank_{r}": table.get(r, np.nan) for r in ranks}, "reads": reads})
    return pd.DataFrame(rows)


def lowrank_command(matrix: str, expected_tasks: list[str] | None, outputs: dict[str, str], max_rank: int = 30,
                    components: int = 4, top_tasks: int = 5, top_examples: int = 100) -> dict:
    """`forgetmap lowrank`: refuses a matrix whose tasks are not the config's, then `analyse`."""
    from .matrix import ForgettingMatrix

    forgetting = ForgettingMatrix.read(matrix)
    if expected_tasks is not None and forgetting.tasks != expected_tasks:
        missing = [t for t in expected_tasks if t not in forgetting.tasks]
        extra = [t for t in forgetting.tasks if t not in expected_tasks]
        raise DataError(f"{matrix}: its tasks disagree with the config (missing: {missing or 'none'}; "
                        f"not in the config: {extra or 'none'}; or another order): rebuild the matrix")
    return analyse(forgetting, outputs, max_rank, components, top_tasks, top_examples)


def summary_command(r2: list[str], out: str) -> dict:
    """`forgetmap lowrank-summary`: MODEL=r2.tsv arguments to one model x rank table."""
    from .io import atomic_path

    frame = summarise(dict(item.split("=", 1) for item in r2))
    with atomic_path(out) as tmp:
        frame.to_csv(tmp, sep="\t", index=False, float_format="%.4f")
    return {"models": len(frame)}
