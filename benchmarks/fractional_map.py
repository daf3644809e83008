"""A map at a fraction of its cells (forgetmap.fractional), judged against the full map it was cut from: each
design at 10 %, 20 %, 30 % and 50 % of the cells, completed and compared with the cells it did not measure.

Per design and fraction: RMSE of the completed cells over Z's standard deviation; the median over tasks of the
Spearman correlation and the top-10 % F1 between each completed row (measured cells as measured) and the full
row; the share of completed cells inside their 80 % and 90 % intervals; R²(1..5) on the measured cells against
the full map's (forgetmap.lowrank); the ceiling of any rank-5 completion: the full map's own rank-5 truncation
in the unmeasured cells, its Spearman and F1 as above; and the share of predicted-replay choices unchanged: for each of the split's
test tasks, the top 12.5 % of examples by mf's completion of its row from 30 random probes, fitted on the
fractional map's training rows (completed) against the full map's. The rows themselves are never tuned on: the
completion's rank and ridge are chosen on measured cells held out.

    python benchmarks/fractional_map.py --released resources/released/smollm2-map
    python benchmarks/fractional_map.py --matrix results/demo/forgetting.parquet --split results/demo/splits/id.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from forgetmap import fractional
from forgetmap.lowrank import r2_by_rank

FRACTIONS = (0.1, 0.2, 0.3, 0.5)
LEVELS = (0.8, 0.9)


def load(args) -> tuple[np.ndarray, list[str], list[str], np.ndarray, list[list[str]]]:
    """(Z, tasks, example ids, sources, [the id split's train tasks, its test tasks])."""
    if args.released:
        import pickle

        from forgetmap.released import read_meta

        d = Path(args.released)
        z = np.load(d / "forgetting.npy").astype(np.float64)
        tasks, _ = read_meta(d / "forgetting.npy.meta", len(z))
        ids = (d / "forgetting_example_ids.txt").read_text().split()
        sources = np.array((d / "forgetting_sources.txt").read_text().split())
        with open(d / "forgetting_split_id.pkl", "rb") as handle:
            split = pickle.load(handle)
        names = [[info["name"] for info in split[f"{part}_ocl_task_info"]] for part in ("train", "test")]
        return z, tasks, ids, sources, names
    from forgetmap.matrix import ForgettingMatrix

    matrix = ForgettingMatrix.read(args.matrix)
    z = np.asarray(matrix.values, dtype=np.float64)
    split = json.loads(Path(args.split).read_text()) if args.split else {"train_tasks": [], "test_tasks": []}
    return (z, list(matrix.tasks), [str(e) for e in matrix.example_ids], np.asarray(matrix.sources).astype(str),
            [split["train_tasks"], split["test_tasks"]])


def top_share(p: np.ndarray, t: np.ndarray, q: float) -> float:
    k = max(1, int(round(q * len(t))))
    return len(set(np.argsort(-p)[:k]) & set(np.argsort(-t)[:k])) / k


def replay_choices(full: np.ndarray, cut: np.ndarray, train: list[int], test: list[int], seed: int = 0) -> float:
    from forgetmap.predict.registry import make_method

    rng = np.random.default_rng(seed)
    a, b = make_method("mf").fit(full[train].astype(np.float32)), make_method("mf").fit(cut[train].astype(np.float32))
    shares = []
    for i in test:
        known = np.sort(rng.choice(full.shape[1], 30, replace=False))[None, :]
        values = full[i][known]
        shares.append(top_share(b.predict(known, values)[0], a.predict(known, values)[0], 0.125))
    return float(np.mean(shares))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--released")
    parser.add_argument("--matrix")
    parser.add_argument("--split")
    parser.add_argument("--designs", nargs="+", default=list(fractional.DESIGNS))
    parser.add_argument("--fractions", nargs="+", type=float, default=list(FRACTIONS))
    parser.add_argument("--out")
    args = parser.parse_args()
    z, tasks, ids, sources, (train_tasks, test_tasks) = load(args)
    train, test = [tasks.index(t) for t in train_tasks], [tasks.index(t) for t in test_tasks]
    sd = float(z.std())
    full_r2 = r2_by_rank(z.astype(np.float32), 5)
    print(f"{len(tasks)} tasks x {len(ids)} examples; full map R2(1..5) {np.round(full_r2, 3).tolist()}")
    u, s, vt = np.linalg.svd(z, full_matrices=False)
    truncated = (u[:, :5] * s[:5]) @ vt[:5]
    rows = []
    for fraction in args.fractions:
        for kind in args.designs:
            start = time.perf_counter()
            mask = fractional.design(kind, fraction, tasks, ids, sources, measured=z)
            fit = fractional.complete(z, mask, sources, levels=LEVELS)
            hidden = ~mask
            values = fit.values
            row = {"design": kind, "fraction": fraction, "measured": float(mask.mean()),
                   "least_tasks_per_example": int(mask.sum(axis=0).min()),
                   "rank": fit.rank, "rmse_over_sd": float(np.sqrt(np.mean((values[hidden] - z[hidden]) ** 2)) / sd),
                   "spearman": float(np.median([spearmanr(values[i], z[i]).statistic for i in range(len(z))])),
                   "spearman_min": float(np.min([spearmanr(values[i], z[i]).statistic for i in range(len(z))])),
                   "top10_f1": float(np.median([top_share(values[i], z[i], 0.1) for i in range(len(z))]))}
            for level in LEVELS:
                row[f"coverage_{int(level * 100)}"] = float(np.mean(np.abs(values[hidden] - z[hidden])
                                                                  <= fit.halfwidths[level][hidden]))
            r2 = fractional.masked_r2(z, mask, 5)
            row.update({f"r2_{r}": float(r2[r - 1]) for r in range(1, 6)})
            ceiling = np.where(mask, z, truncated)  # the full map's own rank-5 part where unmeasured
            row["ceiling_spearman"] = float(np.median([spearmanr(ceiling[i], z[i]).statistic for i in range(len(z))]))
            row["ceiling_top10_f1"] = float(np.median([top_share(ceiling[i], z[i], 0.1) for i in range(len(z))]))
            row["replay_unchanged"] = replay_choices(z, values, train, test) if test else float("nan")
            row["seconds"] = time.perf_counter() - start
            rows.append(row)
            print(" ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()), flush=True)
    table = pd.DataFrame(rows)
    table.attrs["full_r2"] = full_r2.tolist()
    if args.out:
        table.to_csv(args.out, sep="\t", index=False)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))


if __name__ == "__main__":
    main()
