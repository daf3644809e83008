"""The full prediction protocol at paper scale, on a generated 66 x 141,871 low-rank-plus-noise Z.

Three splits of the 66 tasks (20 test tasks each, the other 46 train) x 10 seeds x every method but
the surprise ones, each (method, split) one job as the `predict` rule runs it (fitted once, seeds one
after another, metrics on the hidden entries, and by default the conformal intervals at 80 % and 90 %
of the regression methods, as `prediction.intervals`), `--processes` jobs at a time, timed end to end. Memory
is each job's peak of Python-tracked allocations (numpy included; module imports warmed up first) plus
the matrix it reads, over the matrix (`semantic` also reads a similarity matrix of Z's shape, counted
the same way).

    python benchmarks/prediction_scale.py --processes 2 [--examples 141871]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import time
import tracemalloc

import numpy as np

from forgetmap.predict.registry import DEFAULT_METHODS as PREDICTION_METHODS
from forgetmap.predict.protocol import iterate_split

SLOW_FIRST = ("logistic_mf", "implicit_als")  # longest jobs first keeps both processes busy to the end
INTERVALS = (0.8, 0.9)  # the predict rule's default `prediction.intervals` (set by --no-intervals to ())


def generated(m: int, n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(m, 5)).astype(np.float32) @ rng.normal(size=(5, n)).astype(np.float32) * 0.1
    return z + 0.1 + 0.05 * rng.normal(size=(m, n)).astype(np.float32)


JOB = None


def _run(method: str, name: str) -> None:
    z, tasks, splits, similarity = JOB
    for _ in iterate_split(z, tasks, *splits[name], method, {}, 30, list(range(10)), name,
                           similarity=similarity if method == "semantic" else None, intervals=INTERVALS):
        pass  # the workflow writes each seed's rows here


def _job(job) -> tuple[str, str, float]:
    t0 = time.perf_counter()
    _run(*job)
    return (*job, time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=141_871)
    parser.add_argument("--methods", nargs="+", default=list(PREDICTION_METHODS))
    parser.add_argument("--processes", type=int, default=1, help="jobs at once, as `snakemake --cores N` runs them")
    parser.add_argument("--no-intervals", action="store_true", help="without the conformal intervals (the "
                        "default prediction.intervals computes them in every regression method's job)")
    args = parser.parse_args()
    global INTERVALS
    INTERVALS = () if args.no_intervals else INTERVALS
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        if os.environ.get(var) != "1":
            raise SystemExit(f"set {var}=1: each job gets one core, as the predict rule's threads: 1")
    z = generated(66, args.examples)
    similarity = np.random.default_rng(1).uniform(size=z.shape).astype(np.float32)
    tasks = [f"t{i}" for i in range(len(z))]
    splits = {}
    for s, name in enumerate("abc"):
        test = tasks[20 * s:20 * (s + 1)]
        splits[name] = ([t for t in tasks if t not in test], test)
    global JOB
    JOB = (z, tasks, splits, similarity)
    jobs = sorted(((m, name) for m in args.methods for name in splits), key=lambda j: j[0] not in SLOW_FIRST)
    start = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(args.processes) as pool:
        done = list(pool.imap_unordered(_job, jobs, chunksize=1))
    total = time.perf_counter() - start
    seconds = {m: round(sum(t for mm, _, t in done if mm == m), 2) for m in args.methods}
    peaks = {}
    for method in args.methods:  # memory on a second pass: tracemalloc slows every allocation
        small = z[:, :1000]  # warm-up: module imports are not the job's data
        for _ in iterate_split(small, tasks, *splits["a"], method, {}, 30, [0], "a",
                               similarity=similarity[:, :1000] if method == "semantic" else None, intervals=INTERVALS):
            pass
        tracemalloc.start()
        _run(method, "a")
        inputs = z.nbytes * (2 if method == "semantic" else 1)
        peaks[method] = round((tracemalloc.get_traced_memory()[1] + inputs) / z.nbytes, 2)
        tracemalloc.stop()
    print(json.dumps({"matrix": list(z.shape), "splits": 3, "seeds": 10, "test_tasks_per_split": 20,
                      "intervals": list(INTERVALS),
                      "processes": args.processes, "wall_seconds": round(total, 2),
                      "cpu_seconds_by_method": seconds, "cpu_seconds_total": round(sum(seconds.values()), 2),
                      "peak_over_matrix_by_method": peaks}))


if __name__ == "__main__":
    main()
