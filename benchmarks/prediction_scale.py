"""The full prediction protocol at paper scale, on a generated 66 x 141,871 low-rank-plus-noise Z.

Three splits (20 in-domain test tasks; two out-of-domain groups of 20) x 10 seeds x every method but
the surprise ones, as the workflow runs them (each split and method fitted once, all seeds batched),
timed end to end with the peak of Python-tracked memory (numpy included) against the matrix.

    python benchmarks/prediction_scale.py [--examples 141871]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import time
import tracemalloc

import numpy as np

from forgetmap.config import PREDICTION_METHODS
from forgetmap.predict.protocol import iterate_split


def generated(m: int, n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(m, 5)).astype(np.float32) @ rng.normal(size=(5, n)).astype(np.float32) * 0.1
    return z + 0.1 + 0.05 * rng.normal(size=(m, n)).astype(np.float32)


JOB = None


def _job(job) -> float:
    """One (method, split) job, all seeds, as the `predict` rule runs it."""
    method, name = job
    z, tasks, splits = JOB
    t0 = time.perf_counter()
    for _ in iterate_split(z, tasks, *splits[name], method, {}, 30, list(range(10)), name):
        pass  # the workflow writes each seed's rows here
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=141_871)
    parser.add_argument("--methods", nargs="+", default=[m for m in PREDICTION_METHODS])
    parser.add_argument("--processes", type=int, default=1, help="jobs at once, as `snakemake --cores N` runs them")
    args = parser.parse_args()
    z = generated(66 + 40, args.examples)  # 66 "FLAN" rows + two 20-row out-of-domain groups
    tasks = [f"t{i}" for i in range(len(z))]
    test_id = tasks[:20]
    train = tasks[20:66]
    splits = {"id": (train, test_id), "ood-a": (train, tasks[66:86]), "ood-b": (train, tasks[86:106])}
    global JOB
    JOB = (z, tasks, splits)
    start = time.perf_counter()
    jobs = [(method, name) for method in args.methods for name in splits]
    with multiprocessing.get_context("fork").Pool(args.processes) as pool:
        seconds = pool.map(_job, jobs)
    total = time.perf_counter() - start
    timings = {m: round(sum(t for (mm, _), t in zip(jobs, seconds) if mm == m), 2) for m in args.methods}
    peaks = {}
    for method in args.methods:  # memory on a second pass: tracemalloc slows every allocation
        tracemalloc.start()
        for _ in iterate_split(z, tasks, *splits["id"], method, {}, 30, list(range(10)), "id"):
            pass
        peaks[method] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    print(json.dumps({"matrix": list(z.shape), "splits": 3, "seeds": 10, "test_tasks_per_split": 20,
                      "processes": args.processes, "wall_seconds": round(total, 2), "seconds_by_method": timings,
                      "peak_over_matrix_by_method": {m: round(p / z.nbytes, 2) for m, p in peaks.items()}}))


if __name__ == "__main__":
    main()
