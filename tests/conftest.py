"""Test set-up: single-threaded torch (oversubscribing small CPUs is 30-50x slower), no network."""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("PYTHONHASHSEED", "0")

import torch  # noqa: E402

torch.set_num_threads(1)


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    """The one shared tiny run of config/test/config.yaml, every target (its output in run.out): read by the
    workflow tier and, as the local reference of the cluster's matrix, by the SLURM tier. Never modified:
    tests that change it work on a clone."""
    from helpers import make_workdir, snakemake

    workdir = make_workdir(tmp_path_factory.mktemp("run") / "wf")
    proc = snakemake(workdir)
    (workdir / "run.out").write_text(proc.stdout + proc.stderr)
    return workdir
