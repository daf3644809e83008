"""Low-rank analysis and correlations at paper scale (85 x 141,871), on a generated matrix.

Times every rank of R², the spectrum, the components and the figures (`forgetmap.lowrank.analyse`),
with the peak of Python-tracked memory (numpy arrays included) against the matrix's own size; then
the correlation statistics at growing N to show they grow linearly.

    python benchmarks/lowrank_scale.py [--tasks 85 --examples 141871]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

from forgetmap.correlate import cross_task, pair_correlations
from forgetmap.lowrank import analyse
from forgetmap.matrix import ForgettingMatrix

SOURCES = ("c4", "common-crawl", "s2", "stack-dedup", "wikipedia", "gutenberg", "reddit")


def generated(m: int, n: int, seed: int = 0) -> ForgettingMatrix:
    """Rank-5 structure plus noise, shaped like the paper's OLMo-7B Z (mean ~0.1, R²(5) ~0.8)."""
    rng = np.random.default_rng(seed)
    z = (rng.normal(size=(m, 5)).astype(np.float32) @ rng.normal(size=(5, n)).astype(np.float32)) * 0.1
    z += 0.1 + 0.05 * rng.normal(size=(m, n)).astype(np.float32)
    tasks = [f"task_{i}" for i in range(m)]
    sources = np.array(SOURCES)[np.sort(rng.integers(0, len(SOURCES), n))]
    return ForgettingMatrix(z, tasks, np.array([f"dolma-{j:06d}" for j in range(n)]), sources,
                            np.full(n, 2.3, np.float32), {t: "flan" for t in tasks}, {"flan": "in_domain"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=85)
    parser.add_argument("--examples", type=int, default=141_871)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "forgetting.parquet"
        generated(args.tasks, args.examples).write(path)
        matrix_bytes = args.tasks * args.examples * 4
        analyse(ForgettingMatrix.read(path), Path(tmp) / "warm-up")  # imports, font cache
        start = time.perf_counter()
        matrix = ForgettingMatrix.read(path)
        read_s = time.perf_counter() - start
        summary = analyse(matrix, Path(tmp) / "lowrank")
        total_s = time.perf_counter() - start
        del matrix
        # memory on a second pass: tracemalloc sees numpy's buffers but slows every allocation
        tracemalloc.start()
        matrix = ForgettingMatrix.read(path)
        analyse(matrix, Path(tmp) / "lowrank-traced", figures=False)
        _, numeric_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        analyse(matrix, Path(tmp) / "lowrank-traced-figures")
        _, figure_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    print(json.dumps({"shape": [args.tasks, args.examples], "read_s": round(read_s, 2),
                      "read_and_analyse_s": round(total_s, 2), "matrix_mb": round(matrix_bytes / 2**20, 1),
                      "peak_numerics_over_matrix": round(numeric_peak / matrix_bytes, 2),
                      "peak_with_figures_over_matrix": round(figure_peak / matrix_bytes, 2),
                      "r2_rank_1_3_5": [round(x, 4) for x in summary["r2_rank_1_3_5"]]}))
    rng = np.random.default_rng(1)
    for n in (10_000, 50_000, args.examples):
        sub = generated(args.tasks, n)
        similarity = (sub.values * 0.2 + rng.normal(size=sub.values.shape)).astype(np.float32)
        start = time.perf_counter()
        pair_correlations(sub.values, similarity, sub.tasks)
        pairs_s = time.perf_counter() - start
        start = time.perf_counter()
        cross_task(sub.values, sub.tasks, sub.task_categories())
        cross_s = time.perf_counter() - start
        print(json.dumps({"examples": n, "pair_correlations_s": round(pairs_s, 2), "cross_task_s": round(cross_s, 2),
                          "pair_correlations_us_per_example": round(pairs_s / n * 1e6, 1)}))


if __name__ == "__main__":
    main()
