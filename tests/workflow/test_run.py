"""Tiny end-to-end runs: the matrix, incremental rebuilds, determinism, failures under --keep-going."""

import json
import os
import re
import subprocess

import numpy as np
import pandas as pd
import pytest
import yaml

from forgetmap.io import read_metadata
from forgetmap.matrix import ForgettingMatrix
from forgetmap.plan import Plan
from helpers import (REPO, by_rule, clone_workdir, command, data_file, edited, library_warnings, make_workdir, page_data,
                     planned_jobs, snakemake, tiny_config, write_config)

pytestmark = pytest.mark.workflow
MATRIX = "results/tiny/forgetting.parquet"
# everything that depends on the matrix: it reruns whenever the matrix does
ANALYSES = {"forgetting_matrix": 1, "lowrank": 1, "lowrank_summary": 1, "cross_task": 1, "semantic_similarity": 1,
            "gradient_similarity": 1, "predict": 18, "prediction_scores": 1, "mitigation_summary": 1, "all": 1,
            "probe_evaluation": 2,  # probe strategies side by side, per split
            # the sample-wise correctness of the quiz items: transitions, Y's low rank, 6 predictors x 2 splits
            "transitions": 1, "lowrank_binary": 1, "predict_binary": 12, "binary_prediction_scores": 1,
            "explorer": 1}  # the explorer reads the matrix (and predictions, transitions, arms' scores)
# test config: arms random, predicted, stm and online on mod10_add. A changed matrix reruns the predicted
# arm (its selection, fine-tune, scores) and the online arm (it completes its row in the job)
PREDICTED_ARM = {"replay_selection": 1, "arm_run": 1}
MATRIX_ARMS = {"replay_selection": 1, "arm_run": 2}


@pytest.fixture(scope="module")
def finished(tiny_run):
    return tiny_run


def test_a_successful_run_prints_no_traceback_exception_or_warning(finished):
    output = (finished / "run.out").read_text()
    for word in ("Traceback", "Exception", "Warning", "warning"):
        assert word not in output, output[max(0, output.find(word) - 2000):output.find(word) + 500]
    # nor do its job logs, with the libraries installed today (a new release's deprecation fails CI)
    assert library_warnings(finished) == []


def test_every_output_is_as_readable_as_the_umask_lets_it_be(finished):
    """On a lab's shared cluster the group reads the results (the run inherits the test's umask)."""
    import os
    import stat

    from forgetmap.io import umask

    readable = 0o444 & ~umask()
    files = [p for p in (finished / "results").rglob("*") if p.is_file()]
    private = [str(p.relative_to(finished)) for p in files if stat.S_IMODE(os.stat(p).st_mode) & readable != readable]
    assert len(files) > 100 and private == [], private[:10]


def fresh_clone(finished, tmp_path):
    return clone_workdir(finished, tmp_path / "wf")


def jobs_of(jobs, rule):
    return sorted(tuple(sorted(w.items())) for r, w in jobs if r == rule)


def test_the_run_builds_the_matrix_with_logs_and_benchmarks(finished):
    m = ForgettingMatrix.read(finished / MATRIX)
    assert m.tasks == ["city_qa", "mod10_add", "hex_copy"] and m.shape == (3, 140)
    assert m.categories == {"city_qa": "world", "mod10_add": "world", "hex_copy": "other"}
    assert m.groups == {"other": "out_of_domain", "world": "in_domain"}
    assert np.isfinite(m.values).all() and np.isfinite(m.base_nll).all() and (m.values != 0).any()
    scores = pd.read_parquet(finished / "results/tiny/scores/mod10_add/shard-1.parquet")
    assert list(scores.columns) == ["example_id", "nll", "n_tokens", "n_bytes", "predicted", "correct", "margin", "k"]
    np.testing.assert_array_equal(m.row("mod10_add")[70:], scores["nll"].to_numpy() - m.base_nll[70:])
    log = [json.loads(line) for line in (finished / "results/tiny/base/pretrain_log.jsonl").read_text().splitlines()]
    curve = [r["upstream_nll"] for r in log if "upstream_nll" in r]
    assert len(curve) == 3 and curve[-1] < curve[0]
    assert len((finished / "results/tiny/checkpoints/city_qa/train_log.jsonl").read_text().splitlines()) == 4
    for rule in ("base_model.tsv", "finetune/city_qa.tsv", "score/base/shard-0.tsv", "forgetting_matrix.tsv"):
        assert (finished / "results/benchmarks/tiny" / rule).exists()
    assert (finished / "results/logs/tiny/finetune/city_qa.log").exists()
    gradient_log = (finished / "results/logs/tiny/gradient_similarity.log").read_text()
    assert re.search(r"task gradient means: 3 of 3 tasks \(hex_copy, \d+ examples\), [\d.]+ s each, about 0.0 min "
                     r"left", gradient_log), gradient_log  # the log says how far the job has come
    assert planned_jobs(finished) == []  # nothing left to do


def test_the_run_analyses_the_matrix_and_the_report_collects_it(finished):
    r2 = pd.read_csv(finished / "results/tiny/lowrank/r2.tsv", sep="\t")
    assert r2["rank"].tolist() == [1, 2, 3] and r2["r2"].iloc[-1] == pytest.approx(1.0, abs=1e-6)
    summary = pd.read_csv(finished / "results/lowrank_summary/tiny.tsv", sep="\t")
    assert summary["model"].tolist() == ["tiny"] and summary["rank_1"][0] == pytest.approx(r2["r2"][0], abs=1e-4)
    for name in ("semantic", "gradient"):
        table = pd.read_csv(finished / f"results/tiny/correlations/{name}.tsv", sep="\t")
        assert table["scope"].tolist() == ["all", "city_qa", "mod10_add", "hex_copy"]
        assert table["n"][0] == 420 and table["pearson"].between(-1, 1).all()
    pairs = pd.read_csv(finished / "results/tiny/correlations/cross_task.tsv", sep="\t")
    assert len(pairs) == 3
    scores = pd.read_csv(finished / "results/tiny/prediction/scores.tsv", sep="\t")
    assert list(scores.columns) == ["split", "method", "metric", "mean", "std", "n_seeds"]
    assert set(scores["split"]) == {"id", "ood"} and set(scores["method"]) == {
        "mean", "additive", "knn", "mf", "logistic_mf", "implicit_als", "semantic", "all_forgotten", "random"}
    assert (scores.query("metric == 'roc_auc'")["n_seeds"] == 2).all()
    predictions = pd.read_parquet(finished / "results/tiny/prediction/ood/mf/seed-1.parquet")
    assert list(predictions.columns) == ["example_id", "hex_copy"] and len(predictions) == 140
    # one train task: no conformal intervals (they leave one of at least 3 out), said in the log
    assert not list((finished / "results/tiny/prediction/ood/mf").glob("intervals-*"))
    assert "need at least 3" in (finished / "results/logs/tiny/predict/ood/mf.log").read_text()
    probes = pd.read_csv(finished / "results/tiny/prediction/probes/id.tsv", sep="\t")
    assert set(probes["strategy"]) == {"random", "dopt", "medoids"} and set(probes["k"]) == {5, 10, 20, 30, 50}
    assert set(probes["metric"]) == {"rmse", "top_q_f1", "precision_at_b"}
    assert probes.query("strategy == 'random'")["p_value"].isna().all()
    snakemake(finished, "--report", "results/report.html")
    html = (finished / "results/report.html").read_text(errors="replace")
    for item in ("Low-rank structure", "Correlations", "Forgetting prediction", "heatmap.png", "semantic.png",
                 "Forgetting less", "tradeoff.png", "per_token.png", "Sample-wise correctness", "transitions.png",
                 "fronts.png", "fronts.tsv", "costs.tsv", "predictors.tsv", "protection.tsv"):  # the arena's
        assert item in html


def test_the_run_scores_the_quiz_items_and_writes_their_transitions(finished):
    codes = ForgettingMatrix.read(finished / "results/tiny/correctness/transitions.parquet")
    y = ForgettingMatrix.read(finished / "results/tiny/correctness/forgetting_1to0.parquet")
    assert codes.statistic == "transition" and y.statistic == "forgotten_1to0"
    assert codes.tasks == ["city_qa", "mod10_add", "hex_copy"] and codes.shape == (3, 20)  # 140 / 7 quiz items
    assert set(np.unique(codes.values)) <= {0, 1, 2, 3}
    base = pd.concat([pd.read_parquet(finished / f"results/tiny/scores/base/shard-{k}.parquet") for k in (0, 1)])
    items = base.dropna(subset=["correct"])
    assert items["example_id"].tolist() == codes.example_ids.tolist() and items["k"].isin([0, 2, 3, 4, 5]).all()
    base_right = items["correct"].to_numpy() == 1
    np.testing.assert_array_equal(codes.values[0] >= 2, base_right)  # the code's high bit is the base's answer
    from forgetmap.monitor.items import ItemMap  # the monitor's map of these fine-tunes, with their option margins

    item_map = ItemMap.from_transitions(finished / "results/tiny/correctness/transitions.parquet",
                                        scores=finished / "results/tiny/scores")
    scored = pd.concat([pd.read_parquet(finished / f"results/tiny/scores/mod10_add/shard-{k}.parquet")
                        for k in (0, 1)]).set_index("example_id").loc[item_map.item_ids]
    np.testing.assert_array_equal(item_map.margins[1], scored["margin"].to_numpy(np.float32))
    assert np.isnan(item_map.margins[1][scored["k"].to_numpy() == 0]).all()  # a free-form item has none
    assert np.isfinite(item_map.margins[1][scored["k"].to_numpy() > 0]).all()
    assert np.isnan(y.values[:, ~base_right]).all() and np.isfinite(y.values[:, base_right]).all()
    rates = pd.read_csv(finished / "results/tiny/correctness/rates.tsv", sep="\t")
    tasks = rates[rates["level"] == "task"]
    np.testing.assert_allclose(tasks["acc_after"] - tasks["acc_before"], tasks["BT"] - tasks["F"], atol=1e-6)
    assert (tasks["F_true"] <= tasks["F"] + 1e-9).all() and set(rates["level"]) == {
        "task", "source", "category", "overall", "benchmark_category", "benchmark_overall", "type_overall"}
    assert set(rates["seed"]) == {"all"}  # options and greedy answers: one measurement, no sampling seeds
    ranks = pd.read_csv(finished / "results/tiny/correctness/lowrank.tsv", sep="\t")
    assert ranks["rank"].tolist()[0] == 0 and "deviance_explained" in ranks
    scores = pd.read_csv(finished / "results/tiny/correctness/prediction_scores.tsv", sep="\t")
    assert set(scores["method"]) == {"logistic_mf", "implicit_als", "column_frequency", "knn", "additive",
                                     "mf_thresholded"} and set(scores["split"]) == {"id", "ood"}
    per_seed = pd.read_csv(finished / "results/tiny/correctness/prediction/id/logistic_mf.tsv", sep="\t")
    # (the tiny base gets few items right: metrics undefined for lack of a 1 are NaN, left out of the scores)
    assert set(per_seed["metric"]) == {"auprc", "roc_auc", "best_f1", "f1_at_0.5", "precision_at_b", "positive_rate"}
    assert per_seed["seed"].tolist().count(0) == 6 and "positive_rate" in set(scores["metric"])


def test_adding_a_task_runs_only_its_finetune_its_shards_and_the_matrix(finished, tmp_path):
    workdir = fresh_clone(finished, tmp_path)
    write_config(workdir, edited(tiny_config(), lambda c: c["tasks"].update(json_profile={"category": "world", "n_examples": 24})))
    jobs = planned_jobs(workdir)
    assert by_rule(jobs) == {"prepare_task": 1, "finetune": 1, "score": 2, "split_definition": 2, **ANALYSES,
                             **MATRIX_ARMS}
    assert {w["task"] for r, w in jobs if r == "finetune"} == {"json_profile"}
    assert {w["run"] for r, w in jobs if r == "score"} == {"json_profile"}


def fractional(cells: float, *tasks: str) -> dict:
    """The tiny config as a fractional map (models.tiny.score.cells), with `tasks` added after its own."""
    def edit(c):
        c["models"]["tiny"]["score"]["cells"] = cells
        c["tasks"].update({t: {"category": "world", "n_examples": 24} for t in tasks})
    return edited(tiny_config(), edit)


def cell_logs(workdir) -> list[dict]:
    """Each fractional scoring job's summary (its log's last line), newest run's files."""
    return [json.loads(p.read_text().splitlines()[-1]) for p in sorted((workdir / "results/logs/tiny/score").rglob(
        "shard-*.cells-*.log"))]


def test_a_fractional_map_scores_only_new_cells_and_completes_the_rest_with_half_widths(finished, tmp_path):
    """A run made fractional (models.tiny.score.cells) scores each task's designed cells, items in full, and the base
    not again; raising the fraction scores only the cells it adds; adding a task scores only its own; the matrix
    holds the measured cells as measured, the rest completed with their half-widths, and each analysis says what it
    read."""
    workdir = fresh_clone(finished, tmp_path)
    full = ForgettingMatrix.read(workdir / MATRIX)
    for task in full.tasks:  # no full score file to read again: the cells are scored
        for path in (workdir / "results/tiny/scores" / task).glob("shard-*.parquet"):
            path.unlink()
    write_config(workdir, fractional(0.8))
    jobs = planned_jobs(workdir)
    assert by_rule(jobs)["score_cells"] == 6 and not {"score", "finetune", "base_model"} & set(by_rule(jobs))
    snakemake(workdir)
    logs = cell_logs(workdir)
    assert len(logs) == 6 and all(0 < log["cells_scored"] == log["cells"] < 70 for log in logs)
    matrix = ForgettingMatrix.read(workdir / MATRIX)
    measured = matrix.measured
    assert matrix.completed and measured.mean() == pytest.approx(sum(log["cells"] for log in logs) / 420)
    quiz = np.char.startswith(matrix.example_ids.astype(str), "quiz")
    assert measured[:, quiz].all()  # every item under every run: Y is never completed
    # a subset scored as the full run scored it; the rest completed, each with its row's half-width
    np.testing.assert_allclose(matrix.values[measured], full.values[measured], atol=2e-5)
    widths = matrix.halfwidths()
    assert (widths[~measured] > 0).all() and (widths[measured] == 0).all() and matrix.cells["level"] == 0.9
    r2 = pd.read_csv(workdir / "results/tiny/lowrank/r2.tsv", sep="\t")
    assert {"r2", "r2_row_shuffled", "r2_completed"} <= set(r2.columns)
    assert json.loads((workdir / "results/tiny/lowrank/summary.json").read_text())["reads"]["r2"] == "measured cells"
    assert set(pd.read_csv(workdir / "results/tiny/correlations/cross_task.tsv", sep="\t")["reads"]) == {"measured cells"}
    assert pd.read_csv(workdir / "results/lowrank_summary/tiny.tsv", sep="\t")["reads"][0].startswith("measured cells")
    metrics = pd.read_csv(workdir / "results/tiny/prediction/id/mf.tsv", sep="\t")
    assert 0.8 < metrics.query("metric == 'train_cells_measured'")["value"].iloc[0] < 1
    assert "completed (" in pd.read_csv(workdir / "results/tiny/mitigation/summary.tsv", sep="\t")["map"][0]
    assert "% of its cells measured" in (REPO / "workflow/forgetmap/assets/explorer.js").read_text()
    assert '"completed_halfwidth"' in (workdir / "results/tiny/explorer.html").read_text()
    # a larger fraction scores only the cells it adds, and reads the others again
    before = {log["cells"] for log in logs}
    write_config(workdir, fractional(0.9))
    snakemake(workdir)
    grown = [log for log in cell_logs(workdir) if log["cells"] not in before or log["cells_read_again"]]
    assert len(grown) == 6 and all(log["cells_read_again"] + log["cells_scored"] == log["cells"] for log in grown)
    assert sum(log["cells_read_again"] for log in grown) == sum(before_log["cells"] for before_log in logs)
    again = ForgettingMatrix.read(workdir / MATRIX)
    assert (again.measured >= measured).all() and again.measured.sum() > measured.sum()
    np.testing.assert_allclose(again.values[again.measured], full.values[again.measured], atol=2e-5)
    # a task added scores its own cells alone
    write_config(workdir, fractional(0.9, "json_profile"))
    jobs = planned_jobs(workdir)
    assert {w["run"] for r, w in jobs if r == "score_cells"} == {"json_profile"}
    assert {w["task"] for r, w in jobs if r == "finetune"} == {"json_profile"} and "score" not in by_rule(jobs)


def test_changing_one_tasks_hyperparameters_reruns_only_that_task(finished, tmp_path):
    workdir = fresh_clone(finished, tmp_path)
    write_config(workdir, edited(tiny_config(), lambda c: c["tasks"]["mod10_add"].update(finetune={"lr": 5e-4})))
    jobs = planned_jobs(workdir)
    # mod10_add is the arms' task: every arm is fine-tuned again with the new settings
    assert by_rule(jobs) == {"finetune": 1, "score": 2, **ANALYSES, "replay_selection": 1, "arm_run": 7,
                             "plain_scores": 1}
    assert {w["task"] for r, w in jobs if r == "finetune"} == {"mod10_add"}
    assert {w["run"] for r, w in jobs if r == "score"} == {"mod10_add"}


def test_adding_upstream_examples_adds_shards_and_reruns_no_finetune(finished, tmp_path):
    workdir = fresh_clone(finished, tmp_path)
    write_config(workdir, edited(tiny_config(), lambda c: c["upstream"]["demo"].update(n_examples=175)))
    jobs = planned_jobs(workdir)
    # the held-out set is drawn from the grown corpus: every arm's run (its fine-tune and its judging, one
    # job) anew, and the matrix's plain fine-tune judged anew
    assert by_rule(jobs) == {"shard_upstream": 1, "score": 4, **ANALYSES, "heldout_set": 1, "replay_selection": 4,
                             "arm_run": 7, "plain_scores": 1}
    assert {w["shard"] for r, w in jobs if r in ("score", "shard_upstream")} == {"2"}


def test_a_second_config_that_defines_the_corpus_and_tasks_otherwise_overwrites_nothing(finished, tmp_path):
    """The demo, then the SmolLM2 example in the same clone: the same corpus and task names, defined otherwise
    (fewer examples, another shard size). Each config's data files are its own; going back reruns nothing."""
    workdir = fresh_clone(finished, tmp_path)
    data = sorted((workdir / "results/data").rglob("*.parquet"))
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in data}

    def other_config(c):
        c["shard_size"], c["upstream"]["demo"]["n_examples"] = 35, 70
        for task in c["tasks"].values():
            task["n_examples"] = 16
        c["models"] = {"other": c["models"]["tiny"]}
        del c["mitigation"]

    other = edited(tiny_config(), other_config)
    write_config(workdir, other)
    targets = ("results/other/forgetting.parquet", "results/lowrank_summary/other.tsv")
    snakemake(workdir, *targets)
    assert {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in data} == before  # nothing of the first rewritten
    added = sorted(set((workdir / "results/data").rglob("*.parquet")) - set(data))
    assert len(added) == 2 + 3 and all(p.name.split(".")[0] in ("shard-0", "shard-1", *other["tasks"]) for p in added)
    assert [len(pd.read_parquet(p)) for p in added if p.name.startswith("shard-")] == [35, 35]
    summary = "results/lowrank_summary/tiny.tsv"
    assert (workdir / summary).read_bytes() == (finished / summary).read_bytes()
    write_config(workdir, tiny_config())
    assert planned_jobs(workdir) == []  # the first config again: nothing to do
    write_config(workdir, other)
    assert planned_jobs(workdir, *targets) == []


def test_discarded_checkpoints_and_a_second_run_give_the_same_matrix_bit_for_bit(finished, tmp_path):
    """Same config and seeds, fresh directory: an identical matrix; temp checkpoints are gone after scoring."""
    cfg = edited(tiny_config(), lambda c: c.update(keep_checkpoints=False))
    workdir = make_workdir(tmp_path / "wf", cfg)
    snakemake(workdir, MATRIX)  # the matrix alone: its base, fine-tunes and scores
    assert not (workdir / "results/tiny/checkpoints/city_qa").exists()
    a, b = ForgettingMatrix.read(finished / MATRIX), ForgettingMatrix.read(workdir / MATRIX)
    assert a.values.tobytes() == b.values.tobytes() and a.base_nll.tobytes() == b.base_nll.tobytes()

    # with checkpoints discarded, adding a task or changing one still reruns only that task's chain (the
    # matrix's; the arms are not part of this run)
    write_config(workdir, edited(cfg, lambda c: c["tasks"].update(json_profile={"category": "world", "n_examples": 24})))
    assert jobs_of(planned_jobs(workdir, MATRIX), "finetune") == [(("model", "tiny"), ("task", "json_profile"))]
    write_config(workdir, edited(cfg, lambda c: c["tasks"]["city_qa"].update(finetune={"steps": 2})))
    assert jobs_of(planned_jobs(workdir, MATRIX), "finetune") == [(("model", "tiny"), ("task", "city_qa"))]
    # new upstream shards need the fine-tuned weights: discarded checkpoints are trained again (and,
    # being new files, rescored); the base model is kept, so its scores only gain the new shard
    write_config(workdir, edited(cfg, lambda c: c["upstream"]["demo"].update(n_examples=175)))
    jobs = planned_jobs(workdir, MATRIX)
    assert by_rule(jobs)["finetune"] == 3 and "base_model" not in by_rule(jobs)
    assert {w["shard"] for r, w in jobs if r == "score" and w["run"] == "base"} == {"2"}


def test_a_failing_finetune_leaves_no_checkpoint_and_the_others_finish(finished, tmp_path):
    workdir = fresh_clone(finished, tmp_path)
    broken = {"category": "math", "n_examples": 24,
              "finetune": {"method": "lora", "lora": {"target_modules": ["no_such_module"]}}}
    write_config(workdir, edited(tiny_config(), lambda c: c["tasks"].update(
        add_qa=broken, json_profile={"category": "world", "n_examples": 24})))
    proc = snakemake(workdir, "--keep-going", check=False)
    assert proc.returncode != 0
    assert not (workdir / "results/tiny/checkpoints/add_qa").exists()
    assert not list((workdir / "results/tiny/checkpoints").glob(".add_qa*"))
    assert "no_such_module" in (workdir / "results/logs/tiny/finetune/add_qa.log").read_text()
    assert (workdir / "results/tiny/scores/json_profile/shard-1.parquet").exists()
    # the matrix is never built with a task missing: it still holds the last complete set
    assert ForgettingMatrix.read(workdir / MATRIX).tasks == ["city_qa", "mod10_add", "hex_copy"]


def test_the_arms_are_judged_on_heldout_examples_none_of_them_replayed(finished):
    heldout = set(pd.read_parquet(finished / "results/tiny/mitigation/heldout.parquet")["example_id"])
    assert len(heldout) == 20
    for arm in ("random", "predicted"):
        replayed = pd.read_parquet(finished / f"results/tiny/mitigation/{arm}/seed-0/replay/mod10_add.parquet")
        assert len(replayed) == 6 and not heldout & set(replayed["example_id"])  # int(22 x 0.25) + 1
        scores = pd.read_parquet(finished / f"results/tiny/mitigation/{arm}/seed-0/mod10_add.parquet")
        assert set(scores["example_id"]) == heldout
    variants = pd.read_csv(finished / "results/tiny/mitigation/summary.tsv", sep="\t")
    summary = variants[variants["alpha"] == 1].drop(columns="arm").rename(columns={"label": "arm"})
    assert summary["arm"].tolist() == ["none", "random", "predicted", "stm", "online", "anchored kl_base=0.1",
                                       "anchored kl_base=1", "frozen", "self_replay"]
    none = summary.set_index("arm").loc["none"]  # its own reduction: 0, or undefined where it forgot nothing
    assert none["reduction"] == 0 if none["heldout_forgetting"] > 0 else np.isnan(none["reduction"])
    assert summary.set_index("arm").loc["stm", "masked_share"] == pytest.approx(0.2, abs=0.01)
    # replay stretches the step budget by (1 + ratio): 4 steps -> 5
    assert (summary.set_index("arm").loc[["random", "predicted"], "tokens"] > summary.set_index("arm").loc["none", "tokens"]).all()
    # the held-out quiz items: 1->0 and 0->1 rates against the base, tested beside the mean delta NLL
    assert (summary["heldout_items"] > 0).all() and summary["heldout_F"].between(0, 1).all()
    tests = pd.read_csv(finished / "results/tiny/mitigation/tests.tsv", sep="\t")
    pairs = [("random", "none"), ("predicted", "none"), ("stm", "none"), ("online", "none"),
             ("anchored kl_base=0.1", "none"), ("anchored kl_base=1", "none"), ("frozen", "none"),
             ("self_replay", "none"), ("predicted", "random"), ("online", "random"), ("self_replay", "random")]
    for statistic in ("heldout_forgetting", "heldout_F"):
        chosen = tests[tests["statistic"] == statistic]
        assert list(zip(chosen["arm"], chosen["baseline"])) == pairs
    # online replay: random replay for the first tenth of the 5 steps, then its own draw, never held out
    online = json.loads((finished / "results/tiny/mitigation/online/seed-0/mod10_add.json").read_text())["online"]
    assert online["switch_step"] == 1 and online["replayed_online"] == 6 and online["online_seconds"] < 1
    assert not heldout & set(online["replayed_online_ids"]) and not heldout & set(online["probe_ids"])
    assert len(online["probe_ids"]) == 5 and online["probe_selection"] == "dopt"


def summary_labels(variants):
    return variants[variants["alpha"] == 1]["label"].tolist()


def costs_of(mitigation, arm):
    return pd.read_csv(mitigation / "costs.tsv", sep="\t").set_index("arm").loc[arm]


def test_the_arena_judges_every_fine_tune_and_interpolation_as_fronts_costs_and_signals(finished):
    mitigation = finished / "results/tiny/mitigation"
    variants = pd.read_csv(mitigation / "summary.tsv", sep="\t")
    # every fine-tune as trained and halfway to the base; the sweep's two fine-tunes came from one job
    assert sorted(variants["alpha"].unique()) == [0.5, 1.0] and len(variants) == 2 * 9
    assert not list((mitigation / "anchored").glob("seed-0/*.1.parquet"))
    swept = variants[variants["arm"] == "anchored"]
    assert set(swept["knob"]) == {"kl_base"} and sorted(swept["value"].unique()) == [0.1, 1.0]
    halfway = variants[variants["alpha"] == 0.5].set_index("label")["weight_distance"]
    trained = variants[variants["alpha"] == 1].set_index("label")["weight_distance"]
    np.testing.assert_allclose(halfway, trained / 2, rtol=1e-3)
    frozen = json.loads((mitigation / "frozen/seed-0/mod10_add.json").read_text())
    assert 0 < frozen["trained_parameters"] < frozen["parameters"] / 2  # one of the stand-in's blocks
    assert frozen["ema_base_weight"] == pytest.approx(0.9 ** frozen["steps"])
    assert 0 <= frozen["sdft_kept"] <= 1 and frozen["generated_tokens"] > 0  # the base rewrote the responses
    generated = json.loads((mitigation / "self_replay/seed-0/mod10_add.json").read_text())
    assert generated["replayed"] == 6 and 0 < generated["generated_tokens"] <= 6 * 12
    assert costs_of(mitigation, "self_replay")["generated_tokens"] == generated["generated_tokens"]
    fronts = pd.read_csv(mitigation / "fronts.tsv", sep="\t")
    assert len(fronts) == 18 and fronts["on_front"].any() and fronts.groupby("arm")["on_arm_front"].any().all()
    costs = pd.read_csv(mitigation / "costs.tsv", sep="\t").set_index("arm")
    assert costs.loc["none", "tokens_vs_none"] == 1.0
    kl = costs.loc["anchored kl_base=0.1"]  # the base's forward passes: twice the forward tokens of training
    assert kl["forward_tokens"] == pytest.approx(2 * kl["backward_tokens"])
    predictors = pd.read_csv(mitigation / "predictors.tsv", sep="\t")
    assert set(predictors["signal"]) == {"kl_base", "weight_distance", "loss_drop"}
    assert set(predictors["target"]) == {"heldout_forgetting", "heldout_F"}
    tests = pd.read_csv(mitigation / "tests.tsv", sep="\t")
    matched = tests[tests["statistic"] == "forgetting_at_matched_learning"]
    assert list(matched["arm"]) == ["random", "predicted", "stm", "online", "anchored", "frozen", "self_replay"]
    assert (matched["pairs"] == 1).all() and matched["reached"].between(0, 1).all()
    assert (mitigation / "fronts.png").stat().st_size > 10_000
    # what each fine-tune protected, against the held-out examples mod10_add was predicted to forget
    protection = pd.read_csv(mitigation / "protection.tsv", sep="\t")
    assert protection["arm"].tolist() == summary_labels(variants)[1:] and (protection["task"] == "mod10_add").all()
    assert (protection["examples"] == 20).all() and protection["spearman"].between(-1, 1).all()
    interpolated = tests[tests["statistic"] == "forgetting_vs_interpolation"]
    assert interpolated["arm"].tolist() == summary_labels(variants)[1:] and (interpolated["pairs"] == 1).all()


def test_the_arena_example_runs_every_arm_in_miniature(finished, tmp_path):
    """config/examples/arena.yaml's arms and interpolations on this run's tiny model and one task: every arm
    kind trains, every sweep value and α is judged, and the summary writes every table."""
    import yaml

    workdir = fresh_clone(finished, tmp_path)
    from forgetmap.mitigation.knobs import swept

    arena = yaml.safe_load((workdir / "config/examples/arena.yaml").read_text())["mitigation"]
    for spec in arena["arms"].values():  # the tiny model has 128 positions: short generations
        if spec.get("replay") == "self_generated" or spec.get("targets") == "sdft":
            spec["generation"] = {**spec.get("generation", {}), "max_new_tokens": 8}
    config = tiny_config()
    config["mitigation"].update(arms=arena["arms"], interpolation=arena["interpolation"])
    write_config(workdir, config)
    proc = snakemake(workdir)
    assert "Traceback" not in proc.stdout + proc.stderr
    variants = pd.read_csv(workdir / "results/tiny/mitigation/summary.tsv", sep="\t")
    fine_tunes = 1 + sum(len(swept(spec)[1]) for spec in arena["arms"].values())  # plain fine-tuning first
    assert fine_tunes == 22 and len(variants) == fine_tunes * (1 + len(arena["interpolation"]))
    assert set(variants["arm"]) == {"none", *arena["arms"]}
    for name in ("fronts.tsv", "costs.tsv", "predictors.tsv", "protection.tsv", "tests.tsv"):
        assert len(pd.read_csv(workdir / "results/tiny/mitigation" / name, sep="\t")) > 0, name


def test_mitigation_reruns_only_what_a_change_touches(finished, tmp_path):
    workdir = fresh_clone(finished, tmp_path)
    # a new arm: its own fine-tune and scores, and the summary
    write_config(workdir, edited(tiny_config(), lambda c: c["mitigation"]["arms"].update(
        flow={"weights": "flow"})))
    assert by_rule(planned_jobs(workdir)) == {"arm_run": 1, "mitigation_summary": 1, "explorer": 1, "all": 1}
    # another temperature: only that arm's selection, fine-tune and scores
    write_config(workdir, edited(tiny_config(), lambda c: c["mitigation"]["arms"]["predicted"].update(temperature=0.5)))
    jobs = planned_jobs(workdir)
    assert by_rule(jobs) == {**PREDICTED_ARM, "mitigation_summary": 1, "explorer": 1, "all": 1}
    assert {w["arm"] for r, w in jobs if r == "arm_run"} == {"predicted"}
    # a changed prediction (mf's hyperparameters) reruns the replay arm that reads it, not random replay
    write_config(workdir, edited(tiny_config(), lambda c: c["prediction"].update(
        methods={m: ({"rank": 1, "reg": 1.0} if m == "mf" else {}) for m in
                 ("mean", "additive", "knn", "mf", "logistic_mf", "implicit_als", "semantic", "all_forgotten",
                  "random")})))
    jobs = planned_jobs(workdir)
    # (and mf_thresholded, Z's completion ranking Y's entries, in both splits)
    assert by_rule(jobs) == {"predict": 2, "prediction_scores": 1, "probe_evaluation": 2, **MATRIX_ARMS,
                             "mitigation_summary": 1, "predict_binary": 2, "binary_prediction_scores": 1, "explorer": 1, "all": 1}
    # a new test task (hex_copy: a test task of the ood split, which the predicted arms then read)
    write_config(workdir, edited(tiny_config(), lambda c: c["mitigation"].update(tasks=["mod10_add", "hex_copy"])))
    jobs = planned_jobs(workdir)
    assert by_rule(jobs) == {"token_losses": 1, "replay_selection": 4, "arm_run": 7, "plain_scores": 1,
                             "mitigation_summary": 1, "explorer": 1, "all": 1}
    assert {w["task"] for r, w in jobs if r not in ("mitigation_summary", "explorer", "all")} == {"hex_copy"}
    # a second seed: every arm once more at that seed, plain fine-tuning included
    write_config(workdir, edited(tiny_config(), lambda c: c["mitigation"].update(seeds=[0, 1])))
    jobs = planned_jobs(workdir)
    assert by_rule(jobs) == {"replay_selection": 4, "arm_run": 8, "mitigation_summary": 1,
                             "all": 1}
    assert {w["seed"] for r, w in jobs if r == "arm_run"} == {"1"}


def forecast_config(mode=True, **forecast):
    """json_profile added as a forecast task (fitted on the 3 measured tasks), its fine-tune monitored (the
    probes scored after steps 2 and 4 of 4), predicted replay on it; 30 audit examples (not the default 60: the
    tiny corpus has 140 examples, and a forecast is to score few of them)."""
    return edited(tiny_config(), lambda c: (
        c["tasks"].update(json_profile={"category": "world", "n_examples": 24, "forecast": mode,
                                        "finetune": {"monitor": {"every": 2}}}),
        c.update(forecast={"k": 8, "audit": 30, **forecast}),
        c["mitigation"].update(tasks=["json_profile"], arms={"predicted": {"replay": "predicted", "method": "mf",
                                                                            "ratio": 0.25}})))


def test_a_forecast_task_costs_one_finetune_and_one_probe_scoring_job(finished, tmp_path):
    workdir = fresh_clone(finished, tmp_path)
    write_config(workdir, forecast_config(generated=True))  # free-form items among the k watched: decoded at checks
    jobs = planned_jobs(workdir)
    # no scoring of the upstream shards, no new matrix row: nothing downstream of the matrix reruns
    # (monitored, its fine-tune's last check scores the probes: no probe scoring job of its own)
    assert by_rule(jobs) == {"prepare_task": 1, "finetune": 1, "forecast_probes": 1, "forecast": 1,
                             "forecast_trajectory": 1, "replay_selection": 1, "arm_run": 1,
                             "plain_scores": 1, "mitigation_summary": 1, "explorer": 1, "all": 1}
    snakemake(workdir)
    rows = pd.read_parquet(workdir / "results/tiny/forecast/forecast.parquet")
    meta = read_metadata(workdir / "results/tiny/forecast/forecast.parquet")
    assert meta["fit_tasks"] == ["city_qa", "mod10_add", "hex_copy"] and meta["probes"] == "dopt"
    assert rows["probe"].sum() == 8 and np.isfinite(rows["json_profile"]).all()
    assert (rows["halfwidth_0.9"] >= rows["halfwidth_0.8"]).all() and (rows["halfwidth_0.8"] > 0).all()
    summary = pd.read_csv(workdir / "results/tiny/forecast/summary.tsv", sep="\t").set_index("task")
    # 8 probes, 30 audit examples and the items that are neither, of the tiny corpus's 140 examples
    assert summary.loc["json_profile", "mode"] == "forecast" and summary.loc["json_profile", "token_ratio"] > 3
    assert ForgettingMatrix.read(workdir / MATRIX).tasks == ["city_qa", "mod10_add", "hex_copy"]
    replay = workdir / "results/tiny/mitigation/predicted/seed-0/replay/json_profile.parquet"
    assert len(pd.read_parquet(replay)) > 0
    assert "json_profile" in pd.read_csv(workdir / "results/tiny/mitigation/summary.tsv", sep="\t")["task"].values
    # the monitored fine-tune's checks, completed: its last check is the forecast job's row; and what it
    # measured is what the probe score job measures on the checkpoint it saved, to rounding
    trajectory = pd.read_csv(workdir / "results/tiny/forecast/trajectory.tsv", sep="\t")
    assert trajectory["step"].tolist() == [2, 4] and trajectory["fraction"].tolist() == [0.5, 1.0]
    assert trajectory["forecast_mean"].iloc[-1] == pytest.approx(float(rows["json_profile"].mean()), abs=1e-6)
    assert trajectory["probe_mean"].iloc[-1] == pytest.approx(np.mean(meta["probe_values"]["json_profile"]), abs=1e-6)
    snakemake(workdir, "results/tiny/forecast/scores/json_profile.parquet")  # the score job, asked for by name
    scored = pd.read_parquet(workdir / "results/tiny/forecast/scores/json_profile.parquet")
    items = read_metadata(workdir / "results/tiny/forecast/probes.parquet")["items"]
    # the probes, 30 audit examples (forecast.audit) and the k items that are neither
    assert len(meta["audit_ids"]) == 30 and not set(meta["audit_ids"]) & set(meta["probe_ids"])
    assert len(scored) == 8 + 30 + len(set(items["ids"]) - set(meta["probe_ids"]) - set(meta["audit_ids"]))
    assert scored["example_id"].iloc[8:38].tolist() == meta["audit_ids"]
    # the task's mean bounded by its own audit examples, at every check of its fine-tune and in the forecast
    for table in (trajectory, summary):
        assert (table["estimate_lower_0.9"] <= table["estimate"]).all() and \
            (table["estimate"] <= table["estimate_upper_0.9"]).all()
    assert summary.loc["json_profile", "estimate"] == pytest.approx(trajectory["estimate"].iloc[-1], abs=1e-6)
    scored = scored.iloc[:8]
    base = ForgettingMatrix.read(workdir / MATRIX)
    at_probes = base.base_nll[np.isin(base.example_ids, scored["example_id"])]
    np.testing.assert_allclose(scored["nll"] - at_probes, meta["probe_values"]["json_profile"], atol=1e-4)
    assert (workdir / "results/tiny/forecast/trajectory.png").stat().st_size > 10_000
    # it also watched k of the corpus's multiple-choice items: their accuracy, F and BT at each check, forecast
    # through the fit tasks' correctness (the transitions file) beside the k items' own estimate
    trained = json.loads((workdir / "results/tiny/checkpoints/json_profile/train_summary.json").read_text())
    assert trained["monitor_items"] == len(items["ids"]) == min(8, len(items["population"]))
    options = dict(zip(items["population"], items["options"]))
    assert 0 < sum(options[i] == 0 for i in items["ids"]) < len(items["ids"])  # free-form items among them
    # the forecast job's line for the task: the same rates at its last check (the weights it saved)
    line = summary.loc["json_profile"]
    assert line["items_F"] == pytest.approx(trajectory["items_F"].iloc[-1]) and line["items_k"] == len(items["ids"])
    for rate in ("acc", "F", "BT", "naive_acc", "naive_F", "naive_BT"):
        assert (trajectory[f"items_{rate}_lower"] <= trajectory[f"items_{rate}"]).all()
        assert (trajectory[f"items_{rate}"] <= trajectory[f"items_{rate}_upper"]).all()
    timeline = page_data(workdir / "results/tiny/explorer.html")["timelines"]["json_profile"]  # its task panel's
    assert timeline["steps"] == [2, 4] and timeline["mean"] == pytest.approx(trajectory["estimate"].tolist(),
                                                                             abs=1e-4)  # the bounded estimate
    assert timeline["forecast_mean"] == pytest.approx(trajectory["forecast_mean"].tolist(), abs=1e-4)
    # the multiple-choice items alone (forecast.generated off): other items follow the probes, and the monitored
    # fine-tune, which watched the old ones, trains again
    write_config(workdir, forecast_config())
    planned = by_rule(planned_jobs(workdir))
    assert planned["forecast_probes"] == 1 and planned["finetune"] == 1
    # another k or strategy: the probes, their scoring and the forecast (and what reads the forecast); a
    # monitored fine-tune scored the old probes as it trained, so it trains again (and plain fine-tuning's
    # held-out scores, which read it)
    write_config(workdir, forecast_config(probes="random", generated=True))
    assert by_rule(planned_jobs(workdir)) == {"forecast_probes": 1, "finetune": 1, "forecast": 1,
                                              "forecast_trajectory": 1, "replay_selection": 1, "arm_run": 1,
                                              "plain_scores": 1, "mitigation_summary": 1, "explorer": 1, "all": 1}
    # measuring it in full later: its shards scored, the matrix grows a row, the forecast and the trajectory
    # scored against it (tests/unit/test_monitor.py); the probes come from the fit rows' own scores, so the
    # monitored fine-tune stays
    write_config(workdir, forecast_config(mode="check", generated=True))
    planned = by_rule(planned_jobs(workdir))
    assert planned["score"] == 2 and planned["forecast"] == 1 and planned["forecast_trajectory"] == 1
    assert "finetune" not in planned and "forecast_probes" not in planned


def test_the_explorer_shows_a_tasks_most_forgotten_example_and_finds_an_example(finished):
    """Headless Chromium opens the page offline: a task's most forgotten example, its text and values as in
    the parquet files; an example searched, the tasks that forget it most; no console error."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    from browser import chromium, console_errors, remote_requests, wait_ready
    from forgetmap.data.upstream import read_rows

    page = finished / "results/tiny/explorer.html"
    matrix = ForgettingMatrix.read(finished / MATRIX)
    shards = [str(data_file(finished, "demo", k)) for k in range(2)]
    row = matrix.row("mod10_add")
    top = int(np.nanargmax(row))
    text = read_rows(shards, np.array([top])).iloc[0]
    driver = chromium()
    try:
        driver.get(page.as_uri())
        wait_ready(driver)
        driver.find_element(By.CSS_SELECTOR, "#components-body a.link[data-id='mod10_add']").click()
        assert "mod10_add" in driver.find_element(By.ID, "task-title").text
        first = driver.find_elements(By.CSS_SELECTOR, "#task-forgotten tbody tr")[0].find_elements(By.TAG_NAME, "td")
        assert first[0].text == matrix.example_ids[top] and first[1].text == matrix.sources[top]
        assert text["response"].strip()[:40] in first[2].text
        assert first[3].text == f"{matrix.base_nll[top]:.3f}" and first[5].text == f"{row[top]:.3f}"
        assert first[6].text != "–"  # mod10_add is the id split's test task: its prediction is shown
        other = str(matrix.example_ids[int(np.nanargmin(row))])  # the most improved: carried in full too
        search = driver.find_element(By.ID, "search")
        search.send_keys(other, Keys.ENTER)
        assert other in driver.find_element(By.ID, "example-title").text
        tasks = driver.find_elements(By.CSS_SELECTOR, "#example-tasks tbody tr")
        column = int(np.flatnonzero(matrix.example_ids == other)[0])
        assert tasks[0].find_element(By.TAG_NAME, "td").text == matrix.tasks[int(np.nanargmax(matrix.values[:, column]))]
        # every kind of example shows its text: a plain-text (lm) one and a chat one, searched by id
        carried = driver.execute_script("return Object.keys(JSON.parse(document.getElementById('data').textContent).examples)")
        position = {str(e): k for k, e in enumerate(matrix.example_ids)}
        rows = read_rows(shards, np.array([position[e] for e in carried]))
        for kind in ("lm", "chat"):
            record = rows[rows["kind"] == kind].iloc[0]
            search.clear()
            search.send_keys(record["example_id"], Keys.ENTER)
            shown = " ".join(driver.find_element(By.ID, "example-text").text.split())
            expected = " ".join((record["text"] if kind == "lm" else record["response"]).split())
            assert expected and expected[:30] in shown, (kind, expected, shown)
        ticks = {t.text for t in driver.find_elements(By.CSS_SELECTOR, "#heatmap .xtick text")}
        assert set(matrix.sources) <= ticks  # the overview's x axis names the sources
        assert console_errors(driver) == []
        assert remote_requests(driver) == []  # offline: Plotly and the data are inside the page
    finally:
        driver.quit()


def test_the_demo_map_maps_the_runs_fine_tunes_without_training(finished, tmp_path):
    """config/examples/demo-map.yaml, the second documented command, on this run's outputs: its base and
    fine-tunes read as checkpoints, quiz answers sampled over 3 seeds; nothing trained, no shard rewritten."""
    import yaml

    workdir = fresh_clone(finished, tmp_path)
    config = yaml.safe_load((workdir / "config/examples/demo-map.yaml").read_text().replace("results/demo/",
                                                                                              "results/tiny/"))
    config.update(shard_size=70)
    config["upstream"]["demo"]["n_examples"] = 140
    model = config["models"]["demo_map"]
    model["checkpoints"] = {t: spec for t, spec in model["checkpoints"].items() if t in ("city_qa", "mod10_add", "hex_copy")}
    (workdir / "config/map.yaml").write_text(yaml.safe_dump(config))
    proc = snakemake(workdir, "--configfile", "config/map.yaml")
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out and "rule finetune" not in out and "rule shard_upstream" not in out
    rates = pd.read_csv(workdir / "results/demo_map/correctness/rates.tsv", sep="\t", dtype={"seed": str})
    rows = rates[(rates["level"] == "task") & (rates["seed"] == "all")]
    assert set(rows["task"]) == {"city_qa", "mod10_add", "hex_copy"} and rows["F_true_sd"].notna().all()
    assert set(rates["seed"]) == {"all", "0", "1", "2"}
    assert (workdir / "results/demo_map/explorer.html").exists() and library_warnings(workdir) == []



def test_a_local_run_forks_its_jobs_from_one_warm_process(finished, tmp_path):
    """Starting Python and importing torch and transformers is most of a small job's time: the run's jobs are
    forked from one process that imported them (forgetmap.warm), and a forked job writes what a process of its
    own writes."""
    here = os.getcwd()
    log = (finished / "results/logs/warm-start.log").read_text()
    assert log.count("forked: forgetmap ") >= 40 and "declined" not in log, log[-2000:]
    assert "forked: forgetmap score" in log and "forked: forgetmap finetune" in log
    env = {k: v for k, v in os.environ.items() if k != "FORGETMAP_WARM"}
    os.chdir(finished)  # the plan's paths are the run's
    try:
        plan = Plan(yaml.safe_load((finished / "config/config.yaml").read_text()))
        settings = json.dumps(plan.run_score_settings("tiny", "mod10_add"), sort_keys=True)
        shard = plan.shard_path("tiny", "1")
    finally:
        os.chdir(here)
    subprocess.run([command("forgetmap"), "score", "--model-dir", "results/tiny/checkpoints/mod10_add",
                    "--shard", shard, "--settings", settings, "--threads", "1",
                    "--out", str(tmp_path / "alone.parquet")], cwd=finished, env=env, check=True, capture_output=True)
    assert (tmp_path / "alone.parquet").read_bytes() == (finished / "results/tiny/scores/mod10_add/shard-1.parquet").read_bytes()


def test_a_task_forecast_before_its_fine_tune_costs_one_job_and_fine_tunes_nothing(finished, tmp_path):
    """`forecast: before`: the task's row from the map and its text alone (forgetmap.predict.before): its task file
    and one forecast job, no fine-tune, no scoring; the three measured rows give intervals."""
    from forgetmap.io import read_metadata

    workdir = fresh_clone(finished, tmp_path)
    write_config(workdir, edited(tiny_config(), lambda c: c["tasks"].update(
        json_profile={"category": "world", "n_examples": 24, "forecast": "before"})))
    jobs = planned_jobs(workdir)
    assert by_rule(jobs) == {"prepare_task": 1, "forecast_before": 1, "all": 1}
    assert [w["task"] for r, w in jobs if r == "prepare_task"] == ["json_profile"]
    snakemake(workdir)
    rows = pd.read_parquet(workdir / "results/tiny/forecast/before.parquet")
    assert list(rows.columns) == ["example_id", "source", "json_profile", "halfwidth_0.8", "halfwidth_0.9"]
    assert len(rows) == 140 and np.isfinite(rows.drop(columns=["example_id", "source"]).to_numpy()).all()
    assert (rows["halfwidth_0.9"] >= rows["halfwidth_0.8"]).all() and (rows["halfwidth_0.8"] > 0).all()
    meta = read_metadata(workdir / "results/tiny/forecast/before.parquet")
    assert meta["fit_tasks"] == ["city_qa", "mod10_add", "hex_copy"] and meta["method"] == "similarity slopes"
    summary = pd.read_csv(workdir / "results/tiny/forecast/before_summary.tsv", sep="\t")
    assert summary["task"].tolist() == ["json_profile"] and summary["fit_tasks"].tolist() == [3]
    assert summary["forecast_mean"][0] == pytest.approx(rows["json_profile"].mean(), abs=1e-5)
    # three rows give the entries their intervals, but too few folds for the mean's at these levels: said once
    assert summary[["mean_halfwidth_0.8", "mean_halfwidth_0.9"]].isna().all(axis=None)
    log = (workdir / "results/logs/tiny/forecast/before.log").read_text()
    assert log.count("without some intervals") == 1 and "Traceback" not in log
    assert not (workdir / "results/tiny/checkpoints/json_profile").exists()
    assert planned_jobs(workdir) == []
