"""A fractional map as a workflow setting (models.NAME.score.cells): the plan's subsets and their refusals, a
scoring job that scores only the cells no earlier file holds, the completed matrix with its mask and half-widths,
and what each analysis reads of it."""

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from forgetmap import fractional
from forgetmap.cells import SCORED, score_cells
from forgetmap.correlate import task_correlations
from forgetmap.errors import ConfigError, DataError
from forgetmap.io import read_metadata, write_table
from forgetmap.matrix import ForgettingMatrix, complete_map
from forgetmap.plan import Plan

TASKS = ["add_qa", "arith_restate", "city_qa", "code_trace", "counterfact", "date_words", "facts_restate", "hex_copy"]


def config(cells=0.5, **score):
    return {"upstream": {"demo": {"format": "demo", "n_examples": 700}}, "shard_size": 350,
            "categories": {"w": {"group": "in_domain"}},
            "tasks": {t: {"category": "w"} for t in TASKS},
            "models": {"m": {"upstream": "demo", "score": {"cells": cells, **score}}}}


def test_each_fine_tuned_row_scores_its_designed_cells_and_the_base_every_example():
    plan = Plan(config())
    assert plan.fractional_rows("m") == TASKS
    base, row = plan.scores("m", "base"), plan.scores("m", "code_trace")
    assert base == ["results/m/scores/base/shard-0.parquet", "results/m/scores/base/shard-1.parquet"]
    assert all(p.startswith("results/m/scores/code_trace/shard-") and ".cells-" in p for p in row)
    cells = plan.cell_score_settings("m", "code_trace")["cells"]
    assert cells == {"design": "balanced", "fraction": 0.5, "seed": 0, "task": "code_trace", "place": 3, "items": True}
    assert "cells" not in plan.run_score_settings("m", "base")  # the base's settings are a full map's
    full = Plan(config(cells=1))
    assert full.fractional_rows("m") == [] and full.scores("m", "code_trace")[0] == "results/m/scores/code_trace/shard-0.parquet"
    assert full.run_score_settings("m", "code_trace") == plan.run_score_settings("m", "code_trace")
    # another fraction is another file; a task added after the others leaves theirs as they were
    assert Plan(config(cells=0.6)).scores("m", "code_trace") != row
    grown = config()
    grown["tasks"]["job_qa"] = {"category": "w"}
    assert Plan(grown).scores("m", "code_trace") == row
    matrix = plan.matrix_settings("m")["cells"]
    assert matrix["fraction"] == 0.5 and matrix["level"] == 0.9 and set(matrix["rows"]) == set(TASKS)


def test_the_time_table_counts_a_fractional_runs_cells():
    from forgetmap.cost.jobs import kinds

    full = {label: jobs for _, label, jobs in kinds(Plan(config(cells=1)), "m")}
    part = {label: jobs for _, label, jobs in kinds(Plan(config(cells=0.5)), "m")}
    assert len(full["score shard 0"]) == 9 and len(part["score shard 0"]) == 1  # the base alone in full
    cells = part["score shard 0, 50 % of cells"]
    assert len(cells) == 8 and cells[0].benchmark.startswith("results/benchmarks/m/score/add_qa/shard-0.cells-")
    items = 50  # the demo corpus's quiz items among its first 350: scored under every run
    assert cells[0].work.examples < full["score shard 0"][0].work.examples
    assert cells[0].work.examples >= items


@pytest.mark.parametrize("mutate, expected", [
    (lambda c: c["models"]["m"]["score"].update(cells=0), "config key models.m.score.cells: value 0 is invalid"),
    (lambda c: c["models"]["m"]["score"].update(cells=1.2), "config key models.m.score.cells: value 1.2 is invalid"),
    (lambda c: c["models"]["m"]["score"].update(design="leverage"), "config key models.m.score.design: value "
                                                                    "'leverage' is not allowed; allowed: balanced, uniform"),
    (lambda c: c["models"]["m"]["score"].update(cells=0.1), "config key models.m.score.cells: 0.1 measures some "
                                                            "upstream example under 0 of the model's 8 fractional "
                                                            "rows (design balanced); the completion needs every "
                                                            "example under at least 2: the smallest that does is 0."),
    (lambda c: c["tasks"]["arith_restate"].update(forecast=True), "config key models.m.score.cells: 0.5 (a fractional map), "
                                                       "and the model forecasts 'arith_restate'"),
    (lambda c: c.update(prediction={"probes": "dopt"}), "config key prediction.probes: 'dopt' reveals the same "
                                                        "examples of every test task"),
])
def test_a_fractional_map_the_completion_cannot_serve_is_refused_naming_the_key(mutate, expected):
    raw = config()
    mutate(raw)
    with pytest.raises(ConfigError) as err:
        Plan(raw)
    assert expected in str(err.value)


def test_the_smallest_fraction_said_is_the_smallest_that_covers_every_example_enough():
    ids = [f"e{j}" for j in range(500)]
    smallest = fractional.smallest_fraction("balanced", TASKS, ids, 2)
    assert fractional.least_cover("balanced", smallest, TASKS, ids) >= 2
    assert fractional.least_cover("balanced", round(smallest - 0.01, 2), TASKS, ids) < 2
    assert fractional.smallest_fraction("uniform", TASKS[:1], ids, 2) is None
    # a scoring job's row is the design's row, from the row's place and ids alone
    whole = fractional.design("balanced", 0.4, TASKS, ids)
    assert (fractional.row("balanced", 0.4, "date_words", 5, ids[100:200]) == whole[5, 100:200]).all()


def shard(n=40):
    return pd.DataFrame({"example_id": [f"e{j:03d}" for j in range(n)], "text": ["x"] * n,
                         "answer": [("a" if j % 10 == 0 else None) for j in range(n)]})


def fake_scorer(calls):
    def score(part):
        calls.append(list(part["example_id"]))
        ids = part["example_id"].astype(str)
        nll = np.array([int(e[1:]) / 10 for e in ids], dtype=np.float32)
        return pa.table({"example_id": pa.array(ids), "nll": pa.array(nll, pa.float32()),
                         "n_tokens": pa.array(np.full(len(ids), 5), pa.int32()),
                         "n_bytes": pa.array(np.full(len(ids), 9), pa.int32())}), {"examples": len(ids)}
    return score


def cells(fraction):
    return {"design": "balanced", "fraction": fraction, "seed": 0, "task": "city_qa", "place": 2, "items": True}


def test_a_scoring_job_scores_only_the_cells_no_earlier_file_of_its_checkpoint_holds(tmp_path):
    frame = shard()
    meta = {"identity": "abc", "settings": "s1", "shard": "shard-0.k.parquet", "model_dir": "m", "backend": "torch"}
    calls = []
    small = tmp_path / "shard-0.cells-aaaa.parquet"
    summary = score_cells(frame, {"cells": cells(0.3)}, str(small), meta, fake_scorer(calls))
    table = pd.read_parquet(small)
    wanted = fractional.row("balanced", 0.3, "city_qa", 2, list(frame["example_id"])) | frame["answer"].notna().to_numpy()
    assert (table[SCORED].to_numpy() == wanted).all() and list(table["example_id"]) == list(frame["example_id"])
    assert np.isnan(table["nll"][~wanted]).all() and (table["n_tokens"][~wanted] == 0).all()
    assert summary["cells_scored"] == wanted.sum() and len(calls) == 1
    large = tmp_path / "shard-0.cells-bbbb.parquet"
    summary = score_cells(frame, {"cells": cells(0.6)}, str(large), meta, fake_scorer(calls))
    more = pd.read_parquet(large)[SCORED].to_numpy()
    assert summary["cells_read_again"] == wanted.sum() and summary["cells_scored"] == (more & ~wanted).sum()
    assert set(calls[1]) == set(frame["example_id"][more & ~wanted])  # only the new cells were scored
    np.testing.assert_array_equal(pd.read_parquet(large)["nll"][more],
                                  np.float32([int(e[1:]) / 10 for e in frame["example_id"][more]]))
    # a smaller fraction scores nothing; another checkpoint's file is never read again
    assert score_cells(frame, {"cells": cells(0.2)}, str(tmp_path / "shard-0.cells-cccc.parquet"), meta,
                       fake_scorer(calls))["cells_scored"] == 0 and len(calls) == 2
    other = {**meta, "identity": "retrained"}
    assert score_cells(frame, {"cells": cells(0.2)}, str(tmp_path / "shard-0.cells-dddd.parquet"), other,
                       fake_scorer(calls))["cells_read_again"] == 0
    assert read_metadata(large)["identity"] == "abc"


def low_rank_matrix(fraction=0.4, seed=0):
    rng = np.random.default_rng(seed)
    ids = np.array([f"e{j}" for j in range(300)])
    sources = np.array(["a", "b", "c"])[np.arange(300) % 3]
    z = (rng.normal(size=(8, 2)) @ rng.normal(size=(2, 300)) * 0.3 + 0.05 * rng.normal(size=(8, 300)))
    measured = fractional.design("balanced", fraction, TASKS, list(ids))
    values = np.where(measured, z, np.nan).astype(np.float32)
    return z, ForgettingMatrix(values, TASKS, ids, sources, np.zeros(300, np.float32), {t: "w" for t in TASKS},
                               {"w": "in_domain"}, measured=measured)


def test_the_completed_matrix_keeps_its_mask_and_half_widths_through_its_file(tmp_path):
    z, matrix = low_rank_matrix()
    complete_map(matrix, {"fraction": 0.4, "design": "balanced", "level": 0.9, "seed": 0})
    assert np.isfinite(matrix.values).all() and matrix.completed
    np.testing.assert_array_equal(matrix.values[matrix.measured], z[matrix.measured].astype(np.float32))
    matrix.write(tmp_path / "forgetting.parquet")
    back = ForgettingMatrix.read(tmp_path / "forgetting.parquet")
    assert (back.measured == matrix.measured).all() and back.cells["level"] == 0.9 and back.reads().startswith("completed")
    widths = back.halfwidths()
    assert (widths[back.measured] == 0).all() and (widths[~back.measured] > 0).all()
    hidden = ~back.measured
    assert np.mean(np.abs(back.values[hidden] - z[hidden]) <= widths[hidden]) >= 0.85
    with pytest.raises(DataError, match="a fractional map .* the monitor's map fit reads every example"):
        back.require_measured("forgetting.parquet", "the monitor's map fit")
    assert pd.read_parquet(tmp_path / "forgetting.parquet").columns[-1] == "measured:hex_copy"


def test_analyses_of_a_fractional_map_read_its_measured_cells():
    from forgetmap.lowrank import measured_r2

    z, matrix = low_rank_matrix(0.5)
    pairwise = task_correlations(matrix.measured_values(), pairwise=True)[0]
    for a, b in [(0, 1), (2, 5)]:
        both = matrix.measured[a] & matrix.measured[b]
        assert pairwise[a, b] == pytest.approx(np.corrcoef(z[a, both], z[b, both])[0, 1], abs=1e-6)
    full = task_correlations(z.astype(np.float32))[0]
    np.testing.assert_allclose(task_correlations(z, pairwise=True)[0], full, atol=1e-6)  # every cell: the same
    r2 = measured_r2(z, matrix.measured, 12)
    assert r2["r2"][1] > 0.95 and r2["r2_row_shuffled"][0] < r2["r2"][0] - 0.3
    # a rank-r fit of examples measured under about four tasks follows even shuffled rows: the null says so
    assert r2["r2_row_shuffled"][3] > 0.9 and np.isnan(r2["r2"][10:]).all()


def test_the_protocol_on_a_fractional_map_judges_each_test_row_on_its_own_measured_cells():
    from forgetmap.predict.protocol import iterate_split

    z, matrix = low_rank_matrix(0.5)
    complete_map(matrix, {"fraction": 0.5, "design": "balanced", "level": 0.9, "seed": 0})
    test = ["facts_restate", "hex_copy"]
    out = list(iterate_split(matrix.values, TASKS, TASKS[:6], test, "mf", {}, 10, [0], measured=matrix.measured))
    _, pred, known, metrics, _, _ = out[0]
    assert known.shape == (2, 10)
    for row, task in enumerate(test):  # each row's probes among its own measured cells
        assert matrix.measured[TASKS.index(task), known[row]].all()
    assert metrics["train_cells_measured"] == pytest.approx(matrix.measured[:6].mean())
    # scrambling the completed cells of the test rows changes nothing: they are never read
    scrambled = matrix.values.copy()
    scrambled[6:][~matrix.measured[6:]] = 99.0
    again = list(iterate_split(scrambled, TASKS, TASKS[:6], test, "mf", {}, 10, [0], measured=matrix.measured))
    assert again[0][3] == metrics
