"""Forecasting a task's row from k scored probes (forgetmap.predict.forecast), on a generated matrix."""

import numpy as np
import pandas as pd
import pytest

from forgetmap.errors import DataError
from forgetmap.io import read_metadata
from forgetmap.matrix import ForgettingMatrix
from forgetmap.predict.bound import mean_bound
from forgetmap.predict.ends import studentized_ends
from forgetmap.predict.forecast import choose, complete, fit_rows, forecast_command, probes_command
from forgetmap.predict.registry import make_method
from helpers import refit_strata

N, FIT = 600, 16


def low_rank(seed: int = 0, tasks: int = FIT + 2) -> np.ndarray:
    """Rank-3 rows plus noise that differs by column: what the matrix completion is built for."""
    rng = np.random.default_rng(seed)
    rows = rng.normal(size=(tasks, 3)) @ rng.normal(size=(3, N)) * 0.3
    return (rows + rng.normal(size=(tasks, N)) * rng.uniform(0.02, 0.2, size=N)).astype(np.float32)


def test_a_row_completed_from_k_probes_beats_the_fit_tasks_mean_and_its_intervals_cover():
    z = low_rank()
    train, new = z[:FIT], z[FIT:]
    known = choose(train, 30, "dopt", 0, "test")
    pred, widths = complete(train, known, new[:, known].astype(np.float64), "mf", {}, [0.8, 0.9])
    hidden = np.ones(N, dtype=bool)
    hidden[known] = False
    rmse = np.sqrt(np.mean((pred[:, hidden] - new[:, hidden]) ** 2))
    baseline = np.sqrt(np.mean((train.mean(0)[hidden] - new[:, hidden]) ** 2))
    assert rmse < 0.5 * baseline
    inside = np.abs(pred - new)[:, hidden] <= widths[0.9][hidden]
    assert 0.8 <= inside.mean() <= 1.0 and widths[0.8].mean() < widths[0.9].mean()


def test_a_forecast_is_zero_where_no_probe_has_changed_and_as_close_as_the_fold_in_once_they_have():
    from forgetmap.predict.forecast import forecast_params

    # the fit rows' mean far from 0 and varying by example, as finished fine-tunes' forgetting is
    z = low_rank() + np.linspace(-0.3, 0.5, N, dtype=np.float32)
    train, new = z[:FIT], z[FIT:]
    known = choose(train, 30, "dopt", 0, "test")
    params = forecast_params("mf", {})
    assert params == {"origin": True} and forecast_params("mf", {"origin": False, "rank": 2}) == {
        "origin": False, "rank": 2}
    hidden = np.ones(N, dtype=bool)
    hidden[known] = False
    at_zero, _ = complete(train, known, np.zeros((1, 30)), "mf", params, [])
    assert np.array_equal(at_zero, np.zeros((1, N), dtype=np.float32))  # exactly 0: through the origin
    plain_zero, _ = complete(train, known, np.zeros((1, 30)), "mf", {}, [])
    assert np.abs(plain_zero).mean() > 0.1  # the plain fold-in at 0: the fit rows' mean, less its average
    values = new[:, known].astype(np.float64)
    early, _ = complete(train, known, 0.01 * values, "mf", params, [])  # barely moved: a small row
    assert np.abs(early).mean() < 0.02 * np.abs(new).mean()
    pred, _ = complete(train, known, values, "mf", params, [])
    plain, _ = complete(train, known, values, "mf", {}, [])
    rmse = np.sqrt(np.mean((pred[:, hidden] - new[:, hidden]) ** 2))
    assert rmse <= 1.1 * np.sqrt(np.mean((plain[:, hidden] - new[:, hidden]) ** 2))


def test_k_as_large_as_the_usable_examples_is_an_error_naming_it():
    z = low_rank()
    z[0, :N - 20] = np.nan  # only 20 examples measured under every fit task
    matrix = ForgettingMatrix(z[:FIT], [f"t{i}" for i in range(FIT)], np.array([f"e{j}" for j in range(N)]),
                              np.array(["s"] * N), np.zeros(N, dtype=np.float32))
    train, usable = fit_rows(matrix, matrix.tasks, "m.parquet")
    assert train.shape == (FIT, 20) and usable.tolist() == list(range(N - 20, N))
    with pytest.raises(DataError, match="m.parquet: k = 20 probes leave nothing to forecast among 20 usable"):
        choose(train, 20, "random", 0, "m.parquet")


def test_the_forecast_job_completes_each_task_and_scores_a_checked_one_against_its_row(tmp_path):
    z = low_rank()
    tasks = [f"t{i}" for i in range(FIT)] + ["checked"]
    ids = np.array([f"e{j}" for j in range(N)])
    base = np.random.default_rng(1).uniform(1, 3, N).astype(np.float32)
    matrix = ForgettingMatrix(z[:FIT + 1], tasks, ids, np.array(["s"] * N), base)
    matrix.write(tmp_path / "forgetting.parquet")
    shards = []
    for k, part in enumerate(np.array_split(np.arange(N), 2)):  # the upstream rows: 2 shards, corpus order
        shards.append(str(tmp_path / f"shard-{k}.parquet"))
        pd.DataFrame({"example_id": ids[part], "source": "s", "kind": "lm", "prompt": "", "response": "x"}).to_parquet(
            shards[-1])
    fit = tasks[:FIT]
    # the fit rows' own score files (the probes are chosen from them, not from the matrix: a `check` task's
    # monitored fine-tune needs the probes before its row exists)
    rows = {"tasks": fit, "categories": {t: "c" for t in fit}, "groups": {"c": "g"}, "base_scores": [],
            "task_scores": {t: [] for t in fit}}
    for k, part in enumerate(np.array_split(np.arange(N), 2)):
        for run, nll in (("base", base), *((t, base + z[i]) for i, t in enumerate(fit))):
            path = str(tmp_path / f"scores-{run}-{k}.parquet")
            pd.DataFrame({"example_id": ids[part], "nll": nll[part].astype(np.float32)}).to_parquet(path)
            (rows["base_scores"] if run == "base" else rows["task_scores"][run]).append(path)
    probes = tmp_path / "probes.parquet"
    probes_command({"k": 25, "probes": "dopt", "seed": 0, "audit": 40, "fit_tasks": fit, "rows": rows}, shards,
                   rows["base_scores"], str(probes))
    chosen = read_metadata(probes)
    index, audit = np.asarray(chosen["indices"]), np.asarray(chosen["audit"])
    # the probes, then 40 audit examples drawn at random from the others (by strata, below), in corpus order
    assert pd.read_parquet(probes)["example_id"].tolist() == ids[np.concatenate([index, audit])].tolist()
    assert chosen["fit_tasks"] == fit and len(audit) == 40 and not np.isin(audit, index).any()
    assert (np.diff(audit) > 0).all() and not np.array_equal(audit, np.setdiff1d(np.arange(N), index)[:40])
    both = np.concatenate([index, audit])
    scores = []
    for name, row in (("checked", z[FIT]), ("new", z[FIT + 1])):  # NLL = base + Z at the probes, 3 tokens each
        scores.append(str(tmp_path / f"{name}.parquet"))
        pd.DataFrame({"example_id": ids[both], "nll": (base[both] + row[both]).astype(np.float32),
                      "n_tokens": np.full(len(both), 3, dtype=np.int32)}).to_parquet(scores[-1])
    pd.DataFrame({"example_id": ids, "nll": base, "n_tokens": np.full(N, 7, dtype=np.int32)}).to_parquet(
        tmp_path / "base.parquet")
    settings = {"tasks": ["checked", "new"], "modes": {"checked": "check", "new": "forecast"}, "fit_tasks": fit,
                "k": 25, "probes": "dopt", "method": "mf", "params": {}, "intervals": [0.8, 0.9], "threshold": 0.0,
                "top_q": 0.1, "budget": 50}
    out, summary, figure = tmp_path / "forecast.parquet", tmp_path / "summary.tsv", tmp_path / "forecast.png"
    forecast_command(settings, str(tmp_path / "forgetting.parquet"), str(probes), scores, [str(tmp_path / "base.parquet")],
                     str(out), str(summary), str(figure))
    rows = pd.read_parquet(out)
    meta = read_metadata(out)
    assert rows["probe"].sum() == 25 and meta["fit_tasks"] == fit and meta["probe_ids"] == ids[index].tolist()
    assert np.allclose(meta["probe_values"]["new"], z[FIT + 1][index], atol=1e-5)
    table = pd.read_csv(summary, sep="\t").set_index("task")
    hidden = ~rows["probe"].to_numpy()
    rmse = np.sqrt(np.mean((rows["checked"].to_numpy()[hidden] - z[FIT][hidden]) ** 2))
    assert table.loc["checked", "measured"] and table.loc["checked", "rmse"] == pytest.approx(rmse, rel=1e-4)
    inside = np.abs(rows["checked"].to_numpy() - z[FIT])[hidden] <= rows["halfwidth_0.9"].to_numpy()[hidden]
    assert table.loc["checked", "coverage_0.9"] == pytest.approx(inside.mean(), rel=1e-6)
    assert not table.loc["new", "measured"] and np.isnan(table.loc["new", "rmse"])
    assert table.loc["new", "probe_tokens"] == 3 * 65 and table.loc["new", "upstream_tokens"] == 7 * N
    # each row's mean bounded by its own 40 audit examples (predict.bound), drawn by the fit rows' two strata, the
    # measured one's interval holding it, its ends as the fit rows' leave-one-task-out folds place the truth
    # (predict.ends)
    train, _ = fit_rows(ForgettingMatrix.read(tmp_path / "forgetting.parquet"), fit, "m")
    strata = refit_strata(train, index)
    assert chosen["audit_strata"]["examples"] == [N - 25 - round(0.1 * (N - 25)), round(0.1 * (N - 25))]
    assert chosen["audit_strata"]["audit"] == [int((strata[audit] == h).sum()) for h in (0, 1)]
    ends = studentized_ends(train, index, make_method("mf").fit(train), "mf", {}, audit, strata, [0.9])
    assert meta["bound_ends"]["0.9"] == pytest.approx(list(ends[0.9]), rel=1e-9) and min(ends[0.9]) > 0
    for name, t in (("checked", FIT), ("new", FIT + 1)):
        measured = (base[both] + z[t][both]).astype(np.float32).astype(np.float64) - base[both]
        bound = mean_bound(rows[name].to_numpy(), index, measured[:25], audit, measured[25:], 0.9, ends=ends[0.9],
                           strata=strata)
        assert table.loc[name, ["estimate", "estimate_lower_0.9", "estimate_upper_0.9"]].tolist() \
            == pytest.approx([bound.estimate, bound.lower, bound.upper], rel=1e-5, abs=1e-6)
        others = strata >= 0  # the audit's own estimate: each stratum's mean weighted by its size
        own = sum(np.mean(others & (strata == h)) / np.mean(others) * measured[25:][strata[audit] == h].mean()
                  for h in (0, 1))
        assert table.loc[name, "audit_mean"] == pytest.approx(own, abs=1e-6)
    assert table.loc["checked", "estimate_covered_0.9"] == \
        (table.loc["checked", "estimate_lower_0.9"] <= z[FIT].mean() <= table.loc["checked", "estimate_upper_0.9"])
    assert table.loc["checked", "estimate_upper_0.8"] < table.loc["checked", "estimate_upper_0.9"]
    assert np.isnan(table.loc["new", "estimate_covered_0.9"])  # no measured row to hold
    assert figure.stat().st_size > 0 and meta["levels"] == [0.8, 0.9]
