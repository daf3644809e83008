"""Job times learned from the run (forgetmap.cost.learned): three finished jobs of a kind on its device give the
rest their time and SLURM time, forked and cold starts apart; a job on another device, or a benchmark file that cannot
be read, is not learned from."""

from pathlib import Path

import pytest
import yaml

from forgetmap.cost.estimate import runtime_minutes
from forgetmap.cost.figures import seconds
from forgetmap.cost.table import time_table
from forgetmap.devices import cpu_name
from forgetmap.plan import Plan

CONFIG = Path(__file__).parents[2] / "config" / "config.yaml"


def finished(job, seconds, device: str, warm: bool = False):
    """A job's benchmark file and log as Snakemake and the job leave them."""
    Path(job.benchmark).parent.mkdir(parents=True, exist_ok=True)
    Path(job.benchmark).write_text(f"s\th:m:s\tmax_rss\n{seconds}\t0:00:{seconds:02.0f}\t100\n")
    Path(job.log).parent.mkdir(parents=True, exist_ok=True)
    note = "; forked from the run's warm process" if warm else ""
    Path(job.log).write_text(f"INFO forgetmap.models: device: {device}{note}\nINFO done\n")


def row(plan, label):
    return next(r for r in plan.job_times("demo") if r.job == label)


def test_a_kinds_finished_jobs_on_its_device_give_the_rest_their_time(tmp_path, monkeypatch):
    """Three finished jobs started alike before their median ratio replaces the estimate; jobs in a process of their
    own scale the SLURM time, jobs forked from the warm process the time a local run forks by, never each other."""
    monkeypatch.chdir(tmp_path)
    plan = Plan(yaml.safe_load(CONFIG.read_text()))
    before = row(plan, "finetune (longest)")
    forks = before.seconds != before.cold_seconds  # the demo's local run forks its fine-tunes from a warm process
    minutes = plan.resource("demo", "finetune", "runtime")
    jobs = before.jobs
    fig = before.figures
    # two fine-tunes finished on this CPU in processes of their own, 3x and 4x their estimates: not yet learned
    finished(jobs[0], 3 * seconds(jobs[0].work, fig), f"cpu ({cpu_name()})")
    finished(jobs[1], 4 * seconds(jobs[1].work, fig), f"cpu ({cpu_name()})")
    # one on a GPU (another device kind: never learned from)
    finished(jobs[2], 50 * seconds(jobs[2].work, fig), "cuda (NVIDIA H200)")
    assert row(plan, "finetune (longest)").learned is None
    finished(jobs[3], 2 * seconds(jobs[3].work, fig), f"cpu ({cpu_name()})")
    learned = row(plan, "finetune (longest)")  # the same plan: the benchmark files changed, read again
    assert learned.learned == "x3.00, learned from 3 finished jobs"  # the median of 3, 4 and 2
    assert learned.cold_seconds == pytest.approx(3 * before.cold_seconds)
    assert learned.seconds == pytest.approx(before.seconds if forks else 3 * before.seconds)
    # its SLURM time follows (the stage's longest estimate: the arms' too, learned from nothing yet)
    longest = max(r.cold_seconds for r in plan.job_times("demo") if r.stage == "finetune")
    assert plan.resource("demo", "finetune", "runtime") == runtime_minutes(longest) >= minutes
    # three forked from the warm process at 2x their warm estimate: the local run's time, not the SLURM time
    for job in jobs[4:7]:
        finished(job, 2 * seconds(job.work, fig, warm=True), f"cpu ({cpu_name()})", warm=True)
    learned = row(plan, "finetune (longest)")
    assert learned.cold_seconds == pytest.approx(3 * before.cold_seconds)
    if forks:
        assert learned.learned == "x3.00, learned from 3 finished jobs; x2.00 warm, learned from 3 finished forked jobs"
        assert learned.seconds == pytest.approx(2 * before.seconds)
    # other kinds learn nothing from the fine-tunes
    assert row(plan, "score").learned is None
    # a benchmark file that cannot be read: passed over, said under the table
    Path(jobs[7].benchmark).parent.mkdir(parents=True, exist_ok=True)
    Path(jobs[7].benchmark).write_text("not a benchmark\n")
    Path(jobs[7].log).parent.mkdir(parents=True, exist_ok=True)
    Path(jobs[7].log).write_text(f"device: cpu ({cpu_name()})\n")
    assert row(plan, "finetune (longest)").cold_seconds == pytest.approx(3 * before.cold_seconds)
    table = time_table(plan.job_times("demo"), plan.learning_notes("demo"))
    assert "x3.00, learned from 3 finished jobs" in table
    assert f"passed over: {jobs[7].benchmark}: KeyError (not learned from)" in table


def test_a_job_that_ran_on_another_cpu_model_is_not_learned_from(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plan = Plan(yaml.safe_load(CONFIG.read_text()))
    score = row(plan, "score")
    finished(score.jobs[0], 100, "cpu (Another CPU @ 1.00GHz)")
    for job, taken in zip(score.jobs[1:4], (90, 100, 120)):
        finished(job, taken, "cpu")  # a log that names no CPU model: a CPU's, learned from
    assert row(plan, "score").learned == "x{:.2f}, learned from 3 finished jobs".format(
        100 / seconds(score.jobs[2].work, score.figures))


def test_a_logs_device_line_names_the_cpu_model_with_its_own_parentheses(tmp_path):
    from forgetmap.cost.learned import ran_on

    log = tmp_path / "job.log"
    log.write_text("x\n2026 INFO forgetmap.models: device: cpu (Intel(R) Xeon(R) Processor @ 2.50GHz); forked from "
                   "the run's warm process\nmore\n")
    assert ran_on(str(log)) == ("cpu", "Intel(R) Xeon(R) Processor @ 2.50GHz", True)
    log.write_text("device: cuda (NVIDIA H200)\n")
    assert ran_on(str(log)) == ("cuda", "NVIDIA H200", False)
    log.write_text("no device said\n")
    assert ran_on(str(log)) is None and ran_on(str(tmp_path / "absent.log")) is None


def test_planning_counts_the_gradient_jobs_batches_as_the_job_makes_them():
    import numpy as np

    from forgetmap.cost.jobs import examples_together, task_mean_batches
    from forgetmap.data.chat import Encoded
    from forgetmap.gradients import batches, together

    for parameters, longest in ((918_656, 40), (918_656, 96), (8_000_000, 64), (135_000_000, 128), (30, 4096)):
        assert examples_together(parameters, longest) == together(parameters, longest)
    # a task's mean gradient: the batches mean_projection cuts of its examples, at 135M (one example's gradients do
    # not fit twice: as many as fill the job's max_length) and at the demo's size (many at once)
    rng = np.random.default_rng(0)
    for parameters, room in ((135_000_000, 128), (135_000_000, 512), (918_656, 128)):
        lengths = rng.integers(8, 120, 32)
        examples = [Encoded(np.zeros(n, dtype=np.int64), 1, n) for n in lengths]
        made = batches(examples, lambda longest: max(together(parameters, longest), room // max(1, longest)))
        assert task_mean_batches(lengths, parameters, room) == [(len(b), max(lengths[i] for i in b)) for b in made]


def test_a_first_plan_takes_its_lengths_from_the_data_its_jobs_will_write(tmp_path, monkeypatch):
    """Before any data exists, a pretrained base's tokenizer and the demo's generators give the lengths (the SmolLM2
    example's first plan had taken every example at max_length: 3.7x its work, 13x its scoring): the same work as
    once the shard and the task files are written."""
    from forgetmap.data.tasks import write_task
    from forgetmap.data.upstream import write_shard
    from helpers import tiny_config
    from standins import save_standin

    monkeypatch.chdir(tmp_path)
    config = tiny_config()
    config["models"]["tiny"]["base"] = {"kind": "pretrained", "path": str(save_standin(tmp_path / "base", "llama"))}
    config["models"]["tiny"]["chat_template"] = "olmo"
    config.pop("mitigation")
    before = {r.job: r for r in Plan(config).job_times("tiny")}
    assert all(r.lengths == "measured" for r in before.values())
    plan = Plan(config)
    for corpus, shards in plan.shards.items():
        for k in range(len(shards)):
            settings = plan.shard_settings(corpus, k)
            write_shard(settings["corpus"], settings["first"], settings["count"], plan.corpus_shard(corpus, k))
    for task in config["tasks"]:
        settings = plan.task_settings(task)
        write_task(task, settings["spec"], settings["seed"], settings["demo_seed"], plan.task_path(task))
    after = {r.job: r for r in Plan(config).job_times("tiny")}
    assert set(after) == set(before)
    assert {"finetune", "score"} <= {r.stage for r in after.values()}
    for job, row in after.items():
        assert row.work.tokens == pytest.approx(before[job].work.tokens, rel=1e-9), job
        assert row.work.flops == pytest.approx(before[job].work.flops, rel=1e-9), job
