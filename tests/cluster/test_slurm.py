"""The SLURM profile on a real single-node SLURM cluster (slurm-up.sh starts one; CI runs as root).

The tiny workflow goes through `--profile profiles/slurm` exactly as a user submits it, with two
command-line overrides this cluster needs: no accounting database (`--slurm-status-command squeue`)
and a short first status delay. What ran is read back from slurmctld (`scontrol show job`).
"""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from forgetmap.matrix import ForgettingMatrix
from helpers import by_rule, clone_workdir, data_file, edited, make_workdir, planned_jobs, snakemake, tiny_config, write_config

pytestmark = pytest.mark.cluster
HERE = Path(__file__).parent
MATRIX = "results/tiny/forgetting.parquet"
GPU_RULES = {"base_model", "finetune", "score"}
PROBE = "results/cost/probes/cpu.json"
SLURM = ("--profile", "profiles/slurm", "--slurm-status-command", "squeue",
         "--slurm-init-seconds-before-status-checks", "2")


def _partitions() -> set[str]:
    done = subprocess.run(["sinfo", "-h", "-o", "%R"], capture_output=True, text=True)
    return set(done.stdout.split()) if done.returncode == 0 else set()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    """A running cluster with the profile's partitions: this machine's, or one started here and stopped when the
    session ends. Not before: with SLURM installed and its daemons down, every later Snakemake process would
    wait 9 s at start (the SLURM plugin asks `scontrol show config` when it is imported, and that times out)."""
    if shutil.which("sinfo") and {"cpu", "gpu"} <= _partitions():
        yield
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip("starting a local SLURM cluster needs root and apt-get (CI has both)")
    started = tmp_path_factory.mktemp("slurm") / "started"
    try:
        subprocess.run(["bash", str(HERE / "slurm-up.sh"), str(started)], check=True, timeout=900)
        yield
    finally:
        subprocess.run(["bash", str(HERE / "slurm-down.sh"), str(started)], timeout=120)


def slurm_jobs(workdir: Path) -> list[dict]:
    """Every job slurmctld knows that ran in `workdir`: rule (from the plugin's comment), partition,
    GPUs asked for, state; in submission order."""
    done = subprocess.run(["scontrol", "show", "job", "-o"], capture_output=True, text=True, check=True)
    jobs = []
    for line in done.stdout.splitlines():
        fields = dict(re.findall(r"(\S+?)=(\S*)", line))
        if fields.get("WorkDir") != str(workdir):
            continue
        rule = re.match(r"rule_(\w+?)(?:_wildcards_|$)", fields.get("Comment", ""))
        jobs.append({"id": int(fields["JobId"]), "rule": rule.group(1) if rule else None,
                     "partition": fields.get("Partition"), "gpus": fields.get("TresPerJob", ""),
                     "state": fields.get("JobState"), "minutes": _minutes(fields.get("TimeLimit", ""))})
    return sorted(jobs, key=lambda j: j["id"])


def _minutes(limit: str) -> int | None:
    """scontrol's TimeLimit ([days-]hours:minutes:seconds) in minutes."""
    found = re.fullmatch(r"(?:(\d+)-)?(\d+):(\d+):(\d+)", limit)
    if not found:
        return None
    days, hours, minutes, _ = (int(g or 0) for g in found.groups())
    return (days * 24 + hours) * 60 + minutes


def gpu_config():
    """The tiny config with one GPU per base, fine-tuning and scoring job."""
    return edited(tiny_config(), lambda c: [c["models"]["tiny"]["resources"][stage].update(gpu=1)
                                            for stage in ("base", "finetune", "score")])


@pytest.fixture(scope="module")
def local_matrix(tiny_run):
    return ForgettingMatrix.read(tiny_run / MATRIX)  # the session's shared local run (tests/conftest.py)


@pytest.fixture(scope="module")
def submitted(cluster, tmp_path_factory):
    workdir = make_workdir(tmp_path_factory.mktemp("slurm-run") / "wf", gpu_config())
    planned = planned_jobs(workdir, MATRIX)
    snakemake(workdir, MATRIX, *SLURM, timeout=1800)
    return workdir, planned


def test_every_job_ran_as_a_slurm_job_with_its_partition_and_gpus(submitted):
    workdir, planned = submitted
    jobs = slurm_jobs(workdir)
    assert by_rule([(j["rule"], {}) for j in jobs]) == by_rule(planned)
    assert all(j["state"] == "COMPLETED" for j in jobs)
    for job in jobs:
        if job["rule"] in GPU_RULES:
            assert job["partition"] == "gpu", job
            assert job["gpus"] == "gres:gpu:1", job
        else:
            assert job["partition"] == "cpu" and "gpu" not in job["gpus"], job
    log = (workdir / "results/logs/tiny/finetune/city_qa.log").read_text()
    assert "set by the scheduler" in log  # the job kept SLURM's CUDA_VISIBLE_DEVICES


def test_the_cluster_matrix_equals_the_local_one_bit_for_bit(submitted, local_matrix):
    cluster_matrix = ForgettingMatrix.read(submitted[0] / MATRIX)
    assert cluster_matrix.tasks == local_matrix.tasks
    assert np.array_equal(cluster_matrix.values, local_matrix.values)
    assert np.array_equal(cluster_matrix.base_nll, local_matrix.base_nll)


def test_an_unknown_partition_or_too_many_gpus_fails_with_slurms_reason_and_the_rest_runs(cluster, tmp_path):
    # (--set-resources on the command line replaces the profile's: base_model goes to the default partition)
    workdir = make_workdir(tmp_path / "wf", gpu_config())
    done = snakemake(workdir, MATRIX, *SLURM, "--keep-going", "--set-resources",
                     "finetune:slurm_partition=nonexistent", "score:gpu=64", check=False, timeout=1800)
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert re.search(r"invalid partition specified: nonexistent", output), output[-3000:]
    assert re.search(r"Requested node configuration is not available", output), output[-3000:]
    # what did not depend on the failed submissions still ran
    assert (workdir / "results/tiny/base/config.json").exists()
    assert sorted(p.name.split(".")[0] for p in (workdir / "results/data/tasks").glob("*.parquet")) == [
        "city_qa", "hex_copy", "mod10_add"]
    assert not (workdir / MATRIX).exists()


def test_adding_a_task_submits_exactly_the_new_jobs_given_the_time_their_kinds_finished_jobs_took(
        cluster, tiny_run, tmp_path, monkeypatch):
    """The session's local run finished; its fine-tunes and score jobs are made to have taken 10 minutes each in
    processes of their own (their benchmark files and logs say so: a job forked from a warm process teaches a
    cluster job's time nothing), the config leaves their SLURM time to the estimate, and a task is added: exactly
    the new task's jobs are submitted (those the dry run plans), its fine-tune and score jobs with the time those
    took, learned, not the estimate's minimum, and the matrix gains its row."""
    from forgetmap.plan import Plan

    workdir = clone_workdir(tiny_run, tmp_path / "wf")
    for pattern in ("finetune/*.tsv", "score/*/shard-*.tsv"):
        for bench in (workdir / "results/benchmarks/tiny").glob(pattern):
            lines = bench.read_text().splitlines()
            bench.write_text("\n".join([lines[0], "\t".join(["600.0", *lines[1].split("\t")[1:]])]) + "\n")
    for log in (workdir / "results/logs/tiny").rglob("*.log"):  # run in processes of their own, as cluster jobs
        log.write_text(log.read_text().replace("; forked from the run's warm process", ""))
    config = edited(tiny_config(), lambda c: [c["tasks"].update(add_qa={"category": "world", "n_examples": 24}),
                                              *(c["models"]["tiny"]["resources"][stage].update(runtime=None)
                                                for stage in ("finetune", "score"))])
    write_config(workdir, config)
    monkeypatch.chdir(workdir)
    plan = Plan(config, cluster="slurm")  # as the Snakefile plans it under the profile: the nodes never probed
    learned = {r.stage: r.learned for r in plan.job_times("tiny") if r.job in ("finetune (longest)", "score shard 0")}
    assert all(note and "learned from" in note for note in learned.values()), learned
    expected = {stage: plan.resource("tiny", stage, "runtime") for stage in ("finetune", "score")}
    assert min(expected.values()) > 15, expected  # 10 min x 1.5 + 5: the estimate alone gives 6
    planned = planned_jobs(workdir, *SLURM, MATRIX)
    assert by_rule(planned) == {"prepare_task": 1, "finetune": 1, "score": 2, "forgetting_matrix": 1}
    before = {j["id"] for j in slurm_jobs(workdir)}
    snakemake(workdir, *SLURM, MATRIX, timeout=1800)
    new = [j for j in slurm_jobs(workdir) if j["id"] not in before]
    assert by_rule([(j["rule"], {}) for j in new]) == by_rule(planned)
    for job in new:
        if job["rule"] in expected:
            assert job["minutes"] == expected[job["rule"]], job
    assert ForgettingMatrix.read(workdir / MATRIX).tasks[-1] == "add_qa"


def test_the_cpu_probe_runs_once_as_a_job_on_the_cpu_partition_and_sizes_the_cpu_jobs_after(cluster, tmp_path):
    """The config leaves the CPU jobs' SLURM time to the estimate and the profile names no CPU: the probe runs as a
    job on the partition they go to, never on the submitting host; the next plan sizes them by what it measured
    there and plans it no more."""
    config = edited(tiny_config(), lambda c: [c["models"]["tiny"]["resources"][stage].pop("runtime")
                                              for stage in ("base", "finetune", "score")])
    workdir = make_workdir(tmp_path / "wf", config)
    env = {"FORGETMAP_ARCHITECTURES": str(tmp_path / "kept")}
    snakemake(workdir, *SLURM, PROBE, env=env, timeout=900)
    (job,) = [j for j in slurm_jobs(workdir) if j["rule"] == "cpu_probe"]
    assert job["partition"] == "cpu" and job["state"] == "COMPLETED", job
    probe = json.loads((workdir / PROBE).read_text())
    assert probe["partition"] == "cpu" and probe["machine"] and all(v > 0 for v in probe["seconds"].values()), probe
    assert not list((tmp_path / "kept").rglob("measured-*.json"))  # nothing probed, nor kept, on this host
    dry = snakemake(workdir, "--dry-run", *SLURM, env=env)
    text = dry.stdout + dry.stderr
    assert "never probed" not in text and not re.search(r"^cpu_probe\s+1$", text, re.M), text[-3000:]
    assert re.search(r"\[1\] .*(: measured on this device|'s scaled by partition cpu's probe job \(x)", text), text[-3000:]
