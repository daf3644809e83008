"""Test set-up: single-threaded torch (oversubscribing small CPUs is 30-50x slower), no network; the heaviest
files first.

`pytest` runs two processes (pytest-xdist, `-n 2 --dist loadfile --no-loadscope-reorder` in pyproject.toml): each
test file runs whole in one of them, so a file's module fixtures are built once, and a session fixture (the tiny run) at most once
per process. Every test is single-threaded, so the two keep a 2-core machine busy where one left a core idle
through every unit test, every SLURM status poll and every process start. The files are handed out longest
first, so the last one to finish is short. `pytest -n 0` runs one process (`-s` needs it: workers' output is
captured)."""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("PYTHONHASHSEED", "0")

import torch  # noqa: E402

torch.set_num_threads(1)
if not torch.cuda.is_available():  # DeepSpeed (the dev extra) on a machine without a GPU: its CPU accelerator,
    os.environ.setdefault("DS_ACCELERATOR", "cpu")  # chosen, not guessed with a warning in every job's log


import pytest  # noqa: E402

# the files that take longest (CI, 2 cores), longest first; every other file follows in collection order
HEAVIEST = ("cluster/test_slurm.py", "vllm_cpu/test_vllm.py", "workflow/test_run.py", "workflow/test_posttraining.py",
            "workflow/test_examples.py", "real_model/test_smollm2.py", "workflow/test_real_runs.py", "unit/test_memory.py", "workflow/test_dag.py",
            "workflow/test_imported.py", "gpu/test_device.py", "unit/test_monitor.py")


def pytest_collection_modifyitems(config, items):
    """Heaviest files first (a stable sort: the order within a file, and of the other files, is kept)."""
    def rank(item):
        path = item.path.as_posix()
        return next((k for k, name in enumerate(HEAVIEST) if path.endswith("tests/" + name)), len(HEAVIEST))

    items.sort(key=rank)


# the cached virtualenvs (and the converted real model) that selected tests need and that are slow to make, by the
# tests' marker: made from the start
# of the run in the background (at the lowest priority), where downloading and unpacking hide behind the tests'
# work; a test that needs one before it is ready waits for it under its lock (tests/cached_env.py)
PREWARMED = {"axolotl": "axolotl_env", "olmo_core": "olmocore_env", "real_model": "smollm2"}


def pytest_collection_finish(session):
    if os.environ.get("PYTEST_XDIST_WORKER", "gw0") != "gw0" or session.config.option.collectonly:
        return  # one process starts them (every worker collects every test)
    import subprocess
    import sys
    from pathlib import Path

    wanted = sorted({module for item in session.items for marker, module in PREWARMED.items()
                     if item.get_closest_marker(marker)})
    for module in wanted:
        subprocess.Popen([sys.executable, "-c", f"import {module}; {module}.ensure()"], cwd=Path(__file__).parent,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         preexec_fn=lambda: os.nice(19), start_new_session=True)


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    """The one shared tiny run of config/test/config.yaml, every target (its output in run.out): read by the
    workflow tier and, as the local reference of the cluster's matrix, by the SLURM tier and the device tier.
    Made once per `pytest` run: under pytest-xdist the first process that asks makes it in the run's shared
    temporary directory, under a lock, and the others wait for it and read it (each used to make its own). Never
    modified: tests that change it work on a clone."""
    from filelock import FileLock

    from helpers import make_workdir, snakemake

    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        shared = tmp_path_factory.mktemp("run")
    else:  # the run's directory, above each process's own
        shared = tmp_path_factory.getbasetemp().parent / "tiny-run"
        shared.mkdir(exist_ok=True)
    with FileLock(str(shared / "made.lock")):
        workdir = shared / "wf"
        if (workdir / "run.out").exists():
            return workdir
        make_workdir(workdir)
        # as a user runs it: DeepSpeed (the dev extra) left to choose its accelerator, so that a job importing it
        # shows its warning in the job's log
        proc = snakemake(workdir, env={"DS_ACCELERATOR": None})
        (workdir / "run.out").write_text(proc.stdout + proc.stderr)
    return workdir
