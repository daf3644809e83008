"""forgetmap's completion against the reference procedure (scikit-surprise), side by side in one run.

N = 2,000 examples, 46 train and 20 test tasks, one seed, k = 30: the three surprise methods run as the
reference runs them (refit per test task, one predict call per example) against forgetmap's
`additive`, `knn` and `mf`; both times, their ratio, and both RMSEs on the same hidden entries.

    python benchmarks/reference_vs_forgetmap.py [--matrix results/demo/forgetting.parquet]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from forgetmap.predict.protocol import run_split


def generated(m: int = 66, n: int = 2000, seed: int = 0) -> np.ndarray:
    """Low rank plus noise, with the level and spread of the paper's OLMo Z."""
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(m, 5)) @ rng.normal(size=(5, n)) * 0.1 + 0.1 + 0.05 * rng.normal(size=(m, n)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=2000)
    args = parser.parse_args()
    z = generated(n=args.examples).astype(np.float32)
    tasks = [f"t{i}" for i in range(len(z))]
    train, test = tasks[20:], tasks[:20]
    results = {}
    for method in ("surprise_additive", "surprise_knn", "surprise_svd", "additive", "knn", "mf"):
        start = time.perf_counter()
        _, _, metrics, _ = run_split(z, tasks, train, test, method, {}, 30, [0], "id")
        results[method] = {"seconds": round(time.perf_counter() - start, 3), "rmse": round(metrics[0]["rmse"], 5)}
        print(json.dumps({method: results[method]}), flush=True)
    reference_time = sum(results[m]["seconds"] for m in ("surprise_additive", "surprise_knn", "surprise_svd"))
    ours_time = sum(results[m]["seconds"] for m in ("additive", "knn", "mf"))
    print(json.dumps({"reference_seconds": round(reference_time, 2), "forgetmap_seconds": round(ours_time, 3),
                      "speedup": round(reference_time / ours_time, 1),
                      "best_reference_rmse": min(results[m]["rmse"] for m in results if m.startswith("surprise")),
                      "best_forgetmap_rmse": min(results[m]["rmse"] for m in results if not m.startswith("surprise"))}))


if __name__ == "__main__":
    main()
