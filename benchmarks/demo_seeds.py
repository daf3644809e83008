"""The demo's matrix statistics over seeds: what holds on any machine, and what varies.

    python benchmarks/demo_seeds.py --seeds 0 1 2 [--vary finetune|base] [--set finetune.lr=3e-4]

For each seed, a scratch copy of the workflow runs the config up to the forgetting matrix with
`models.<model>.finetune.seed` (`--vary finetune`: every fine-tune's example order changes; the base
model and the data are built once and shared) or `models.<model>.base.seed` (`--vary base`: the base
model's initial weights and pretraining order change, and everything after them) set to it, and
prints the statistics `demo_matrix.py` prints. The last line is the range (min, max) over the seeds.
Training amplifies floating-point differences between CPUs much as it amplifies a change of seed, so
the range over seeds is the honest size of what one machine's run can show.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import yaml

from forgetmap.correlate import category_summary, cross_task
from forgetmap.lowrank import r2_by_rank, row_shuffled_null
from forgetmap.matrix import ForgettingMatrix

REPO = Path(__file__).resolve().parents[1]
FILES = ("Snakefile", "rules", "config", "profiles", "envs", "workflow/report")


def statistics(path: Path) -> dict:
    m = ForgettingMatrix.read(path)
    z = m.values.astype(np.float64)
    pairs = cross_task(z, m.tasks, m.task_categories())
    summary = category_summary(pairs).set_index("pairs")
    same = pairs[pairs["category_a"] == pairs["category_b"]]
    per_category = same.groupby("category_a")["pearson_column_centred"].mean()
    return {"r2_1": r2_by_rank(z, 5)[0], "r2_3": r2_by_rank(z, 5)[2], "r2_5": r2_by_rank(z, 5)[4],
            "null_r2_1": r2_by_rank(row_shuffled_null(z), 5)[0], "null_r2_3": r2_by_rank(row_shuffled_null(z), 5)[2],
            "null_r2_5": r2_by_rank(row_shuffled_null(z), 5)[4],
            "within": summary.loc["within category", "pearson_column_centred"],
            "across": summary.loc["across categories", "pearson_column_centred"],
            "p_within_vs_across": summary.loc["within - across", "p_value"],
            "share_negative": float((z < 0).mean()), "mean": float(z.mean()),
            **{f"within_{category}": value for category, value in per_category.items()}}


def workdir(path: Path, config: dict) -> Path:
    for item in FILES:
        src, dst = REPO / item, path / item
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(src, dst) if src.is_dir() else shutil.copy2(src, dst)
    (path / "config/config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def snakemake(path: Path, *targets: str) -> None:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    subprocess.run([sys.executable, "-m", "snakemake", "--cores", str(os.cpu_count()), *targets, "--quiet", "all"],
                   cwd=path, env=env, check=True, stdout=subprocess.DEVNULL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--vary", choices=["finetune", "base"], default="finetune")
    parser.add_argument("--config", default=str(REPO / "config/config.yaml"))
    parser.add_argument("--set", nargs="*", default=[], help="finetune.KEY=VALUE overrides (YAML values)")
    parser.add_argument("--keep", default=None, help="keep the scratch runs under this directory")
    args = parser.parse_args()
    base = yaml.safe_load(Path(args.config).read_text())
    (model, spec), = base["models"].items()
    for item in args.set:
        key, value = item.split("=", 1)
        section, name = key.split(".", 1)
        spec[section][name] = yaml.safe_load(value)
    root = Path(args.keep or tempfile.mkdtemp(prefix="demo-seeds-"))
    rows = []
    shared = None
    for seed in args.seeds:
        config = copy.deepcopy(base)
        config["models"][model][args.vary]["seed"] = seed
        config.pop("mitigation", None)  # the matrix is all this needs
        path = workdir(root / f"seed-{seed}", config)
        if shared is not None and args.vary == "finetune":  # the base and data do not depend on it
            for part in ("data", f"{model}/base", f"{model}/scores/base"):
                shutil.copytree(shared / "results" / part, path / "results" / part, copy_function=shutil.copy2)
        matrix = f"results/{model}/forgetting.parquet"
        snakemake(path, matrix)
        shared = shared or path
        row = {"seed": seed, **{k: round(float(v), 4 if k.startswith("p_") else 3)
                                for k, v in statistics(path / matrix).items()}}
        rows.append(row)
        print(json.dumps(row), flush=True)
    keys = [k for k in rows[0] if k != "seed"]
    print(json.dumps({"range_over_seeds": {k: [min(r[k] for r in rows), max(r[k] for r in rows)] for k in keys},
                      "varied": f"{args.vary}.seed", "settings": spec["finetune"]}))
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
