"""Time to build the DAG of the paper-scale example config (85 tasks x 141,871 upstream examples).

Generates stand-in data of the right shape in a scratch copy of the workflow and times a dry run.

    python benchmarks/dag_build.py [--config olmo-1b]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import os
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))


def main() -> None:
    from examples import example_config
    from helpers import make_workdir

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="olmo-1b", help="an example config's name (config/examples/NAME.yaml)")
    parser.add_argument("--upstream", type=int, default=141_871)
    parser.add_argument("--profile", default=None, help="e.g. profiles/slurm")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = make_workdir(Path(tmp) / "wf")
        config = example_config(workdir, args.config, n_upstream=args.upstream)  # its data and models, made here
        cmd = [sys.executable, "-m", "snakemake", "--dry-run", "--quiet", "rules", "--cores", "1",
               "--configfile", str(config)]
        if args.profile:
            cmd += ["--profile", str(REPO / args.profile)]
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True,
                              env={**os.environ, "HF_HUB_CACHE": str(workdir / "hub"), "HF_HUB_OFFLINE": "1"})
        seconds = time.perf_counter() - start
    if proc.returncode:
        sys.exit(proc.stderr[-3000:])
    jobs = [line.split() for line in proc.stdout.splitlines() if line.strip() and line.split()[-1].isdigit()]
    print(json.dumps({"config": args.config, "upstream_examples": args.upstream,
                      "jobs": {j[0]: int(j[-1]) for j in jobs if len(j) == 2}, "dry_run_seconds": round(seconds, 2)}))


if __name__ == "__main__":
    main()
