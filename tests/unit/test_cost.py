"""A job's time before it runs (forgetmap.cost): the work it holds at the rates its device measured, a borrowed
device said, SLURM's time with its margin, the CPU's figures measured by `forgetmap calibrate`."""

import json

import pytest

from forgetmap.cost.estimate import runtime_minutes
from forgetmap.cost.figures import Device, figures, seconds
from forgetmap.cost.rates import Figures, Rate, cpu_key, read_rates
from forgetmap.cost.work import KINDS, SETUPS, Work
from helpers import command


def rates(cpu_machine="Test CPU", threads=1):
    return {"devices": {
        "h200": {"kind": "gpu", "start_s": 10.0, "load_bytes_per_s": 2e9, "source": "h200, 2026-11-27, commit abc",
                 "rates": {"train": [{"parameters": 1e9, "flops_per_s": 3e14, "pass_s": 0.0}],
                           "score": [{"parameters": 1e9, "flops_per_s": 3e14, "pass_s": 0.0},
                                     {"parameters": 7e9, "flops_per_s": 4e14, "pass_s": 0.0}],
                           "generate": [{"parameters": 1e9, "flops_per_s": 3e14, "pass_s": 0.04}]}},
        "cpu": {"kind": "cpu", "machine": cpu_machine, "threads": threads, "start_s": 3.0, "warm_start_s": 0.2,
                "load_bytes_per_s": 1e9,
                "source": f"{cpu_machine}, 2026-11-28, commit def",
                "rates": {k: {"flops_per_s": 1e10, "pass_s": 0.01} for k in KINDS}}}}


def test_a_jobs_time_is_its_start_its_loading_and_each_kind_of_work_at_its_rate():
    work = Work(load_bytes=4e9).add("train", 1e6, 6e9, 100).add("generate", 1e3, 2e9, 50)
    fig = figures(Device("gpu", "h200", 1), rates(), 1e9)
    assert fig.borrowed is None
    expected = 10.0 + 4e9 / 2e9 + (1e6 * 6e9 / 3e14) + (1e3 * 2e9 / 3e14 + 50 * 0.04)
    assert seconds(work, fig) == pytest.approx(expected)
    assert seconds(work, fig, warm=True) == pytest.approx(expected)  # no warm start measured on it: cold
    # of the sizes measured, the nearest: a 7B model scores at the 7B rate
    assert figures(Device("gpu", "h200", 1), rates(), 6.5e9).rates["score"].flops_per_s == 4e14


def test_a_device_without_figures_borrows_another_and_says_from_which():
    a100 = figures(Device("gpu", "a100", 1), rates(), 1e9)
    assert a100.borrowed.startswith("h200's for a100, x0.32 by their bf16 peaks (training, scoring) and x0.32 by "
                                    "their memory bandwidths (decoding)")
    assert a100.rates["train"].flops_per_s == pytest.approx(3e14 * 312 / 989)
    assert a100.rates["score"].flops_per_s == pytest.approx(3e14 * 312 / 989)
    # decoding reads every weight each step: scaled by bandwidth (an L40S has 2x an A100's peak, half its bandwidth)
    l40s = figures(Device("gpu", "l40s", 1), rates(), 1e9)
    assert l40s.rates["train"].flops_per_s == pytest.approx(3e14 * 362 / 989)
    assert l40s.rates["generate"].flops_per_s == pytest.approx(3e14 * 864 / 4800)
    assert l40s.rates["generate"].pass_s == 0.04  # a decode step's launches: the host's, not the card's
    unnamed = figures(Device("gpu", None, 1), rates(), 1e9)
    assert unnamed.borrowed == "h200's for an unnamed GPU, as they are: no GPU model named"
    assert unnamed.rates["train"].flops_per_s == 3e14
    absent = figures(Device("gpu", "mi300x", 1), rates(), 1e9)
    assert absent.borrowed == "h200's for mi300x, as they are: 'mi300x' has no peak in forgetmap.cost.cards"
    other_cpu = figures(Device("cpu", "Another CPU", 2), rates(), 1e6)
    assert other_cpu.borrowed == "measured on Test CPU, as they are" and other_cpu.rates["score"].flops_per_s == 2e10
    own = figures(Device("cpu", "Test CPU", 1), rates(), 1e6)
    assert own.borrowed is None
    # each CPU model measured has its own figures; one not measured borrows the first listed
    two = rates()
    two["devices"]["cpu-second"] = {**two["devices"]["cpu"], "machine": "Second CPU", "source": "Second CPU, x",
                                    "rates": {k: {"flops_per_s": 5e10, "pass_s": 0.01} for k in KINDS}}
    second = figures(Device("cpu", "Second CPU", 1), two, 1e6)
    assert second.borrowed is None and second.rates["train"].flops_per_s == 5e10
    assert figures(Device("cpu", "Test CPU", 1), two, 1e6).rates["train"].flops_per_s == 1e10
    assert figures(Device("cpu", "Third CPU", 1), two, 1e6).borrowed == "measured on Test CPU, as they are"
    # a job forked from the run's warm process starts in the warm start's time
    work = Work().add("score", 1e4, 2e6, 10)
    assert seconds(work, own) - seconds(work, own, warm=True) == pytest.approx(3.0 - 0.2)
    with pytest.raises(KeyError, match="forgetmap calibrate"):
        figures(Device("cpu", "x", 1), {"devices": {}}, 1e6)


def test_slurm_time_is_the_estimate_with_its_margin_and_grows_with_each_attempt():
    assert runtime_minutes(600) == 15 + 5  # 10 min x 1.5, 5 more
    assert runtime_minutes(600, attempt=2) == 40
    assert runtime_minutes(1) == 6


def test_a_rates_file_that_is_corrupt_newer_or_short_of_a_figure_is_refused_naming_it(tmp_path):
    from forgetmap.errors import DataError

    path = tmp_path / "rates.json"
    path.write_text('{"devices": {')
    with pytest.raises(DataError, match=rf"rates file {path}: not readable as JSON .*forgetmap calibrate --out"):
        read_rates(path)
    path.write_text(json.dumps({**rates(), "version": 2}))
    with pytest.raises(DataError, match=r"version 2 is newer than this forgetmap reads \(1\)"):
        read_rates(path)
    short = rates()
    del short["devices"]["cpu"]["rates"]["generate"]
    path.write_text(json.dumps(short))
    with pytest.raises(DataError, match=r"device 'cpu' lacks rates.generate"):
        read_rates(path)
    path.write_text(json.dumps(rates()))  # a file from before versions: read as version 1
    assert read_rates(path)["devices"] == rates()["devices"]
    assert read_rates(tmp_path / "absent.json")["devices"] == {}


def test_the_package_rates_say_where_each_figure_was_measured():
    shipped = read_rates()
    assert "h200" in shipped["devices"] and shipped["version"] == 1
    cpus = {name: d for name, d in shipped["devices"].items() if d["kind"] == "cpu"}
    assert cpus and all(name == cpu_key(d["machine"]) for name, d in cpus.items())
    for name, device in shipped["devices"].items():
        assert set(device["rates"]) == set(KINDS), name
        assert "commit" in device["source"] and "2026-" in device["source"], name


def test_calibrate_measures_this_cpu_and_keeps_the_other_devices(tmp_path, monkeypatch):
    from forgetmap import calibrate
    from forgetmap.calibrate import calibrate_command
    from forgetmap.cost import harness
    from forgetmap.devices import cpu_name

    timed = harness.timed  # one measured run of each, not the median of three: what is written is checked here,
    for module in (harness, calibrate):  # not the rates' noise
        monkeypatch.setattr(module, "timed", lambda fn, repeats=3: timed(fn, 1))

    path = tmp_path / "rates.json"
    path.write_text(json.dumps(rates(cpu_machine="Old CPU")))
    summary = calibrate_command(threads=1, out=str(path), jobs=1)
    written = json.loads(path.read_text())
    assert written["version"] == 1 and not list(tmp_path.glob(".rates.json.*"))  # whole, of this format
    assert written["devices"]["h200"] == rates()["devices"]["h200"]  # another device's figures untouched
    assert written["devices"]["cpu"] == rates(cpu_machine="Old CPU")["devices"]["cpu"]  # and another CPU model's
    cpu = written["devices"][cpu_key(cpu_name())]
    assert cpu["machine"] == cpu_name() and cpu["threads"] == 1 and summary["start_s"] == cpu["start_s"] > 0.5
    for kind in KINDS:
        assert cpu["rates"][kind]["flops_per_s"] > 1e7 and cpu["rates"][kind]["pass_s"] >= 0, kind
    # the real jobs' setups (forked as a warm run forks them) and tokenizing, measured, not assumed
    assert set(cpu["setup_s"]) == set(SETUPS) and all(v >= 0 for v in cpu["setup_s"].values())
    assert 1e-6 < cpu["example_s"] < 0.01 and cpu["processes"] == 1 and "1 processes at once" in cpu["source"]


def test_the_figures_of_processes_measuring_at_once_are_their_medians():
    from forgetmap.calibrate import median_figures

    def one(x):
        return {"start_s": x, "warm_start_s": x / 10, "load_bytes_per_s": 1e9 * x, "example_s": 1e-4 * x,
                "setup_s": {"score": x, "train": 2 * x}, "rates": {k: {"flops_per_s": 1e9 * x, "pass_s": x / 100}
                                                                  for k in KINDS}}
    figures = median_figures([one(1.0), one(3.0), one(2.0)])
    assert figures["start_s"] == 2.0 and figures["setup_s"] == {"score": 2.0, "train": 4.0}
    assert figures["rates"]["score"] == {"flops_per_s": 2e9, "pass_s": 0.02}


def test_a_jobs_setup_and_its_examples_are_part_of_its_time():
    fig = Figures(1.0, 1e9, {k: Rate(1e9, 0.0, "x") for k in KINDS}, "x", setup_s={"score": 2.0},
                       example_s=0.001)
    work = Work(examples=1000)
    work.setups["score"] = 1
    assert seconds(work, fig) == pytest.approx(1.0 + 2.0 + 1.0)


def test_a_retry_of_an_estimated_job_says_in_its_log_how_far_the_estimate_missed(tmp_path, monkeypatch):
    """Snakemake asks the retry's runtime before it runs the job: the plan leaves the note beside the job's log,
    and the job's command says it first in the log it writes (then the note is gone)."""
    import subprocess
    from pathlib import Path

    import yaml

    from forgetmap.cost.estimate import stage_estimate
    from forgetmap.plan import SCORE_LOG, Plan

    config = yaml.safe_load((Path(__file__).parents[2] / "config" / "config.yaml").read_text())
    monkeypatch.chdir(tmp_path)
    plan = Plan(config)
    log = SCORE_LOG.format(model="demo", run="city_qa", shard=0)
    first = plan.runtime("demo", "score", 1, log)
    assert not list(tmp_path.rglob("*.retry.json"))  # a first attempt is no retry
    second = plan.runtime("demo", "score", 2, log)
    assert second == 2 * first
    note = Path(str((tmp_path / log).resolve()) + ".retry.json")
    assert json.loads(note.read_text())["previous_min"] == first
    with open(tmp_path / log, "w") as out:  # the job, its stdout and stderr to its log, as the rule runs it
        assert subprocess.run([command("forgetmap"), "schema"], stdout=out, stderr=out).returncode == 0
    said = (tmp_path / log).read_text().splitlines()[0]
    minutes = stage_estimate(plan, "demo", "score") / 60
    assert (f"attempt 2 of this job, given {second} min: attempt 1 did not finish in its {first} min, "
            f"{first / minutes:.1f}x the estimate of {minutes:.1f} min") in said
    assert not note.exists()
    # a configured runtime is the user's: no estimate to speak of
    config["models"]["demo"]["resources"]["score"]["runtime"] = 30
    assert Plan(config).runtime("demo", "score", 2, log) == 60 and not note.exists()


def test_an_arms_fine_tune_of_a_monitored_task_is_estimated_without_the_monitors_checks(tmp_path, monkeypatch):
    """The demo's arms fine-tune its forecast tasks, whose own fine-tunes are monitored; an arm's fine-tune is not
    (Plan.arm_finetune_settings), so its scoring is its judging alone, as plain fine-tuning's judged checkpoint's."""
    from pathlib import Path

    import yaml

    from forgetmap.plan import Plan

    monkeypatch.chdir(tmp_path)
    plan = Plan(yaml.safe_load((Path(__file__).parents[2] / "config/config.yaml").read_text()))
    rows = {r.job: r for r in plan.job_times("demo")}
    assert rows["finetune, monitored (longest)"].work.flops["score"] > 0  # the checks' probes
    assert rows["arm random"].work.flops["score"] == pytest.approx(rows["plain fine-tune judged"].work.flops["score"])
    assert rows["arm random"].work.passes["train"] > rows["finetune (longest)"].work.passes["train"]  # replay's stretch
