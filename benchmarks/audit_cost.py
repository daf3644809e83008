"""What a check's audit examples cost: one check's probe scoring on the demo's base, side by side in one process, with
each of `--audits` audit examples beside the map's k probes (docs/monitor.md; BENCHMARKS.md).

    python benchmarks/audit_cost.py --workdir . --audits 30 60   # after the demo (1 thread, a minute)
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=Path("."))
    parser.add_argument("--model", default="demo")
    parser.add_argument("--audits", type=int, nargs="+", default=[30, 60])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    import torch
    import yaml
    from transformers import AutoModelForCausalLM

    from forgetmap.config import fit_tasks, resolve
    from forgetmap.meter import ProbeMeter
    from forgetmap.models import load_tokenizer
    from forgetmap.monitor import ForecastMap

    torch.set_num_threads(1)
    cfg = resolve(yaml.safe_load((args.workdir / "config/config.yaml").read_text()))
    spec = cfg["models"][args.model]
    base = args.workdir / f"results/{args.model}/base"
    tokenizer, model = load_tokenizer(base), AutoModelForCausalLM.from_pretrained(base)
    shards = [str(s) for s in sorted((args.workdir / "results/data/upstream").glob("*/shard-*.parquet"))]
    meters = {}
    for audit in args.audits:
        forecast_map = ForecastMap.from_matrix(args.workdir / f"results/{args.model}/forgetting.parquet", shards,
                                               fit_tasks=fit_tasks(cfg, args.model), k=cfg["forecast"]["k"],
                                               audit=audit, chat_template=spec["chat_template"],
                                               max_length=spec["score"]["max_length"])
        meters[audit] = ProbeMeter.for_rows(model, tokenizer, forecast_map.measured_rows(), spec["chat_template"],
                                            spec["score"]["max_length"])
        meters[audit].measure()
    runs = {audit: [] for audit in args.audits}
    for _ in range(args.repeats):  # interleaved, so the machine's drift falls on every size alike
        for audit, meter in meters.items():
            started = time.perf_counter()
            meter.measure()
            runs[audit].append(time.perf_counter() - started)
    times = {audit: float(np.median(found)) for audit, found in runs.items()}
    for audit in args.audits:
        print(f"{cfg['forecast']['k']} probes + {audit} audit examples: {times[audit]:.3f} s per check (median of "
              f"{args.repeats}, interleaved)", flush=True)
    first = args.audits[0]
    for audit in args.audits[1:]:
        print(f"{audit} against {first}: {times[audit] / times[first]:.2f}x, {times[audit] - times[first]:+.3f} s per check")


if __name__ == "__main__":
    main()
