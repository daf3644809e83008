"""Time to build the DAG of the paper-scale example config (85 tasks x 141,871 upstream examples).

Generates stand-in data of the right shape in a scratch copy of the workflow and times a dry run.

    python benchmarks/dag_build.py [--config config/examples/olmo-1b.yaml]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))


def main() -> None:
    from helpers import fake_resources, make_workdir

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="config/examples/olmo-1b.yaml")
    parser.add_argument("--upstream", type=int, default=141_871)
    parser.add_argument("--profile", default=None, help="e.g. profiles/slurm")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = make_workdir(Path(tmp) / "wf")
        fake_resources(workdir, REPO / args.config, args.upstream)
        cmd = [sys.executable, "-m", "snakemake", "--dry-run", "--quiet", "rules", "--cores", "1",
               "--configfile", str(REPO / args.config)]
        if args.profile:
            cmd += ["--profile", str(REPO / args.profile)]
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True)
        seconds = time.perf_counter() - start
    if proc.returncode:
        sys.exit(proc.stderr[-3000:])
    jobs = [line.split() for line in proc.stdout.splitlines() if line.strip() and line.split()[-1].isdigit()]
    print(json.dumps({"config": args.config, "upstream_examples": args.upstream,
                      "jobs": {j[0]: int(j[-1]) for j in jobs if len(j) == 2}, "dry_run_seconds": round(seconds, 2)}))


if __name__ == "__main__":
    main()
