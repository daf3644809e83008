"""The forgetting monitor: a forecast map of a base model (OLMo-2 stand-in, plain text and chat examples), the
callback inside transformers' `Trainer` and TRL's `SFTTrainer` (checks, logged scalars, forecast rows, the stop
at a budget, a resume), and the refusals before training starts."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from forgetmap.predict.ends import studentized_ends
from forgetmap.predict.registry import make_method
from helpers import page_data, refit_strata, released_fixture
from monitor_run import MAX_LENGTH, N_CHAT, N_LM, TASKS, make_trainer, monitored_base
from standins import TULU_TEMPLATE, save_standin, sentences


@pytest.fixture(scope="module")
def mapped(tmp_path_factory):
    """(the base model's directory, the forgetting matrix's path, the upstream directory, its map's path)."""
    return monitored_base(tmp_path_factory.mktemp("monitor"))


def test_a_maps_forecast_is_the_forecast_jobs_for_the_same_probe_values(mapped):
    from forgetmap.matrix import ForgettingMatrix
    from forgetmap.monitor import ForecastMap
    from forgetmap.predict.forecast import choose, complete, fit_rows

    _, matrix_path, _, map_path = mapped
    matrix = ForgettingMatrix.read(matrix_path)
    train, usable = fit_rows(matrix, matrix.tasks, "m")
    read = ForecastMap.read(map_path)
    assert read.k == 8 and len(read.example_ids) == len(usable) == N_LM + N_CHAT - 1
    assert np.array_equal(read.known, choose(train, 8, "dopt", 0, "m"))  # as the workflow's forecast chooses
    assert set(read.probe_rows["kind"]) <= {"lm", "chat"} and read.probe_rows["example_id"].tolist() == \
        matrix.example_ids[usable[read.known]].tolist()
    values = np.random.default_rng(1).normal(size=(1, 8)) * 0.2
    # the forecast's own settings: the fold-in through the origin (forgetmap.predict.forecast.FORECAST_PARAMS)
    assert read.params == {"origin": True}
    expected, widths = complete(train, read.known, values, "mf", read.params, [0.8, 0.9])
    row, got = read.forecast(values[0])
    assert np.array_equal(read.forecast(np.zeros(8))[0], np.zeros(len(row), dtype=np.float32))  # nothing changed
    assert np.array_equal(row, expected[0])
    assert sorted(got) == [0.8, 0.9] and all(np.array_equal(got[level], widths[level]) for level in widths)


def test_a_map_written_before_the_strata_is_read_as_drawn_uniformly(mapped, tmp_path):
    """A map file without the `stratum` column (forgetmap before the audit's strata): its audit is one stratum, its
    bound the uniform audit's, its ends still calibrated. An edited column is refused, naming it."""
    import pyarrow.parquet as pq

    from forgetmap.monitor import ForecastMap

    _, _, _, map_path = mapped
    table = pq.read_table(map_path)
    assert "stratum" in table.column_names and ForecastMap.read(map_path).strata.max() == 1
    pq.write_table(table.drop(["stratum"]), tmp_path / "before.parquet")
    before = ForecastMap.read(tmp_path / "before.parquet")
    assert before.strata is None and before.bound_ends(0.9) is not None
    assert before.audit.tolist() == ForecastMap.read(map_path).audit.tolist()
    import pyarrow as pa

    from forgetmap.errors import DataError

    stratum = table.column("stratum").to_numpy().copy()
    stratum[np.flatnonzero(stratum == -1)[0]] = 0  # a probe put in a stratum: the file was edited or damaged
    pq.write_table(table.set_column(table.schema.get_field_index("stratum"), "stratum", pa.array(stratum, pa.int8())),
                   tmp_path / "edited.parquet")
    with pytest.raises(DataError, match=r"edited.parquet: column `stratum`: row\(s\) \[\d+\] .* -1 at the probes"):
        ForecastMap.read(tmp_path / "edited.parquet")


@pytest.mark.filterwarnings("ignore:`gradient_checkpointing` is deprecated:FutureWarning")  # TRL's SFTConfig
def test_an_sft_trainer_logs_forecasts_at_each_evaluation_and_stops_at_a_budget(mapped, tmp_path):
    pytest.importorskip("trl")
    from forgetmap.monitor import ForecastMap, ForgettingMonitor

    base, _, _, map_path = mapped
    forecast_map = ForecastMap.read(map_path)
    # a budget the forecast's upper bound exceeds from the first check: two checks in a row stop training
    monitor = ForgettingMonitor(str(map_path), budget=-10.0, patience=2, level=0.8)  # 6 fit tasks: 0.8 at most
    trainer = make_trainer("trl", base, tmp_path / "run", monitor, max_steps=10)
    trainer.train()
    assert trainer.state.global_step == 4  # checks at steps 2 and 4, then the stop
    # TRL's default bf16=True on a CPU: the probes scored under bf16 autocast as training runs, the body and the
    # output head apart (the head check passed under the same autocast), within bf16's rounding of fp32
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from forgetmap.monitor import ProbeMeter

    assert trainer.args.bf16 and monitor.meter.scorer.use_hidden
    model, tokenizer = AutoModelForCausalLM.from_pretrained(base), AutoTokenizer.from_pretrained(base)
    rows = forecast_map.measured_rows()
    autocast = ProbeMeter.for_rows(model, tokenizer, rows, "auto", MAX_LENGTH,
                                   autocast=lambda: torch.autocast("cpu", dtype=torch.bfloat16)).measure()
    np.testing.assert_allclose(monitor.baseline, autocast, atol=1e-5)
    assert 0 < np.abs(monitor.baseline - ProbeMeter.for_rows(model, tokenizer, rows, "auto", MAX_LENGTH).measure()).max() < 5e-2
    assert (tmp_path / "run" / "checkpoint-4").is_dir()
    logged = [entry for entry in trainer.state.log_history if "eval_forget_mean" in entry]
    assert [entry["step"] for entry in logged] == [2, 4]
    for entry in logged:
        assert {"eval_forget_upper", "eval_forget_lower", "eval_forget_forecast_mean", "eval_forget_audit_mean",
                "eval_forget_forecast_forgotten", "eval_forget_over_budget", "eval_forget_over_budget_lower",
                "eval_forget_over_budget_upper", "eval_forget_forecast_over_budget", "eval_forget_probe_mean",
                "eval_forget_seconds"} <= set(entry) and "eval_forget_estimate" not in entry
        # the headline users watch is the estimate its interval bounds, the forecast's own under its own name
        assert entry["eval_forget_lower"] < entry["eval_forget_mean"] < entry["eval_forget_upper"]
        assert entry["eval_forget_over_budget_lower"] <= entry["eval_forget_over_budget"] <= \
            entry["eval_forget_over_budget_upper"]
    # the probes moved: the fine-tune's learning rate is high
    assert abs(logged[-1]["eval_forget_probe_mean"]) > 1e-3
    out = tmp_path / "run" / "forgetmap-monitor"
    import pyarrow.parquet as pq
    from forgetmap.io import read_metadata
    from forgetmap.predict.bound import mean_bound, share_bound

    for step, entry in zip((2, 4), logged):
        path = out / f"check-{step:08d}.parquet"
        rows = pq.read_table(path).to_pandas()
        meta = read_metadata(path)
        assert rows["example_id"].tolist() == forecast_map.example_ids.tolist()
        expected, widths = forecast_map.forecast(np.asarray(meta["probe_values"]))
        np.testing.assert_allclose(rows["forecast"], expected, atol=1e-5)  # probe values rounded to 1e-6
        np.testing.assert_allclose(rows["halfwidth_0.9"], widths[0.9])
        assert math.isclose(float(rows["forecast"].mean()), entry["eval_forget_forecast_mean"], rel_tol=1e-4)
        assert math.isclose(float(np.mean(meta["probe_values"])), entry["eval_forget_probe_mean"], abs_tol=1e-5)
        # the bound: the forecast corrected by the 30 audit examples' residuals (predict.bound), at level 0.8
        assert rows["audit"].sum() == 30 and not (rows["audit"] & rows["probe"]).any()
        assert meta["audit_ids"] == rows["example_id"][rows["audit"]].tolist()
        # drawn by the fit rows' two strata, its ends as the fit tasks place the truth (the map's, recorded with
        # the check; forgetmap.predict.ends, tests/unit/test_ends.py)
        strata = refit_strata(forecast_map.train, forecast_map.known)
        assert forecast_map.strata.tolist() == strata.tolist() == rows["stratum"].tolist()
        ends = studentized_ends(forecast_map.train, forecast_map.known, forecast_map.completion()[0], "mf",
                                forecast_map.params, forecast_map.audit, strata, [0.8])[0.8]
        assert meta["bound_ends"] == pytest.approx(ends, rel=1e-9) and ends[0] > 0 and ends[1] > 0
        bound = mean_bound(expected, forecast_map.known, np.asarray(meta["probe_values"]), forecast_map.audit,
                           np.asarray(meta["audit_values"]), 0.8, ends=ends, strata=strata)
        assert (entry["eval_forget_mean"], entry["eval_forget_lower"], entry["eval_forget_upper"]) == pytest.approx(
            (bound.estimate, bound.lower, bound.upper), abs=1e-5)
        audited, others = np.asarray(meta["audit_values"]), strata >= 0  # each stratum's mean weighted by its size
        own = sum(np.mean(others & (strata == h)) / np.mean(others) * audited[strata[forecast_map.audit] == h].mean()
                  for h in (0, 1))
        assert entry["eval_forget_audit_mean"] == pytest.approx(own, abs=1e-5)
        share = share_bound(expected, forecast_map.known, np.asarray(meta["probe_values"]), forecast_map.audit,
                            np.asarray(meta["audit_values"]), -10.0, 0.8, strata=strata)  # every example over it
        assert entry["eval_forget_over_budget_upper"] == pytest.approx(share.upper) == 1.0
        assert entry["eval_forget_over_budget"] == pytest.approx(share.estimate)
        assert entry["eval_forget_forecast_over_budget"] == pytest.approx(float(np.mean(rows["forecast"] > -10.0)))
    trajectory = pd.read_csv(out / "trajectory.tsv", sep="\t")
    assert trajectory["step"].tolist() == [2, 4] and "eval_forget_upper" in trajectory


@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")  # peft under TRL
def test_an_sft_trainers_lora_adapters_with_checkpointing_and_packed_rows_are_monitored(mapped, tmp_path):
    """TRL's `peft_config` (LoRA on q and v), gradient checkpointing and packed rows, as large models are fine-tuned on
    one card: the monitor scores through the adapters (zero at the start: the baseline is the base's to 1e-5), checks
    at each evaluation, and the adapters' training moves the probes."""
    pytest.importorskip("trl")
    from peft import LoraConfig, PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from forgetmap.monitor import ForecastMap, ForgettingMonitor, ProbeMeter

    base, _, _, map_path = mapped
    monitor = ForgettingMonitor(str(map_path))
    trainer = make_trainer("trl", base, tmp_path / "run", monitor, max_steps=4, bf16=False, packing=True,
                           activation_checkpointing=True, learning_rate=5e-2,
                           peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    trainer.train()
    assert isinstance(trainer.model, PeftModel) and trainer.model.base_model.model.is_activation_checkpointing
    rows = ForecastMap.read(map_path).measured_rows()
    alone = ProbeMeter.for_rows(AutoModelForCausalLM.from_pretrained(base), AutoTokenizer.from_pretrained(base), rows, "auto",
                                MAX_LENGTH).measure()
    np.testing.assert_allclose(monitor.baseline, alone, atol=1e-5)
    assert [c["step"] for c in monitor.checks] == [2, 4] and monitor.meter.scorer.use_hidden
    assert abs(monitor.checks[-1]["eval_forget_probe_mean"]) > 1e-3


def test_a_resumed_trainer_keeps_the_monitors_baseline_checks_and_replayed_share(mapped, tmp_path):
    from forgetmap.monitor import ForecastReplay, ForgettingMonitor

    base, _, upstream, map_path = mapped

    def monitor():  # over the budget at every check: the replayed share rises by 0.1 each time, never stopping
        return ForgettingMonitor(str(map_path), budget=-10.0, patience=100, level=0.8,
                                 replay=ForecastReplay(upstream, step=0.1, max_share=0.5))

    first = monitor()
    trainer = make_trainer("hf", base, tmp_path / "run", first, max_steps=4)
    trainer.train()
    assert [c["step"] for c in first.checks] == [2, 4]
    stored = json.loads((tmp_path / "run" / "checkpoint-2" / "trainer_state.json").read_text())["stateful_callbacks"]
    assert stored["ForgettingMonitor"]["attributes"]["baseline"] == first.baseline
    for restore in (False, True):  # the user's instance kept (the default), or rebuilt from its saved state
        again = monitor()
        resumed = make_trainer("hf", base, tmp_path / "run", again, max_steps=6,
                           restore_callback_states_from_checkpoint=restore)
        resumed.train(resume_from_checkpoint=str(tmp_path / "run" / "checkpoint-2"))
        live = next(c for c in resumed.callback_handler.callbacks if isinstance(c, ForgettingMonitor))
        assert live.baseline == first.baseline  # not re-measured on the trained weights
        assert [c["step"] for c in live.checks] == [2, 4, 6]
        # the share went on from checkpoint-2's 0.1, not from 0 (a rebuilt monitor finds the mixed-in replay)
        assert [c["eval_forget_replay_share"] for c in live.checks] == pytest.approx([0.1, 0.2, 0.3])
        assert live.replay is again.replay and again.replay.share == pytest.approx(0.3)
        assert [e["step"] for e in resumed.state.log_history if "eval_forget_mean" in e][-2:] == [4, 6]


def test_a_replay_draws_the_examples_forecast_most_forgotten_in_every_loader_worker(mapped, tmp_path):
    """The data-side replay over a tokenized training set, read by two persistent DataLoader workers: at share 0 the
    task's rows, each once; once the monitor's forecast and share are set in the main process, the same workers
    replay the example forecast most forgotten (never a probe) at the replayed positions, encoded as forgetmap
    scores it."""
    import torch

    from forgetmap.data.chat import encode_examples
    from forgetmap.errors import DataError
    from forgetmap.monitor import ForecastMap, ForecastReplay, ForgettingMonitor

    base, _, upstream, map_path = mapped
    forecast_map = ForecastMap.read(map_path)
    trainer = make_trainer("hf", base, tmp_path / "run")
    task_rows = sorted(map(tuple, trainer.train_dataset["input_ids"]))
    excluded = next(e for i, e in enumerate(forecast_map.example_ids) if e.startswith("lm-") and i not in forecast_map.known)
    replay = ForecastReplay(upstream, step=0.5, max_share=0.9, exclude=[excluded])
    replay.wrap(trainer, forecast_map)
    loader = torch.utils.data.DataLoader(trainer.train_dataset, batch_size=None, num_workers=2, persistent_workers=True)
    first = list(loader)
    assert len(trainer.train_dataset) == 40 and sorted(tuple(r["input_ids"]) for r in first) == task_rows
    assert replay.drawn() == {} and set(first[0]) == {"input_ids", "attention_mask"}
    row = np.full(len(forecast_map.example_ids), -1.0)
    target = next(i for i, e in enumerate(forecast_map.example_ids) if e.startswith("chat-") and i not in forecast_map.known)
    # a probe and an excluded example forecast highest are still never replayed
    row[target], row[forecast_map.known[0]] = 5.0, 50.0
    row[list(forecast_map.example_ids).index(excluded)] = 40.0
    replay.follow(row)
    assert replay.raise_share() and replay.raise_share() and not replay.raise_share() and replay.share == 0.9
    second = list(loader)
    tokenizer = trainer.processing_class
    upstream_rows = pd.concat([pd.read_parquet(f) for f in sorted(upstream.glob("*.parquet"))]).set_index("example_id")
    expected = encode_examples(tokenizer, upstream_rows.loc[[forecast_map.example_ids[target]]].reset_index(), "auto",
                               MAX_LENGTH)[0].ids.tolist()
    replayed = [r for r in second if r["input_ids"] == expected]
    coins = np.random.default_rng([0, 0, 1]).random(40)  # the epoch's replayed positions (trainer seed 0, epoch 0)
    assert len(replayed) == int((coins < 0.9).sum()) and len(second) == 40
    assert replay.drawn() == {forecast_map.example_ids[target]: len(replayed)}
    assert all(r["attention_mask"] == [1] * len(expected) for r in replayed)
    task_kept = sorted(tuple(r["input_ids"]) for r in second if r["input_ids"] != expected)
    assert set(task_kept) <= set(task_rows) and len(task_kept) == 40 - len(replayed)
    with pytest.raises(ValueError, match="a replay draws the examples the forecast says"):
        ForgettingMonitor(probes=upstream_rows.reset_index().head(3), replay=replay)
    with pytest.raises(DataError, match="of the map's 99 examples are not among"):
        ForecastReplay(upstream_rows.reset_index().head(50)).wrap(make_trainer("hf", base, tmp_path / "b"), forecast_map)


@pytest.fixture(scope="module")
def replayed(mapped, tmp_path_factory):
    """A packed TRL SFTTrainer run with a replay, over the budget at every check: (trainer, monitor, replay, run)."""
    pytest.importorskip("trl")
    import warnings

    from forgetmap.monitor import ForecastReplay, ForgettingMonitor

    base, _, upstream, map_path = mapped
    run = tmp_path_factory.mktemp("replayed") / "run"
    replay = ForecastReplay(upstream, step=0.25, max_share=0.5)
    monitor = ForgettingMonitor(str(map_path), budget=-10.0, level=0.8, replay=replay)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "`gradient_checkpointing` is deprecated", FutureWarning)  # TRL's SFTConfig
        trainer = make_trainer("trl", base, run, monitor, max_steps=10, packing=True)
        trainer.train()
    return trainer, monitor, replay, run


def test_a_packed_sft_run_raises_its_replay_at_each_check_over_the_budget_then_stops(mapped, replayed):
    """TRL packs the training set before training; the replay mixes in packed rows of its own. Over the budget at
    every check, the replayed share rises to its ceiling, and the next check stops training."""
    from forgetmap.monitor import ForecastMap

    trainer, monitor, replay, run = replayed
    forecast_map = ForecastMap.read(mapped[3])
    assert trainer.state.global_step == 6  # raised at 2 and 4, at its ceiling at 6: stop
    logged = [e for e in trainer.state.log_history if "eval_forget_replay_share" in e]
    assert [(e["step"], e["eval_forget_replay_share"]) for e in logged] == [(2, 0.25), (4, 0.5), (6, 0.5)]
    stored = json.loads((run / "checkpoint-6" / "trainer_state.json").read_text())["stateful_callbacks"]
    assert stored["ForgettingMonitor"]["attributes"]["replay_share"] == 0.5
    drawn = replay.drawn()
    assert drawn and not set(drawn) & set(forecast_map.probe_ids)
    # most draws followed the check at step 4
    at_four = pd.read_parquet(run / "forgetmap-monitor" / "check-00000004.parquet")["forecast"].to_numpy()
    position = {e: i for i, e in enumerate(forecast_map.example_ids)}
    drawn_mean = float(np.average([at_four[position[e]] for e in drawn], weights=[drawn[e] for e in drawn]))
    assert drawn_mean > float(np.mean(np.delete(at_four, forecast_map.known)))  # the draw leans to the most forgotten
    replay.share = 0.9
    rows = list(trainer.train_dataset)
    ours = [r for r in rows if -100 in r["labels"]]  # TRL's own text rows carry every label
    assert ours and all(set(r) == {"input_ids", "labels", "seq_lengths"} for r in rows)
    for r in ours:
        assert sum(r["seq_lengths"]) == len(r["input_ids"]) <= MAX_LENGTH and len(r["labels"]) == len(r["input_ids"])
    assert max(len(r["seq_lengths"]) for r in ours) > 1  # packed: several replayed examples to a row


def test_the_explorer_opens_a_runs_checks_as_a_timeline(mapped, replayed, tmp_path):
    """`forgetmap explorer --checks`: the run's scalars per check, the examples forecast most forgotten with their
    forecast at every check and their texts, the probes marked; headless Chromium draws it without an error."""
    import subprocess
    import sys

    from selenium.webdriver.common.by import By

    from browser import chromium, console_errors, remote_requests, wait_ready

    _, monitor, _, run = replayed
    upstream = mapped[2]
    page = tmp_path / "run.html"
    done = subprocess.run([sys.executable, "-m", "forgetmap", "explorer", "--checks", str(run / "forgetmap-monitor"),
                           "--shards", *map(str, sorted(upstream.glob("shard-*.parquet"))), "--out", str(page)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    data = page_data(page)
    both = subprocess.run([sys.executable, "-m", "forgetmap", "explorer", "--checks", str(run / "forgetmap-monitor"),
                           "--matrix", "forgetting.parquet", "--out", str(tmp_path / "no.html")],
                          capture_output=True, text=True, timeout=300)
    assert both.returncode != 0 and "give one" in both.stderr and "Traceback" not in both.stderr
    assert not (tmp_path / "no.html").exists()
    timeline = data["timeline"]
    assert data["mode"] == "run" and timeline["steps"] == [2, 4, 6] and data["budget"] == -10.0
    assert timeline["replay_share"] == [0.25, 0.5, 0.5]
    assert timeline["mean"] == pytest.approx([c["eval_forget_mean"] for c in monitor.checks], abs=1e-4)
    last = pd.read_parquet(run / "forgetmap-monitor" / "check-00000006.parquet").set_index("example_id")
    top = data["top"][0]
    assert top == last[~last["probe"]]["forecast"].idxmax()
    assert data["examples"][top]["forecast"][-1] == pytest.approx(float(last.loc[top, "forecast"]), abs=1e-4)
    kinds = {data["examples"][e]["kind"] for e in data["examples"]}
    assert kinds == {"lm", "chat"} and all("text" in ex or "response" in ex for ex in data["examples"].values())
    assert sorted(data["probes"]) == sorted(last.index[last["probe"]]) and all(
        data["examples"][p]["probe"] for p in data["probes"])
    driver = chromium()
    try:
        driver.get(page.as_uri())
        wait_ready(driver)
        rows = driver.find_elements(By.CSS_SELECTOR, "#run-checks tbody tr")
        assert [r.find_element(By.TAG_NAME, "td").text for r in rows] == ["2", "4", "6"]
        assert top in driver.find_element(By.ID, "example-title").text
        assert len(driver.find_elements(By.CSS_SELECTOR, "#example-checks tbody tr")) == 3
        assert console_errors(driver) == [] and remote_requests(driver) == []
    finally:
        driver.quit()


def test_the_monitor_refuses_a_map_of_another_model_before_training(mapped, tmp_path, caplog):
    from forgetmap.errors import DataError
    from forgetmap.monitor import ForecastMap, ForgettingMonitor

    base, matrix_path, upstream, map_path = mapped
    # another architecture and tokenizer
    other = save_standin(tmp_path / "llama", "llama", seed=3)
    with pytest.raises(DataError, match="another model: architecture: the map's 'olmo2', this run's 'llama'"):
        make_trainer("hf", other, tmp_path / "a", ForgettingMonitor(str(map_path))).train()
    # the same tokenizer, a larger vocabulary
    wider = save_standin(tmp_path / "wide", "olmo2", TULU_TEMPLATE, seed=3, model_vocab=512)
    with pytest.raises(DataError, match=r"vocabulary \(config.vocab_size\): the map's 400, this run's 512"):
        make_trainer("hf", wider, tmp_path / "b", ForgettingMonitor(str(map_path))).train()
    # a map that records nothing of its model: another base model shows in the probes' NLL
    anonymous = ForecastMap.from_matrix(matrix_path, upstream, k=8, max_length=MAX_LENGTH)
    import torch
    from transformers import AutoModelForCausalLM

    other_base = AutoModelForCausalLM.from_pretrained(base)  # the same architecture and tokenizer, other weights
    with torch.no_grad():
        other_base.get_output_embeddings().weight.mul_(4.0)
    __import__("shutil").copytree(base, tmp_path / "other")  # its tokenizer, then the weights replaced
    other_base.save_pretrained(tmp_path / "other")
    with pytest.raises(DataError, match="nats per token .median. away from the map's base NLL"):
        make_trainer("hf", tmp_path / "other", tmp_path / "c", ForgettingMonitor(anonymous)).train()
    assert not (tmp_path / "c" / "checkpoint-2").exists()  # refused before a step
    # a sibling (the same architecture and tokenizer, trained from other weights: 0.02 nats per token away at the
    # median, within the 0.05 tolerance once used) and a descendant (the base trained a few steps further) are
    # refused; a bf16 run of the base itself is not (test_an_sft_trainer_logs_forecasts_...: TRL's bf16 default)
    sibling = save_standin(tmp_path / "sibling", "olmo2", TULU_TEMPLATE, seed=5, width=32)
    with pytest.raises(DataError, match=r"0\.0[23]\d nats per token .median. away .*a sibling trained from other weights"):
        make_trainer("hf", sibling, tmp_path / "d", ForgettingMonitor(str(map_path))).train()
    parent = make_trainer("hf", base, tmp_path / "e", max_steps=2)
    parent.train()
    parent.save_model(str(tmp_path / "descendant"))
    with pytest.raises(DataError, match="away from the map's base NLL"):
        make_trainer("hf", tmp_path / "descendant", tmp_path / "f", ForgettingMonitor(str(map_path))).train()
    # asked for on purpose: monitored, and the log says the forecast is through another model's map
    import logging

    with caplog.at_level(logging.WARNING, logger="forgetmap"):
        make_trainer("hf", sibling, tmp_path / "g", ForgettingMonitor(str(map_path), base_tolerance=None),
                     max_steps=2).train()
    assert "the forecast is through another model's map" in caplog.text
    with pytest.raises(DataError, match=r"probe example\(s\) lm-5, nowhere are not usable examples"):
        ForecastMap.from_matrix(matrix_path, upstream, probe_ids=["lm-1", "lm-5", "nowhere"])
    with pytest.raises(ValueError, match="a budget acts on the forecast's upper bound, and a forecast needs a map"):
        ForgettingMonitor(probes=pd.read_parquet(upstream / "shard-0.parquet").head(5), budget=0.5)
    with pytest.raises(ValueError, match="level 0.95 is not one of the map's interval levels"):
        ForgettingMonitor(str(map_path), level=0.95)
    with pytest.raises(DataError, match="not a forecast map"):
        ForgettingMonitor(str(matrix_path))
    # a map cut short (a copy that stopped half way), one whose record lost a key, one whose rows are damaged
    whole = map_path.read_bytes()
    (tmp_path / "cut.parquet").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(DataError, match=r"cut.parquet: not a readable forecast map .* truncated or damaged"):
        ForgettingMonitor(str(tmp_path / "cut.parquet"))
    import pyarrow.parquet as pq

    table = pq.read_table(map_path)
    record = json.loads(table.schema.metadata[b"forgetmap"])
    del record["scoring"]
    pq.write_table(table.replace_schema_metadata({b"forgetmap": json.dumps(record).encode()}), tmp_path / "lost.parquet")
    with pytest.raises(DataError, match="lost.parquet: the forecast map's record lacks scoring"):
        ForecastMap.read(tmp_path / "lost.parquet")
    damaged = bytearray(whole)
    damaged[8:4096] = bytes(4088)  # the first row group's pages zeroed, the footer intact
    (tmp_path / "damaged.parquet").write_bytes(bytes(damaged))
    with pytest.raises(DataError, match="damaged.parquet: the forecast map's rows cannot be read"):
        ForecastMap.read(tmp_path / "damaged.parquet")


def test_a_map_of_an_imported_released_matrix_monitors_a_trainer(mapped, tmp_path, caplog):
    """Jin & Ren's released files (Z as .npy with its .meta, the base's log-probs) imported, with the upstream
    texts they were scored on, make a map the monitor forecasts from inside a `Trainer`: each check forecasts
    the 39 examples measured under every task (the released NaN column left out). With the released base
    log-probs (another model's than this stand-in) the run is refused before a step as another base model's;
    imported without them the map records no base NLL, and the run is monitored, its log saying that the base
    was not checked."""
    import logging

    from forgetmap.errors import DataError
    from forgetmap.monitor import ForecastMap, ForgettingMonitor
    from forgetmap.released import import_matrix

    base = mapped[0]
    stats = tmp_path / "stats"
    n = released_fixture(stats)["z"].shape[1]
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    pd.DataFrame({"example_id": [f"dolma-{j:06d}" for j in range(n)], "source": "web", "kind": "lm",
                  "text": sentences(n, seed=5), "prompt": None, "response": None}).to_parquet(upstream / "shard-0.parquet")
    released = stats / "ftd-ppl-inc-full.npy"
    with_base = import_matrix(released, base_logprobs=stats / "olmo_base_ppl.npy", corpus="dolma")
    of_another = ForecastMap.from_matrix(with_base, upstream, k=8, max_length=MAX_LENGTH)
    with pytest.raises(DataError, match="away from the map's base NLL"):
        make_trainer("hf", base, tmp_path / "a", ForgettingMonitor(of_another)).train()
    assert not (tmp_path / "a" / "checkpoint-2").exists()

    forecast_map = ForecastMap.from_matrix(import_matrix(released, corpus="dolma"), upstream, k=8, max_length=MAX_LENGTH,
                                           audit=0)  # no audit examples: the map's own interval alone
    assert len(forecast_map.example_ids) == n - 1 and "dolma-000007" not in set(forecast_map.example_ids)
    assert np.isnan(forecast_map.base_nll).all()
    trainer = make_trainer("hf", base, tmp_path / "b", ForgettingMonitor(forecast_map), max_steps=4)
    with caplog.at_level(logging.INFO, logger="forgetmap"):
        trainer.train()
    assert "records no base NLL at its probes" in caplog.text
    checks = sorted((tmp_path / "b" / "forgetmap-monitor").glob("check-*.parquet"))
    assert [int(c.stem.split("-")[1]) for c in checks] == [2, 4]
    last = pd.read_parquet(checks[-1])
    assert len(last) == n - 1 and np.isfinite(last["forecast"]).all() and last["probe"].sum() == 8
    means = [e["eval_forget_mean"] for e in trainer.state.log_history if "eval_forget_mean" in e]
    assert len(means) == 2 and all(math.isfinite(m) for m in means)
    # the run's page: five fit tasks give no interval at 0.9 (its upper bound is infinite), no base NLL is known
    from forgetmap.explorer import explorer_command

    explorer_command(str(tmp_path / "run.html"), checks=str(tmp_path / "b" / "forgetmap-monitor"))
    data = page_data(tmp_path / "run.html")
    assert data["timeline"]["steps"] == [2, 4] and data["timeline"]["upper"] == [None, None]
    assert data["timeline"]["mean"] == pytest.approx(means, abs=1e-4)
    assert all(e["base_nll"] is None for e in data["examples"].values())


def test_two_data_parallel_ranks_each_score_a_share_and_hold_every_probe(mapped, tmp_path):
    """torchrun, two gloo ranks: each scores half the probes; the gathered baseline is the one-process one."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from forgetmap.monitor import ForecastMap, ProbeMeter

    base, _, _, map_path = mapped
    _torchrun("monitor_run.py", str(base), str(map_path), str(tmp_path))
    held = json.loads((tmp_path / "monitor.json").read_text())
    # rank 0 scored the plan's first, third, ... length batch, and no batch twice: DDP's forward runs no collective
    assert held["world"] == 2 and held["wrapped"] == "DistributedDataParallel" and held["kind"] == "local"
    assert 0 < len(held["share"]) < len(held["baseline"]) and held["repeats"] == 0
    forecast_map = ForecastMap.read(map_path)
    alone = ProbeMeter.for_rows(AutoModelForCausalLM.from_pretrained(base), AutoTokenizer.from_pretrained(base),
                                forecast_map.measured_rows(), "auto", MAX_LENGTH).measure()
    np.testing.assert_allclose(held["baseline"], alone, atol=1e-5)
    assert [c["step"] for c in held["checks"]] == [2]
    assert sorted((tmp_path / "forgetmap-monitor").glob("check-*.parquet")) == \
        [tmp_path / "forgetmap-monitor" / "check-00000002.parquet"]


def test_a_monitored_fine_tune_checks_every_n_steps_at_each_share_and_at_its_end():
    from forgetmap.monitor.trajectory import check_steps

    assert check_steps({"every": 5, "at": [0.25]}, 50) == [5, 10, 12, 15, 20, 25, 30, 35, 40, 45, 50]
    assert check_steps({"every": None, "at": [0.1, 0.5]}, 7) == [1, 4, 7]
    assert check_steps({"every": 4, "at": []}, 10) == [4, 8, 10]


def test_a_trajectory_scores_each_check_against_the_measured_final_row_beside_the_naive_monitor(mapped, tmp_path):
    """A `check` task's monitored fine-tune (its probes' NLL after steps 2 and 4 of 4, written as a fine-tune
    writes them): each check completed as the forecast job completes a row, and scored against the task's
    measured row over the examples that are not probes."""
    import pyarrow as pa

    from forgetmap.io import write_table
    from forgetmap.matrix import ForgettingMatrix
    from forgetmap.monitor.trajectory import trajectory_command
    from forgetmap.predict.audit import audit_draw
    from forgetmap.predict.bound import mean_bound
    from forgetmap.predict.forecast import PROBE_RECORD, choose, complete, fit_rows

    _, matrix_path, _, _ = mapped
    matrix = ForgettingMatrix.read(matrix_path)
    fit = [f"task{t}" for t in range(TASKS - 1)]
    train, usable = fit_rows(matrix, fit, "m")
    known = choose(train, 8, "dopt", 0, "m")
    audit, _ = audit_draw(train, known, 12, 0)  # recorded without its strata, as a file from before them: read as uniform
    index, both = usable[known], usable[np.concatenate([known, audit])]
    write_table(pa.table({"example_id": matrix.example_ids[both]}), tmp_path / "probes.parquet",
                {"indices": index.tolist(), "usable": len(usable), "audit": usable[audit].tolist()})
    truth = matrix.row("task5")[both].astype(np.float64)
    base = matrix.base_nll[both].astype(np.float64)
    checkpoint = tmp_path / "checkpoint"
    write_table(pa.table({"example_id": matrix.example_ids[both], "step_0": base, "step_2": base + truth / 2,
                          "step_4": base + truth}), checkpoint / PROBE_RECORD, {"steps": [0, 2, 4], "total": 4})
    settings = {"tasks": ["task5"], "fit_tasks": fit, "method": "mf", "params": {}, "intervals": [0.8],
                "threshold": 0.0, "top_q": 0.1, "budget": 5}
    trajectory_command(settings, str(matrix_path), str(tmp_path / "probes.parquet"), [str(checkpoint)],
                       str(tmp_path / "trajectory.tsv"), str(tmp_path / "trajectory.png"))
    table = pd.read_csv(tmp_path / "trajectory.tsv", sep="\t")
    assert table["step"].tolist() == [2, 4] and table["fraction"].tolist() == [0.5, 1.0]
    final, _ = complete(train, known, truth[None, :8].astype(np.float32), "mf", {}, [0.9])
    assert table["forecast_mean"].iloc[-1] == pytest.approx(float(final.mean()), abs=1e-6)
    assert table["probe_mean"].tolist() == pytest.approx([truth[:8].mean() / 2, truth[:8].mean()], abs=1e-6)
    # each check's mean bounded by its own 12 audit examples (predict.bound), as the trainer callback bounds it
    ends = studentized_ends(train, known, make_method("mf").fit(train), "mf", {}, audit, None, [0.8])[0.8]
    for c, share in enumerate((0.5, 1.0)):
        row = complete(train, known, share * truth[None, :8].astype(np.float32), "mf", {}, [])[0][0]
        bound = mean_bound(row, known, share * truth[:8], audit, share * truth[8:], 0.8, ends=ends)
        assert table.loc[c, ["estimate", "estimate_lower_0.8", "estimate_upper_0.8"]].tolist() \
            == pytest.approx([bound.estimate, bound.lower, bound.upper], rel=1e-5, abs=1e-6)
    measured = float(matrix.row("task5")[usable].mean())  # the last check's weights are the measured row's
    assert table["estimate_covered_0.8"].iloc[-1] == \
        (table["estimate_lower_0.8"].iloc[-1] <= measured <= table["estimate_upper_0.8"].iloc[-1])
    assert np.isnan(table["estimate_covered_0.8"].iloc[0])
    # the low-rank rows: the completed row beats the probes' mean on every example, and halfway is worse
    assert (table["rmse"] < table["naive_rmse"]).all() and table["rmse"].iloc[-1] < table["rmse"].iloc[0]
    assert {"top_q_f1", "coverage_0.8", "mean_error", "naive_mean_error", "forecast_upper_0.8",
            "mean_covered_0.8"} <= set(table)
    assert np.isfinite(table["forecast_upper_0.8"]).all()  # 5 fit tasks hold the mean's 0.8 interval (0.9 needs 9)
    assert (tmp_path / "trajectory.png").stat().st_size > 10_000


@pytest.mark.parametrize("how", ["fsdp2", "fsdp1"])
def test_sharded_ranks_score_their_batches_in_step_and_hold_every_probe(mapped, tmp_path, how):
    """FSDP over two gloo ranks (fully_shard, or the FullyShardedDataParallel wrapper): each rank scores the length
    batches dealt to it and runs as many forwards as the other (an odd number: rank 1 repeats one; one batch: rank 1,
    dealt none, repeats it), so an uneven deal does not leave a rank in an all-gather; every rank holds every probe's
    value, equal to one unsharded process's to 1e-5 before and after a training step, and the shards train on; a
    benchmark's items alike, options scored and answers generated in step (a generation whose rows end earlier on
    one rank runs on with the other, and both keep rank 0's answers); ranks given other probes are refused with an
    error naming what differs."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from forgetmap.monitor import ForecastMap, ProbeMeter
    from meter_run import train_step

    base, _, _, map_path = mapped
    rows = ForecastMap.read(map_path).probe_rows
    lengths = rows["text"].fillna(rows["prompt"] + rows["response"].fillna("")).str.len()
    files = []
    for name, part in (("seven", rows.drop(index=lengths.idxmax())), ("one", rows.iloc[:1])):
        part.to_parquet(tmp_path / f"{name}.parquet")
        files.append(str(tmp_path / f"{name}.parquet"))
    _torchrun("meter_run.py", str(base), str(tmp_path / "out.json"), how, *files)
    found = json.loads((tmp_path / "out.json").read_text())
    tokenizer = AutoTokenizer.from_pretrained(base)
    for path in files:
        held = found[path]
        assert held["kind"] == how
        assert held["ranks"][0][0] == held["ranks"][1][0]  # the same number of forwards on both ranks
        alone_model = AutoModelForCausalLM.from_pretrained(base)
        alone = ProbeMeter.for_rows(alone_model, tokenizer, pd.read_parquet(path), "auto", 64, token_budget=64)
        np.testing.assert_allclose(held["before"], alone.measure(), atol=1e-5)
        train_step(alone_model, tokenizer, sentences(4, seed=5))
        np.testing.assert_allclose(held["after"], alone.measure(), atol=1e-5)
    assert [found[path]["ranks"][1][1] for path in files] == [1, 1]  # rank 1 repeated a batch in each
    # a benchmark's items, options packed and answers generated, in step on both ranks and equal to one process's
    from forgetmap.generation import Sampling, generate_torch
    from forgetmap.meter import OptionMeter
    from meter_run import generated_items, option_items

    held = found["items"]
    assert held["packed"] and held["ranks"][0][0] == held["ranks"][1][0]  # as many forwards on both ranks
    alone_model = AutoModelForCausalLM.from_pretrained(base)
    free, generated = generated_items(tokenizer)
    items = option_items(tokenizer) + free
    alone = OptionMeter(alone_model, tokenizer, items, [f"item{i}" for i in range(len(items))], token_budget=48,
                        generated={5 + i: g for i, g in generated.items()})
    for step in ("before", "after"):
        if step == "after":  # the training step each rank took between them
            train_step(alone_model, tokenizer, sentences(4, seed=5))
        values = alone.measure()
        np.testing.assert_allclose(np.concatenate(held[step][:5]), np.concatenate(values[:5]), atol=1e-5)
        assert held[step][5:] == values[5:] and all(isinstance(v, str) for v in values[5:])
    # rank 1 stopped its rows at a space, yet ran on with rank 0 (no all-gather left waiting): both hold rank 0's
    contexts = [it.context for it in free]
    dot = generate_torch(alone_model, tokenizer, contexts, [12] * 3, Sampling(stop=(".",)), token_budget=48).texts
    space = generate_torch(alone_model, tokenizer, contexts, [12] * 3, Sampling(stop=(" ",)), token_budget=48).texts
    assert found["in_step"] == [dot, dot] and space != dot
    if how == "fsdp2":  # ranks given other probes are refused before any is scored, not left waiting
        rows.iloc[:2].to_parquet(tmp_path / "rank-1.parquet")
        rows.iloc[:3].to_parquet(tmp_path / "rank-0.parquet")
        with pytest.raises(AssertionError, match=r"the 2 ranks disagree on the probes .*rank 0: 3 probes .*rank 1: 2 probes"):
            _torchrun("meter_run.py", str(base), str(tmp_path / "x.json"), how, str(tmp_path / "rank-{rank}.parquet"),
                      timeout=120)


def _torchrun(script: str, *args: str, timeout: int = 300):
    """`script` under torchrun with two gloo ranks (tests/ and the package on the path); its exit checked."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    tests = Path(__file__).resolve().parents[1]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(
        [str(tests.parent / "workflow"), str(tests), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           str(tests / script), *args], env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return done


def test_an_sft_trainer_under_deepspeed_zero3_monitors_as_one_process_would(mapped, tmp_path):
    """TRL's SFTTrainer with DeepSpeed ZeRO-3 over two gloo ranks, every parameter partitioned: the monitor scores
    its probes through the partitioned model (the ranks' batches in step), and its baseline and every check's
    probe values equal one process's scoring of the same weights (the base; each checkpoint, gathered at save) to
    1e-5, while TRL's fused head trains on after each check."""
    pytest.importorskip("deepspeed")
    pytest.importorskip("trl")
    from pathlib import Path

    import pyarrow.parquet as pq
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from forgetmap.io import read_metadata
    from forgetmap.monitor import ForecastMap, ProbeMeter

    base, _, _, map_path = mapped
    _torchrun("monitor_run.py", str(base), str(map_path), str(tmp_path), "--parallel", "zero3", "--trainer", "trl",
              "--steps", "4", "--items")
    held = json.loads((tmp_path / "monitor.json").read_text())
    assert (held["wrapped"], held["kind"], held["world"]) == ("DeepSpeedEngine(zero3)", "zero3", 2)
    # a benchmark's items through the partitioned model too: every item at the baseline, 6 at each check (a
    # generated answer among them, decoded in step on both ranks), each decided as one process decides it on the
    # same weights
    from forgetmap.meter import OptionMeter
    from monitor_run import watched_items

    benchmark = watched_items(base).items

    def decided(directory, which=None):
        model = AutoModelForCausalLM.from_pretrained(directory)
        meter = OptionMeter.for_items(model, AutoTokenizer.from_pretrained(base), benchmark, which)
        return benchmark.decide(meter.measure(), which).tolist()

    assert held["item_baseline"] == decided(base)
    scored = pd.read_parquet(tmp_path / "forgetmap-monitor" / "items-00000004.parquet").query("scored")
    assert scored.index.tolist() == held["item_known"] and (scored["options"] == 0).any()
    assert scored["correct"].tolist() == decided(tmp_path / "checkpoint-4", np.array(held["item_known"]))
    rows = ForecastMap.read(map_path).measured_rows()

    def alone(directory):
        model = AutoModelForCausalLM.from_pretrained(directory)
        return ProbeMeter.for_rows(model, AutoTokenizer.from_pretrained(base), rows, "auto", MAX_LENGTH).measure()

    baseline = alone(base)
    np.testing.assert_allclose(held["baseline"], baseline, atol=1e-5)
    assert [c["step"] for c in held["checks"]] == [2, 4]
    for step in (2, 4):
        meta = read_metadata(Path(tmp_path) / "forgetmap-monitor" / f"check-{step:08d}.parquet")
        np.testing.assert_allclose(meta["probe_values"] + meta["audit_values"],
                                   alone(tmp_path / f"checkpoint-{step}") - baseline, atol=1e-5)
    assert abs(held["checks"][-1]["eval_forget_probe_mean"]) > 1e-3  # the probes moved
    assert pq.read_table(tmp_path / "forgetmap-monitor" / "check-00000004.parquet").num_rows == len(
        ForecastMap.read(map_path).example_ids)


def test_a_zero3_trainer_stops_at_a_budget_and_its_resume_keeps_the_baseline(mapped, tmp_path):
    """transformers' Trainer under ZeRO-3 (two gloo ranks): over the budget at two checks in a row, it saves and
    stops at step 4; resumed from checkpoint-2, the monitor's baseline and first check come back from the
    checkpoint, never re-measured on trained weights."""
    pytest.importorskip("deepspeed")
    base, _, _, map_path = mapped
    _torchrun("monitor_run.py", str(base), str(map_path), str(tmp_path), "--parallel", "zero3", "--steps", "10",
              "--budget", "-10", "--patience", "2")
    stopped = json.loads((tmp_path / "monitor.json").read_text())
    assert stopped["global_step"] == 4 and [c["step"] for c in stopped["checks"]] == [2, 4]
    assert (tmp_path / "checkpoint-4").is_dir()
    _torchrun("monitor_run.py", str(base), str(map_path), str(tmp_path), "--parallel", "zero3", "--steps", "4",
              "--resume", str(tmp_path / "checkpoint-2"))
    resumed = json.loads((tmp_path / "monitor.json").read_text())
    assert resumed["baseline"] == stopped["baseline"]
    assert [c["step"] for c in resumed["checks"]] == [2, 4] and resumed["checks"][0] == stopped["checks"][0]
    assert resumed["global_step"] == 4  # no budget this time: it trained to its last step


def test_a_check_written_before_the_headline_was_the_estimate_reads_under_todays_names():
    from forgetmap.monitor.timeline import current_scalars

    old = {"mean": -0.12, "estimate": -0.10, "lower": -0.13, "upper": -0.07, "forgotten": 0.2, "over_budget": 0.05,
           "over_budget_upper": 0.04, "probe_mean": -0.2, "audit_mean": -0.09}
    now = current_scalars(old)
    assert now["mean"] == -0.10 and now["forecast_mean"] == -0.12 and now["lower"] <= now["mean"] <= now["upper"]
    assert now["forecast_forgotten"] == 0.2 and now["forecast_over_budget"] == 0.05 and "over_budget" not in now
    assert "estimate" not in now and "forgotten" not in now and now["probe_mean"] == -0.2
    # a map without audit examples: the forecast's mean was the estimate, its share the only one
    assert current_scalars({"mean": -0.1, "upper": 0.0, "over_budget": 0.3}) == {
        "mean": -0.1, "forecast_mean": -0.1, "upper": 0.0, "over_budget": 0.3, "forecast_over_budget": 0.3}
    today = {"mean": -0.1, "forecast_mean": -0.12}
    assert current_scalars(today) == today

