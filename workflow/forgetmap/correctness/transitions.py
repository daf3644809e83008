"""Sample-wise transitions of correctness from the base to each fine-tuned run (related-methods §2, §3.2).

"Before" is each row's reference: the base for a fine-tuned task, the base or the stage before it for a
checkpoint in a chain (`references`); "before" below is then one vector per row.

For every (task, item): before c_b and after c_a in {0, 1} (`forgetmap.correctness`), the transition
00 / 01 / 10 / 11, the forgetting matrix Y (1 for 1->0, 0 for 1->1, missing where the base was wrong)
and the backward-transfer matrix Y_BT (1 for 0->1, 0 for 0->0, missing where the base was right).

Rates (Harmon et al.): F = n10 / N, BT = n01 / N, acc_after - acc_before = BT - F (checked), relative
forgetting n10 / (n10 + n11), and the chance-adjusted F_true = max(0, F - s), BT_true = max(0, BT - s)
with s the expected share of spurious flips of items unknown at both times, (1 - acc_b)(1 - acc_a) /
(k - 1), computed within each group of items with the same k and weighted by its size (free-form items:
no correction). The ceilings are the known shares kappa = max(0, (k acc - 1) / (k - 1)) (free form:
acc) before (max F) and after (max BT). Tasks are averaged unweighted within a category, categories
unweighted into the overall row. Option log-likelihoods and greedy decoding are deterministic: each
(task, item) has one transition. Sampled answers (`correctness.sampled`) have one per seed: seed s of a
row is paired with seed s of its reference, every rate is computed per seed (task, category, overall),
and the table's `seed` = all rows are the mean over seeds with the sample sd (ddof 1) in `*_sd` columns,
as Harmon et al. aggregate; each seed's own rows follow. Where answers were extracted from text, each
(task, source) row also gives the share of its answers that could not be extracted and the share its
budget ended (max_new_tokens, or the positions the question left), after and before (its reference's). The matrices (transitions, Y, Y_BT) are seed 0's.

With a margin `delta`, a multiple-choice item counts as correct only where the gold option wins by at
least delta nats, at both times (the margin filter: guessers drop out instead of being corrected for).
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from ..errors import DataError
from ..matrix import ForgettingMatrix

log = logging.getLogger(__name__)

RATE_COLUMNS = ("N", "n00", "n01", "n10", "n11", "acc_before", "acc_after", "F", "BT", "spurious", "F_true",
                "BT_true", "relative_forgetting", "max_F", "max_BT")


def read_seeds(paths: list[str], ids: list[np.ndarray], margin: float | None) -> tuple[np.ndarray, ...]:
    """One run over every shard: each seed's correctness, (seeds, N) floats (1 / 0 / NaN where not scorable);
    which answers could not be extracted and which their budget cut short ((seeds, N) bool each, or None
    where the run did not generate answers itself); and the items' k. A run without sampled answers is one
    seed (`read_correctness`, which also checks the files' example ids)."""
    correct, k, _ = read_correctness(paths, ids, margin)
    if "correct_seeds" not in pq.read_schema(paths[0]).names:
        return correct[None], None, None, k
    seeds, missing, cut = [], [], []
    extracted = True  # answers extracted here (sampled); an imported log says only right or wrong
    for path in paths:
        names = pq.read_schema(path).names
        has_answers = "answers" in names
        extracted &= has_answers and "n_capped" in names
        table = pq.read_table(path, columns=["correct_seeds", *["answers"] * has_answers,
                                             *["n_capped"] * ("n_capped" in names)])
        per_item = table.column("correct_seeds").to_pylist()
        answers = table.column("answers").to_pylist() if has_answers else [None] * len(per_item)
        capped = table.column("n_capped").to_pylist() if "n_capped" in names else [None] * len(per_item)
        width = max((len(v) for v in per_item if v is not None), default=0)
        block = np.full((width, len(per_item)), np.nan)
        unread = np.zeros((width, len(per_item)), dtype=bool)
        short = np.zeros((width, len(per_item)), dtype=bool)
        for i, (values, texts, n_capped) in enumerate(zip(per_item, answers, capped)):
            if values is None:
                continue
            if len(values) != width:
                raise DataError(f"{path}: item {i} has {len(values)} seeds, others {width}; rescore it")
            block[:, i] = values
            if texts is not None:
                unread[:, i] = [a is None for a in texts]
            short[:n_capped or 0, i] = True  # how many seeds, not which: shares are over items and seeds
        seeds.append(block)
        missing.append(unread)
        cut.append(short)
    if len({b.shape[0] for b in seeds}) > 1:
        raise DataError(f"{paths[0]}: its shards hold different numbers of seeds; rescore the run")
    if not extracted:
        return np.concatenate(seeds, axis=1), None, None, k
    return np.concatenate(seeds, axis=1), np.concatenate(missing, axis=1), np.concatenate(cut, axis=1), k


def read_correctness(paths: list[str], ids: list[np.ndarray], margin: float | None) -> tuple[np.ndarray, ...]:
    """(correct as float: 1 / 0 / NaN where not scorable, k, margin) of one run over every shard."""
    correct, ks, margins = [], [], []
    for path, expected in zip(paths, ids):
        names = pq.read_schema(path).names
        if "correct" not in names:
            raise DataError(f"{path}: no column 'correct': the run was scored before correctness was; rescore it")
        table = pq.read_table(path, columns=["example_id", "correct", "margin", "k"])
        if not np.array_equal(table.column("example_id").to_numpy().astype(str), expected):
            raise DataError(f"{path}: its example ids do not match the upstream shard it scores; rescore it")
        correct.append(table.column("correct").to_numpy(zero_copy_only=False).astype(np.float64))
        ks.append(table.column("k").to_numpy(zero_copy_only=False).astype(np.float64))
        margins.append(table.column("margin").to_numpy(zero_copy_only=False).astype(np.float64))
    correct, k, gap = np.concatenate(correct), np.concatenate(ks), np.concatenate(margins)
    return known(correct, k, gap, margin), k, gap


def known(correct: np.ndarray, k: np.ndarray, gap: np.ndarray, margin: float | None) -> np.ndarray:
    """`correct` (1 / 0 / NaN) with the margin filter: a multiple-choice item counts as right only where
    its gold option wins by at least `margin` nats (None: no filter)."""
    correct = np.asarray(correct, dtype=np.float64).copy()
    if margin is not None:
        choice = np.isfinite(correct) & (k >= 2)
        correct[choice] = (correct[choice] == 1) & (gap[choice] >= margin)
    return correct


def transition_codes(before: np.ndarray, after: np.ndarray) -> np.ndarray:
    """2 * before + after (0 = 00, 1 = 01, 2 = 10, 3 = 11), float32, rows = tasks. `before`: one vector for
    every row, or one per row."""
    return (2 * np.atleast_2d(before) + after).astype(np.float32)


def forgetting_matrix(before: np.ndarray, after: np.ndarray) -> np.ndarray:
    """Y: 1 - after where the reference was right, NaN where it was wrong."""
    return np.where(np.atleast_2d(before) == 1, 1 - after, np.nan).astype(np.float32)


def backward_transfer_matrix(before: np.ndarray, after: np.ndarray) -> np.ndarray:
    """Y_BT: after where the reference was wrong, NaN where it was right."""
    return np.where(np.atleast_2d(before) == 0, after, np.nan).astype(np.float32)


def _known_share(acc: np.ndarray, k: np.ndarray) -> np.ndarray:
    """kappa = max(0, (k acc - 1) / (k - 1)) for k-choice items; acc itself for free form (k < 2)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(k < 2, acc, np.maximum(0.0, (k * acc - 1) / np.maximum(k - 1, 1)))


def rates_from_counts(k: np.ndarray, counts: np.ndarray) -> dict[str, float]:
    """Every rate of one (task, group of items) from its transition counts per value of k:
    `counts[j]` = (n00, n01, n10, n11) of the items with k[j] options."""
    counts = np.asarray(counts, dtype=np.int64).reshape(-1, 4)
    n00, n01, n10, n11 = (int(c) for c in counts.sum(axis=0))
    n = n00 + n01 + n10 + n11
    out: dict[str, float] = {"N": n, "n00": n00, "n01": n01, "n10": n10, "n11": n11}
    if n == 0:
        return {**out, **{c: float("nan") for c in RATE_COLUMNS[5:]}}
    acc_b, acc_a = (n10 + n11) / n, (n01 + n11) / n
    f, bt = n10 / n, n01 / n
    if not np.isclose(acc_a - acc_b, bt - f, atol=1e-12):
        raise AssertionError(f"acc_after - acc_before = {acc_a - acc_b} but BT - F = {bt - f}")
    size = counts.sum(axis=1)
    used = size > 0
    k, counts, size = np.asarray(k, dtype=np.float64)[used], counts[used], size[used]
    share = size / n
    group_b = (counts[:, 2] + counts[:, 3]) / size
    group_a = (counts[:, 1] + counts[:, 3]) / size
    with np.errstate(invalid="ignore", divide="ignore"):
        per_group = np.where(k >= 2, (1 - group_b) * (1 - group_a) / np.maximum(k - 1, 1), 0.0)
    spurious = float(share @ per_group)
    return {**out, "acc_before": acc_b, "acc_after": acc_a, "F": f, "BT": bt, "spurious": spurious,
            "F_true": max(0.0, f - spurious), "BT_true": max(0.0, bt - spurious),
            "relative_forgetting": n10 / (n10 + n11) if n10 + n11 else float("nan"),
            "max_F": float(share @ _known_share(group_b, k)), "max_BT": float(share @ _known_share(group_a, k))}


def _counts(before: np.ndarray, after: np.ndarray, group: np.ndarray, n_groups: int) -> np.ndarray:
    """(n_groups, 4) transition counts of one task: column 2 * before + after."""
    code = (2 * before + after).astype(np.int64)
    return np.bincount(group * 4 + code, minlength=n_groups * 4).reshape(n_groups, 4)


def rates(before: np.ndarray, after: np.ndarray, k: np.ndarray) -> dict[str, float]:
    """Every rate of one (task, set of items) from their 0/1 correctness before and after."""
    values, group = np.unique(np.asarray(k), return_inverse=True)
    return rates_from_counts(values, _counts(before, after, group.ravel(), len(values)))


def benchmark_category(source: str, benchmark_categories: dict[str, list[str]]) -> str:
    """The benchmark category of an upstream source: the one with the most specific (longest) pattern
    (a glob) that matches it, whatever the categories' order; else the source itself."""
    import fnmatch

    matches = [(len(p), name) for name, patterns in sorted(benchmark_categories.items()) for p in patterns
               if fnmatch.fnmatchcase(source, p)]
    return max(matches, key=lambda m: m[0])[1] if matches else source


def harmon_levels(frame: pd.DataFrame, benchmark_categories: dict[str, list[str]]) -> pd.DataFrame:
    """Harmon et al.'s aggregation of a row's per-source rates: the unweighted mean over the sources
    (sub-benchmarks) of each benchmark category (`benchmark_category`), the mean over those categories
    (`benchmark_overall`, their OVERALL of a model pair), and the mean of that over the rows of each row
    category (`type_overall`: a post-training type)."""
    numeric = list(RATE_COLUMNS)
    sources = frame[frame["level"] == "source"].copy()
    sources["benchmark"] = [benchmark_category(s, benchmark_categories) for s in sources["source"]]
    per_category = sources.groupby(["task", "category", "benchmark"], sort=False)[numeric].mean().reset_index()
    overall = per_category.groupby(["task", "category"], sort=False)[numeric].mean().reset_index()
    by_type = overall.groupby("category", sort=False)[numeric].mean().reset_index()
    per_category = per_category.rename(columns={"benchmark": "source"}).assign(level="benchmark_category")
    return pd.concat([per_category, overall.assign(level="benchmark_overall", source="all"),
                      by_type.assign(level="type_overall", task="all", source="all")], ignore_index=True)


def rate_table(before: np.ndarray, after: np.ndarray, k: np.ndarray, sources: np.ndarray, tasks: list[str],
               categories: dict[str, str], benchmark_categories: dict[str, list[str]] | None = None) -> pd.DataFrame:
    """Rates per (task, upstream source), per task (all items), per category (mean over its tasks) and
    overall (mean over categories); then Harmon et al.'s levels over the sources (`harmon_levels`). One
    bincount per task over (source, k) groups: no pass per source.
    `before`: one vector for every task, or one per task (each row's reference)."""
    before = np.broadcast_to(np.atleast_2d(before), np.shape(after))
    names, source_index = np.unique(np.asarray(sources), return_inverse=True)
    k_values, k_index = np.unique(np.asarray(k), return_inverse=True)
    group = source_index.ravel() * len(k_values) + k_index.ravel()
    rows = []
    for i, task in enumerate(tasks):
        counts = _counts(before[i], after[i], group, len(names) * len(k_values)).reshape(len(names), len(k_values), 4)
        base = {"task": task, "category": categories.get(task, "")}
        rows.append({"level": "task", **base, "source": "all", **rates_from_counts(k_values, counts.sum(axis=0))})
        for s, source in enumerate(names):
            rows.append({"level": "source", **base, "source": source, **rates_from_counts(k_values, counts[s])})
    frame = pd.DataFrame(rows)
    per_task = frame[frame["level"] == "task"]
    numeric = list(RATE_COLUMNS)
    by_category = per_task.groupby("category", sort=False)[numeric].mean().reset_index()
    by_category.insert(0, "level", "category")
    by_category.insert(1, "task", "all")
    by_category["source"] = "all"
    overall = by_category[numeric].mean().to_frame().T
    overall.insert(0, "level", "overall")
    overall.insert(1, "task", "all")
    overall.insert(2, "category", "all")
    overall["source"] = "all"
    harmon = harmon_levels(frame, benchmark_categories or {})
    return pd.concat([frame, by_category, overall, harmon], ignore_index=True)[
        ["level", "task", "category", "source", *numeric]]


def build(shards: list[str], base_scores: list[str], task_scores: dict[str, list[str]], categories: dict[str, str],
          groups: dict[str, str], margin: float | None, references: dict[str, str] | None = None,
          benchmark_categories: dict[str, list[str]] | None = None):
    """(transition codes, Y, Y_BT as ForgettingMatrix over the scorable items, their k, the rate table).
    Each row is compared with its reference run (default: the base)."""
    ids, sources = [], []
    for shard in shards:
        table = pq.read_table(shard, columns=["example_id", "source"])
        ids.append(table.column("example_id").to_numpy().astype(str))
        sources.append(table.column("source").to_numpy().astype(str))
    base, base_missing, base_capped, k = read_seeds(base_scores, ids, margin)
    base_nll = np.concatenate([pq.read_table(p, columns=["nll"]).column("nll").to_numpy() for p in base_scores])
    items = np.flatnonzero(np.isfinite(base[0]))
    if len(items) == 0:
        raise DataError("the upstream corpus has no item with an answer: nothing to score for correctness")
    tasks = list(task_scores)
    runs = {"base": base[:, items]}
    missing = {"base": None if base_missing is None else base_missing[:, items]}
    capped = {"base": None if base_capped is None else base_capped[:, items]}
    for task in tasks:
        values, unread, short, _ = read_seeds(task_scores[task], ids, margin)
        if not np.isfinite(values[:, items]).all() or np.isfinite(values[0]).sum() != len(items):
            raise DataError(f"task {task!r}: its scores hold correctness for other items than the base's; rescore it")
        if values.shape[0] != base.shape[0]:
            raise DataError(f"task {task!r}: its scores hold {values.shape[0]} sampling seed(s) and the base's "
                            f"{base.shape[0]}: seed s is paired with seed s; rescore them with the same seeds")
        runs[task], missing[task] = values[:, items], None if unread is None else unread[:, items]
        capped[task] = None if short is None else short[:, items]
    references = references or {}
    n_seeds = base.shape[0]
    after = np.stack([runs[t] for t in tasks], axis=1) if tasks else np.zeros((n_seeds, 0, len(items)))
    before = np.stack([runs[references.get(t, "base")] for t in tasks], axis=1) if tasks else after
    k = k[items].astype(np.int16)
    example_ids, item_sources = np.concatenate(ids)[items], np.concatenate(sources)[items]
    labels = (example_ids, item_sources, base_nll[items].astype(np.float32))
    used = {t: categories[t] for t in tasks}
    used_groups = {c: groups[c] for c in sorted(set(used.values()))}

    def matrix(values, statistic):
        return ForgettingMatrix(values, tasks, *labels, used, used_groups, statistic)

    table = seed_table([rate_table(before[s], after[s], k, item_sources, tasks, used, benchmark_categories)
                        for s in range(n_seeds)])
    for name, shares in (("unextracted", missing), ("capped", capped)):
        if any(m is not None for m in shares.values()):
            table = with_answer_shares(table, name, {t: shares[t] for t in tasks},
                                       {t: shares[references.get(t, "base")] for t in tasks}, item_sources)
    return (matrix(transition_codes(before[0], after[0]), "transition"),
            matrix(forgetting_matrix(before[0], after[0]), "forgotten_1to0"),
            matrix(backward_transfer_matrix(before[0], after[0]), "transferred_0to1"), k, table)


KEYS = ["level", "task", "category", "source"]
SD_COLUMNS = ("F", "BT", "F_true", "BT_true", "acc_before", "acc_after")


def seed_table(tables: list[pd.DataFrame]) -> pd.DataFrame:
    """One rate table per seed -> `seed` = all rows (the mean over seeds; with several seeds, the sd of each
    rate in `*_sd`), then each seed's rows. One seed: its table, `seed` all."""
    if len(tables) == 1:
        return tables[0].assign(seed="all")
    stacked = pd.concat([t.assign(seed=str(s)) for s, t in enumerate(tables)], ignore_index=True)
    grouped = stacked.groupby(KEYS, sort=False)[list(RATE_COLUMNS)]
    mean = grouped.mean()
    sd = grouped.std(ddof=1)[list(SD_COLUMNS)].add_suffix("_sd")
    summary = mean.join(sd).reset_index().assign(seed="all")
    return pd.concat([summary, stacked], ignore_index=True)


def with_answer_shares(table: pd.DataFrame, name: str, after: dict[str, np.ndarray], before: dict[str, np.ndarray],
                       sources: np.ndarray) -> pd.DataFrame:
    """A share of the generated answers (items x seeds), per (task, source) and per task, after (the row's run)
    and before (its reference's), on the rows of `seed` all, as `{name}_after` / `{name}_before`:
    `unextracted` (no answer could be read) or `capped` (the budget ended it); NaN for a run that did not
    generate answers itself (an imported log)."""
    out = table.copy()
    out[f"{name}_after"], out[f"{name}_before"] = np.nan, np.nan
    rows = (out["seed"] == "all") & out["level"].isin(["task", "source"])
    for index in np.flatnonzero(rows.to_numpy()):
        task, source = out.at[index, "task"], out.at[index, "source"]
        at = np.ones(len(sources), dtype=bool) if source == "all" else sources == source
        for column, shares in ((f"{name}_after", after[task]), (f"{name}_before", before[task])):
            if shares is not None:  # an imported log says only right or wrong
                out.at[index, column] = float(shares[:, at].mean())
    return out


def transitions_command(settings: dict, shards: list[str], outputs: dict) -> dict:
    """`forgetmap transitions`: the settings name every run's score files (forgetmap.plan)."""
    import pyarrow as pa

    from .. import plots
    from ..io import atomic_path

    tasks = settings["tasks"]
    codes, y, y_bt, k, table = build(shards, settings["base_scores"], {t: settings["task_scores"][t] for t in tasks},
                                     settings["categories"], settings["groups"], settings["margin"],
                                     settings.get("references"), settings.get("benchmark_categories"))
    meta, item_k = {"model": settings["model"], "margin": settings["margin"]}, {"k": pa.array(k, pa.int16())}
    for matrix, key in ((codes, "transitions"), (y, "forgetting"), (y_bt, "backward_transfer")):
        matrix.write(outputs[key], meta, item_k)
    with atomic_path(outputs["rates"]) as tmp:
        table.to_csv(tmp, sep="\t", index=False, float_format="%.6g")
    plots.transition_rates(table, outputs["rates_figure"])
    plots.transition_heatmap(codes, outputs["heatmap"])
    n_right = int(np.isfinite(y.values[0]).sum()) if len(tasks) else 0
    if n_right == 0:
        log.warning("the base model answers no item correctly: Y (1->0) is empty, only backward transfer is defined")
    overall = table[(table["level"] == "overall") & (table["seed"] == "all")].iloc[0]
    return {"items": int(codes.shape[1]), "base_correct": n_right, "F": float(overall["F"]),
            "F_true": float(overall["F_true"]), "BT": float(overall["BT"]), "BT_true": float(overall["BT_true"])}
