"""Choosing probes and conformal intervals at paper scale, side by side with random probes.

A generated 66 x 141,871 matrix: rank 5 plus noise whose scale differs by column (0.02 to 0.2, so
some columns are much noisier than others, as forgetting is), 46 train and 20 test tasks.

1. Time to choose k = 50 probes of 141,871 columns from rank-5 factors (D-optimal, medoids), and to
   fit the design they read (FoldInMF on the train rows), best of 3.
2. Conformal intervals for the 20 test tasks: time and peak Python-tracked memory (numpy included)
   over the matrix's, at k = 30 (46 leave-one-task-out folds).
3. Every strategy at k = 5, 10, 20, 30, 50 against 10 random draws (forgetmap.predict.probe_evaluation),
   and the intervals' coverage at 80 % and 90 % with random probes at k = 30 over 10 draws.

    OMP_NUM_THREADS=1 python benchmarks/probe_selection.py [--examples 141871]
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np
import pandas as pd


def generated(m: int, n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(m, 5)).astype(np.float32) @ rng.normal(size=(5, n)).astype(np.float32) * 0.1
    noise = rng.uniform(0.02, 0.2, n).astype(np.float32)
    return z + 0.1 + noise * rng.normal(size=(m, n)).astype(np.float32)


def best(fn, repeats: int = 3):
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return min(times), out


def main() -> None:
    from forgetmap.predict.conformal import halfwidths
    from forgetmap.predict.probe_evaluation import compare, evaluate_probes
    from forgetmap.predict.probes import design, dopt, medoids
    from forgetmap.predict.protocol import run_split
    from forgetmap.predict.registry import make_method

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=141_871)
    args = parser.parse_args()
    z = generated(66, args.examples)
    tasks = [f"t{i}" for i in range(66)]
    train, test = tasks[:46], tasks[46:]
    print(f"generated Z: 66 x {args.examples:,} ({z.nbytes / 1e6:.0f} MB), 46 train and 20 test tasks, one thread")

    t_design, (phi, reg, noise) = best(lambda: design(z[:46]))
    t_dopt, _ = best(lambda: dopt(phi / noise[:, None], 50, reg))
    t_medoids, _ = best(lambda: medoids(phi, 50, 0))
    print(f"design (FoldInMF on the train rows, rank {phi.shape[1] - 1}): {t_design:.2f} s; choosing 50 probes: "
          f"D-optimal {t_dopt:.3f} s, medoids {t_medoids:.3f} s")

    model = make_method("mf").fit(z[:46])
    known = np.sort(np.random.default_rng(0).choice(args.examples, 30, replace=False))
    tracemalloc.start()
    start = time.perf_counter()
    halfwidths(z[:46], known, model, "mf", {}, [0.8, 0.9])
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    print(f"conformal intervals (46 folds, 20 test tasks share them): {seconds:.2f} s, peak {peak / 1e6:.0f} MB "
          f"= {peak / z.nbytes:.2f}x the matrix")

    options = {"threshold": 0.0, "q": 0.1, "budget": 100}
    start = time.perf_counter()
    values, _ = evaluate_probes(z, tasks, train, test, "mf", {}, [5, 10, 20, 30, 50], 10,
                                ["random", "dopt", "medoids"], options, (), "generated")
    table = compare(values, 30)
    print(f"strategies x k ({time.perf_counter() - start:.0f} s):")
    pd.set_option("display.width", 200)
    shown = table[table["metric"].isin(["rmse", "top_q_f1", "precision_at_b"])]
    print(shown.pivot_table(index=["metric", "k"], columns="strategy", values="mean").round(4).to_string())
    print(table[table["metric"] == "rmse"][["strategy", "k", "difference_to_random", "p_value",
                                           "k_matching_random"]].round(4).to_string(index=False))
    _, _, metrics, _ = run_split(z, tasks, train, test, "mf", {}, 30, list(range(10)), intervals=(0.8, 0.9))
    for level in (0.8, 0.9):
        cover = [m[f"coverage_{level:g}"] for m in metrics]
        width = [m[f"width_{level:g}"] for m in metrics]
        print(f"intervals at {level:.0%}, random probes k = 30, 10 draws: coverage {np.mean(cover):.3f} "
              f"({min(cover):.3f}-{max(cover):.3f}), width {np.mean(width):.4f}")


if __name__ == "__main__":
    main()
