"""A CPU the rates file has not measured (forgetmap.cost.probe, forgetmap.cost.figures): a few seconds of probing, kept per machine, and the
nearest measured CPU's figures scaled by what it shows."""

import time

import pytest

from forgetmap.cost import figures as policy
from forgetmap.cost import probe
from forgetmap.cost.figures import Device, cpu_figures, figures, seconds
from forgetmap.cost.rates import entry_figures, read_rates
from forgetmap.cost.work import KINDS, Work, forward_flops


def entry(machine, flops, pass_s, start=3.0):
    return {"kind": "cpu", "machine": machine, "threads": 1, "start_s": start, "warm_start_s": 0.2,
            "load_bytes_per_s": 1e9, "setup_s": {"score": 0.2, "train": 0.4}, "example_s": 1e-4,
            "source": f"{machine}, 2026-11-28, commit abc",
            "rates": {k: {"flops_per_s": flops[k], "pass_s": pass_s[k]} for k in KINDS}}


SLOW = entry("Slow CPU", dict.fromkeys(KINDS, 1e10), dict.fromkeys(KINDS, 0.05), start=11.0)
FAST = entry("Fast CPU", {"train": 7e10, "score": 8e10, "generate": 3.5e10},
             {"train": 0.006, "score": 0.0002, "generate": 0.0008}, start=4.0)


# the probe's work: the larger of each of the calibration's pairs of runs on the demo's architecture
WORK = {"train": {"flops": 7.1e10, "passes": 8}, "score": {"flops": 7.8e9, "passes": 1},
        "generate": {"flops": 9.6e8, "passes": 16}}


def probed(truth: dict) -> dict:
    """A probe's figures on a machine whose real figures are `truth`'s (what its work would take there)."""
    shape = {"parameters": 918_656, "work": WORK, "threads": 1}
    return {**shape, "seconds": policy.predicted(truth, shape), "start_s": truth["start_s"],
            "warm_start_s": 0.06, "load_bytes_per_s": 2.5e9, "machine": truth["machine"], "processes": 2}


def test_an_unmeasured_cpu_takes_the_nearest_measured_cpus_figures_scaled_by_its_probe():
    new = entry("New CPU", {"train": 9e10, "score": 9e10, "generate": 5e10},
                {"train": 0.005, "score": 0.0002, "generate": 0.0006}, start=3.2)
    measured = probed(new)
    rates = {"devices": {"cpu-slow": SLOW, "cpu-fast": FAST}}
    fig = cpu_figures(Device("cpu", "New CPU", 1), [SLOW, FAST], 918_656, measured)
    assert fig.borrowed.startswith("Fast CPU's scaled by the CPU probe (x")  # the nearer of the two
    # the scaled figures predict what the probe measured, kind by kind
    scaled = policy.scale([SLOW, FAST], measured).entry
    assert policy.predicted(scaled, measured) == pytest.approx(measured["seconds"])
    # what the probe measures directly is taken as measured; a job's setups scale with the start-ups
    assert fig.start_s == 3.2 and fig.warm_start_s == 0.06 and fig.load_bytes_per_s == 2.5e9
    assert fig.setup_s["train"] == pytest.approx(0.4 * 0.06 / 0.2)  # by the warm start-ups
    # a job of the probe's own size is estimated as the machine would run it, within the scaling's reach
    work = Work().add("train", 16 * 64 * 50, 3 * forward_flops(918_656, 4, 128, 32), 50)
    truth = seconds(work, entry_figures(new, 1.0, None, 918_656))
    assert seconds(work, fig) == pytest.approx(truth, rel=0.05)
    # two threads: the FLOP rates grow with them, as a measured CPU's do
    two = cpu_figures(Device("cpu", "New CPU", 2), [SLOW, FAST], 918_656, measured)
    assert two.rates["train"].flops_per_s == pytest.approx(2 * fig.rates["train"].flops_per_s)
    # without a probe (it failed): the first listed, as measured, said so
    plain = figures(Device("cpu", "New CPU", 1), rates, 918_656)
    assert plain.borrowed == "measured on Slow CPU, as they are"
    # a CPU model measured: its own figures, where they predict its probe within 1.5x
    own = cpu_figures(Device("cpu", "Fast CPU", 1), [SLOW, FAST], 918_656, probed(FAST))
    assert own.borrowed is None and own.rates["train"].flops_per_s == 7e10
    assert own == figures(Device("cpu", "Fast CPU", 1), rates, 918_656)  # as without a probe
    # another machine of the same name (2.5x slower): the nearest figures scaled, and why
    slower = {**SLOW, "machine": "Fast CPU"}
    other = cpu_figures(Device("cpu", "Fast CPU", 1), [SLOW, FAST], 918_656, probed(slower))
    assert other.borrowed.startswith("its CPU model's own figures miss this machine's probe by over 1.5x: Slow CPU's")
    assert other.rates["train"].flops_per_s == pytest.approx(1e10)


def test_the_probe_takes_seconds_and_is_kept_per_machine(tmp_path, monkeypatch):
    monkeypatch.setenv("FORGETMAP_ARCHITECTURES", str(tmp_path / "kept"))
    monkeypatch.setattr(probe, "BUSY", float("inf"))  # kept however busy the other test process keeps the CPUs
    started = time.monotonic()
    first = probe.measured("Probe Test CPU", 1, 1)  # kept per boot: a name alone does not say which machine
    took = time.monotonic() - started
    assert took < 60, took  # seconds (about 10 on CI's 2 cores), not a calibration
    assert all(first["seconds"][k] > 0 for k in KINDS) and first["start_s"] > first["warm_start_s"] > 0
    assert first["load_bytes_per_s"] > 1e6 and first["machine"] == "Probe Test CPU" and first["processes"] == 1
    assert 0 <= first["others"] <= 1.2  # the share of the CPUs other work held meanwhile
    started = time.monotonic()
    assert probe.measured("Probe Test CPU", 1, 1) == first and time.monotonic() - started < 1  # kept, not probed
    # this machine's probe against the shipped rates: the scaled figures predict it exactly
    shipped = [d for d in read_rates()["devices"].values() if d["kind"] == "cpu"]
    assert policy.predicted(policy.scale(shipped, first).entry, first) == pytest.approx(first["seconds"])


def test_a_probe_while_other_work_holds_the_cpus_is_not_kept_and_the_time_table_says_so(tmp_path, monkeypatch):
    """Other processes spin on every CPU while the probe runs (its own processes stood in for by ones that sleep):
    the share other work held is measured from the machine's CPU time, the figures serve this process alone, a
    plan in another process probes again, and the scaled figures say why."""
    import os
    import subprocess
    import sys

    from forgetmap.cost import harness

    monkeypatch.setenv("FORGETMAP_ARCHITECTURES", str(tmp_path / "kept"))
    monkeypatch.setattr(probe, "_UNKEPT", {})
    canned = {k: probed(SLOW)[k] for k in ("seconds", "work", "parameters", "start_s", "warm_start_s",
                                            "load_bytes_per_s")}
    calls = []

    def sleeping(code, threads, jobs, what):
        calls.append(what)
        time.sleep(2.0)
        return [canned] * jobs

    monkeypatch.setattr(harness, "together", sleeping)
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        time.sleep(0.3)
        busy = probe.measured("Busy Test CPU", 1, 2)
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    assert busy["others"] > probe.BUSY and len(calls) == 1, busy["others"]
    assert probe.measured("Busy Test CPU", 1, 2) == busy and len(calls) == 1  # this process: probed once
    assert not list((tmp_path / "kept").rglob("measured-*.json"))  # not kept: another process probes again
    monkeypatch.setattr(probe, "_UNKEPT", {})
    quiet = probe.measured("Busy Test CPU", 1, 2)  # nothing else running but the other test process
    assert len(calls) == 2
    how = policy.scale([FAST], busy).how
    assert f"probed while other work held {busy['others']:.0%} of the CPUs: not kept" in how, how
    assert "other work" not in policy.scale([FAST], {**quiet, "others": 0.1}).how


def test_a_probe_that_cannot_run_is_said_once_with_its_reason_and_kept_for_the_boot(tmp_path, monkeypatch, capsys):
    """No fork, no prctl, an import that fails: the plan takes the rates file's figures, says why once however many
    rows ask, and the next plan of this boot does not try again."""
    from forgetmap.cost import harness

    monkeypatch.setenv("FORGETMAP_ARCHITECTURES", str(tmp_path / "kept"))
    monkeypatch.setattr(policy, "_SAID", set())
    calls = []

    def failing(code, threads, jobs, what):
        calls.append(what)
        raise RuntimeError("the CPU probe: a process failed\nBlockingIOError: [Errno 11] fork: Resource unavailable")

    monkeypatch.setattr(harness, "together", failing)
    rates = {"devices": {"slow": SLOW}}
    where = Device("cpu", "Failing Test CPU", 1)
    assert policy.cpu_probe(where) is None and policy.cpu_probe(where) is None
    assert len(calls) == 1
    said = capsys.readouterr().err
    assert said.count("the CPU probe could not run") == 1 and "fork: Resource unavailable" in said
    assert figures(where, rates, 1e6, policy.probe_where(where, rates, None, None)).borrowed == \
        "measured on Slow CPU, as they are"
    monkeypatch.setattr(policy, "_SAID", set())  # another plan, later this boot: kept, not tried again
    assert policy.cpu_probe(where) is None and len(calls) == 1


def test_the_cpus_a_process_may_use_are_its_affinity_mask_and_its_cgroups_quota(tmp_path, monkeypatch):
    from forgetmap import devices

    root, own = tmp_path / "cgroup", tmp_path / "self"
    (root / "a/b").mkdir(parents=True)
    own.write_text("0::/a/b\n")
    (root / "a/b/cpu.max").write_text("max 100000\n")
    assert devices.cgroup_quota(root, own) is None
    (root / "a/cpu.max").write_text("150000 100000\n")  # a parent's quota holds its children
    assert devices.cgroup_quota(root, own) == 1.5
    (root / "cpu/x").mkdir(parents=True)
    own.write_text("5:cpu,cpuacct:/x\n")  # cgroup v1
    (root / "cpu/x/cpu.cfs_quota_us").write_text("200000\n")
    (root / "cpu/x/cpu.cfs_period_us").write_text("100000\n")
    assert devices.cgroup_quota(root, own) == 2.0
    monkeypatch.setattr(devices.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.setattr(devices, "cgroup_quota", lambda: 1.5)
    assert devices.usable_cpus() == 2
    monkeypatch.setattr(devices.os, "sched_getaffinity", lambda pid: {3}, raising=False)
    assert devices.usable_cpus() == 1
    monkeypatch.setattr(devices, "cgroup_quota", lambda: None)
    monkeypatch.setattr(devices.os, "sched_getaffinity", lambda pid: set(range(6)), raising=False)
    assert devices.usable_cpus() == 6


def test_a_cluster_plan_starts_no_probe_here_and_its_partitions_probe_job_sizes_its_cpu_jobs_once_run(
        tmp_path, monkeypatch):
    """A plan whose jobs go to SLURM: no probe process is started on this host (the harness that starts them records
    none), the partition's probe job is planned, and the CPU jobs borrow figures, saying why; once the job has run
    (its command, as the partition's node runs it), the same plan sizes them by what it measured there; one that
    could not run says why. A profile naming a CPU the rates file has measured plans no probe job."""
    import json
    from pathlib import Path

    import yaml

    from forgetmap import calibrate, devices
    from forgetmap.cost import harness
    from forgetmap.plan import Plan

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FORGETMAP_ARCHITECTURES", str(tmp_path / "kept"))
    started = []
    monkeypatch.setattr(harness, "together", lambda *args: started.append(args[3]) or [canned] * args[2])
    canned = {k: probed(SLOW)[k] for k in ("seconds", "work", "parameters", "start_s", "warm_start_s",
                                            "load_bytes_per_s")}
    config = yaml.safe_load((Path(__file__).parents[2] / "config/config.yaml").read_text())
    plan = Plan(config, cluster="slurm", cpu_partition="cpu")
    cpu_rows = [r for r in plan.job_times("demo") if r.device.kind == "cpu"]
    assert cpu_rows and not started
    assert "results/cost/probes/cpu.json" in plan.targets()
    for r in cpu_rows:
        assert r.figures.borrowed.endswith("never probed from this machine; partition cpu not measured yet: its probe "
                                           "job (results/cost/probes/cpu.json) runs first"), r.figures.borrowed

    monkeypatch.setattr(devices, "cpu_name", lambda: "Node CPU")
    summary = calibrate.probe_command("cpu", "results/cost/probes/cpu.json")  # the job, on the partition's node
    assert started == ["the CPU probe"] and summary["machine"] == "Node CPU"
    written = json.loads(Path("results/cost/probes/cpu.json").read_text())
    assert written["partition"] == "cpu" and written["seconds"] == canned["seconds"]
    assert not list((tmp_path / "kept").rglob("measured-*.json"))  # its file keeps it, not this host's cache
    for r in (r for r in plan.job_times("demo") if r.device.kind == "cpu"):
        assert r.device.name == "Node CPU" and "partition cpu's probe job (x" in r.figures.borrowed, r.figures.borrowed
    assert len(started) == 1

    def failing(*args):
        raise RuntimeError("the CPU probe: a process failed\nBlockingIOError: [Errno 11] fork: Resource unavailable")

    monkeypatch.setattr(harness, "together", failing)
    calibrate.probe_command("cpu", "results/cost/probes/cpu.json")
    for r in (r for r in plan.job_times("demo") if r.device.kind == "cpu"):
        assert r.figures.borrowed.endswith("partition cpu's probe job could not run (BlockingIOError: [Errno 11] fork: "
                                           "Resource unavailable)"), r.figures.borrowed

    machine = next(d["machine"] for d in read_rates()["devices"].values() if d["kind"] == "cpu")
    named = Plan(config, cluster="slurm", cpu_partition="cpu", cpu_model=machine)
    assert not [t for t in named.targets() if t.startswith("results/cost/")]
    assert all(r.figures.borrowed is None for r in named.job_times("demo") if r.device.kind == "cpu")
