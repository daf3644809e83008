"""A model whose matrix the authors released runs through the same analyses as a computed one."""

import json

import numpy as np
import pandas as pd
import pytest

from forgetmap.lowrank import r2_by_rank
from helpers import (edited, make_workdir, page_data, planned_jobs, released_binary_fixture, released_fixture,
                     snakemake, tiny_config, write_config)

pytestmark = pytest.mark.workflow


def test_imported_matrix_and_splits_feed_the_low_rank_analysis(tmp_path):
    workdir = make_workdir(tmp_path / "wf")
    fx = released_fixture(workdir / "resources/stats")
    cfg = edited(tiny_config(), lambda c: (
        c["categories"].update(flan={"group": "in_domain"}, tulu={"group": "out_of_domain"}),
        c["models"].update(paper={"imported": {
            "matrix": "resources/stats/ftd-ppl-inc-full.npy", "base_logprobs": "resources/stats/olmo_base_ppl.npy",
            "splits": {"ood-tulu": "resources/stats/fpd-split-ood-tulu.pkl"}}})))
    write_config(workdir, cfg)
    rules = {r for r, w in planned_jobs(workdir) if w.get("model") == "paper"}
    # no fine-tune and no scoring: the released matrix and split feed the analyses and the prediction
    assert rules == {"import_matrix", "import_split", "lowrank", "cross_task", "predict", "prediction_scores",
                     "probe_evaluation", "explorer"}
    snakemake(workdir, "results/paper/lowrank/r2.tsv", "results/paper/prediction/scores.tsv")
    r2 = pd.read_csv(workdir / "results/paper/lowrank/r2.tsv", sep="\t")
    z = fx["z"][:, ~np.isnan(fx["z"][0])]
    np.testing.assert_allclose(r2["r2"], r2_by_rank(z), rtol=1e-5)
    assert json.loads((workdir / "results/paper/lowrank/summary.json").read_text())["examples_dropped_nan"] == 1
    split = json.loads((workdir / "results/paper/splits/ood-tulu.json").read_text())
    assert split["test_tasks"] == ["lima", "oasst1"]
    scores = pd.read_csv(workdir / "results/paper/prediction/scores.tsv", sep="\t")
    assert set(scores["split"]) == {"ood-tulu"} and (scores.query("metric == 'rmse'")["mean"].dropna() > 0).all()
    # three train tasks: conformal intervals by leaving each out, their coverage among the metrics
    assert scores.query("method == 'mf' and metric == 'coverage_0.9'")["mean"].between(0, 1).all()
    widths = pd.read_parquet(workdir / "results/paper/prediction/ood-tulu/mf/intervals-0.parquet")
    assert list(widths.columns) == ["example_id", "halfwidth_0.8", "halfwidth_0.9"]
    assert (widths["halfwidth_0.9"].dropna() >= widths["halfwidth_0.8"].dropna()).all()
    matrix = pd.read_parquet(workdir / "results/paper/forgetting.parquet")
    assert list(matrix.columns) == ["example_id", "source", "base_nll", "aeslc", "cb", "wsc", "lima", "oasst1"]


def test_a_config_of_imported_models_alone_runs_every_analysis_and_the_prediction(tmp_path):
    """The analyst's case: only the authors' released statistics, no upstream corpus and no tasks."""
    workdir = make_workdir(tmp_path / "wf")
    released_fixture(workdir / "resources/stats")
    cfg = {"categories": {"flan": {"group": "in_domain"}, "tulu": {"group": "out_of_domain"}},
           "prediction": {"k": 5, "seeds": 2},
           "models": {"paper": {"imported": {
               "matrix": "resources/stats/ftd-ppl-inc-full.npy", "base_logprobs": "resources/stats/olmo_base_ppl.npy",
               "splits": {"ood-tulu": "resources/stats/fpd-split-ood-tulu.pkl"}}}}}
    write_config(workdir, cfg)
    proc = snakemake(workdir)
    output = proc.stdout + proc.stderr
    assert "Traceback" not in output and "Exception" not in output
    for path in ("forgetting.parquet", "lowrank/r2.tsv", "correlations/cross_task.tsv", "splits/ood-tulu.json",
                 "prediction/scores.tsv"):
        assert (workdir / "results/paper" / path).exists(), path
    assert (workdir / "results/lowrank_summary/paper.tsv").exists()
    assert planned_jobs(workdir) == []
    data = page_data(workdir / "results/paper/explorer.html")  # the explorer: ids and sources, no texts
    assert data["texts"] is False and {t["kind"] for t in data["tasks"]} == {"imported"}
    assert [t["name"] for t in data["tasks"]] == ["aeslc", "cb", "wsc", "lima", "oasst1"]


def test_a_released_binary_matrix_runs_the_analyses_and_prediction_of_y(tmp_path):
    """The paper's exact-match release: Y imports as the 1->0 matrix; nothing that needs Z is planned."""
    workdir = make_workdir(tmp_path / "wf")
    released_binary_fixture(workdir / "resources/stats")
    cfg = {"categories": {"mmlu": {"group": "in_domain"}, "dolly": {"group": "out_of_domain"}},
           "prediction": {"k": 5, "seeds": 2},
           "models": {"paper": {"imported": {
               "matrix": "resources/stats/train_em_fgt_base_correct.npy", "statistic": "forgotten_1to0",
               "splits": {"id": "resources/stats/fpd-split-flan-bin-id.pkl"}}}}}
    write_config(workdir, cfg)
    rules = [r for r, _ in planned_jobs(workdir)]
    # every configured predictor of Y but mf_thresholded (it ranks Y's entries by the completion of Z)
    assert sorted(set(rules)) == ["all", "binary_prediction_scores", "import_binary", "import_split",
                                  "lowrank_binary", "predict_binary"] and rules.count("predict_binary") == 5
    proc = snakemake(workdir)
    output = proc.stdout + proc.stderr
    assert "Traceback" not in output and "Exception" not in output
    ranks = pd.read_csv(workdir / "results/paper/correctness/lowrank.tsv", sep="\t")
    # a rank-2 logit matrix: rank 2 explains far more deviance than the rank-0 (row + column) fit
    explained = ranks.set_index("rank")["deviance_explained"]
    assert explained[2] > explained[0] + 0.1
    assert ranks["z_r2"].isna().all()
    scores = pd.read_csv(workdir / "results/paper/correctness/prediction_scores.tsv", sep="\t")
    assert set(scores["method"]) == {"logistic_mf", "implicit_als", "column_frequency", "knn", "additive"}
    assert not (workdir / "results/paper/forgetting.parquet").exists()


def test_the_released_real_model_map_runs_every_analysis_through_the_import(tmp_path):
    """resources/released/smollm2-map (SmolLM2-135M-Instruct over the demo's 18 tasks and 1,050 upstream examples,
    made by config/examples/smollm2-map.yaml) read as the paper's released matrices are: the same values, the corpus's
    own ids, both splits with enough train tasks for intervals, and the structure the benchmarks report."""
    import shutil

    from forgetmap.matrix import ForgettingMatrix
    from helpers import REPO

    workdir = make_workdir(tmp_path / "wf")
    shutil.copytree(REPO / "resources/released", workdir / "resources/released")
    snakemake(workdir, "--configfile", "config/examples/smollm2-released.yaml")
    released = workdir / "resources/released/smollm2-map"
    assert "commit" in (released / "PROVENANCE.md").read_text()
    m = ForgettingMatrix.read(workdir / "results/smollm2_map/forgetting.parquet")
    np.testing.assert_array_equal(m.values, np.load(released / "forgetting.npy"))
    assert m.shape == (18, 1050) and m.example_ids[0] == "facts-000000" and m.categories["hex_copy"] == "other"
    assert sorted(pd.Series(m.sources).value_counts().unique()) == [150]  # every domain of the corpus alike
    r2 = pd.read_csv(workdir / "results/smollm2_map/lowrank/r2.tsv", sep="\t").set_index("rank")
    assert r2.loc[1, "r2"] > r2.loc[1, "r2_row_shuffled"] + 0.5 and r2.loc[3, "r2"] > 0.85
    scores = pd.read_csv(workdir / "results/smollm2_map/prediction/scores.tsv", sep="\t")
    rmse = scores.query("metric == 'rmse'").set_index(["split", "method"])["mean"]
    for split in ("id", "ood"):
        assert rmse[split, "mf"] < 0.7 * rmse[split, "mean"]  # completion from 30 examples against the column mean
        assert not scores.query(f"split == '{split}' and metric == 'coverage_0.9'").empty  # >= 3 train tasks
    assert planned_jobs(workdir, "--configfile", "config/examples/smollm2-released.yaml") == []
