"""Figures: forgetting heatmaps, the singular-value spectrum, low-rank components.

Conventions follow the paper (§3.3): a diverging colormap centred at 0 (red = forgotten), rows
grouped by task category (categories in alphabetical order, config order within), columns a fixed
random subset of at most 4,000 upstream examples grouped by source (the paper's 10,000 would exceed the
figure's pixel width), row-mean and column-mean strips.
"""

from __future__ import annotations

import numpy as np


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(style="white", context="paper")
    return plt


def row_order(categories: list[str]) -> np.ndarray:
    """Tasks grouped by category: categories alphabetically, config order within a category."""
    return np.array(sorted(range(len(categories)), key=lambda i: (categories[i], i)), dtype=int)


def column_order(sources: np.ndarray, max_columns: int = 4_000, seed: int = 0) -> np.ndarray:
    """A sorted seeded subset of at most `max_columns` examples, grouped by source. The paper draws
    10,000; 4,000 is still more columns than a figure has pixels, at a fraction of the memory."""
    n = len(sources)
    chosen = np.arange(n) if n <= max_columns else np.sort(
        np.random.default_rng(seed).choice(n, max_columns, replace=False))
    return chosen[np.argsort(np.asarray(sources)[chosen], kind="stable")]


def _segments(labels: np.ndarray) -> list[tuple[str, int, int]]:
    out, start = [], 0
    for i in range(1, len(labels) + 1):
        if i == len(labels) or labels[i] != labels[start]:
            out.append((str(labels[start]), start, i))
            start = i
    return out


def _image(ax, values, limit):
    """A matrix as an image with cell (i, j) spanning [j, j+1] x [i, i+1], row 0 at the top.

    Coloured here to 8-bit RGBA (NaN white), so matplotlib resamples bytes rather than float64
    data at the output resolution: as fast and small for 10,000 columns as for 10. Returns the
    colour mapping for a colorbar."""
    import matplotlib as mpl

    mapping = mpl.cm.ScalarMappable(mpl.colors.Normalize(-limit, limit), "bwr")
    rgba = mapping.to_rgba(np.nan_to_num(values, nan=0.0), bytes=True)
    rows, cols = values.shape
    ax.imshow(rgba, aspect="auto", interpolation="nearest", extent=(0, cols, rows, 0))
    return mapping


def color_limit(z: np.ndarray) -> float:
    """Symmetric colour range: the 98th percentile of |Z| (the paper fixes ±0.5 for OLMo)."""
    finite = np.abs(z[np.isfinite(z)])
    return float(max(np.percentile(finite, 98), 1e-3)) if finite.size else 1.0


def heatmap(z, tasks, categories, sources, path, title="Forgetting Z = NLL after − NLL before", limit=None):
    """Z with rows grouped by category and columns by source, plus row- and column-mean strips."""
    plt = _pyplot()
    rows, cols = row_order(list(categories)), column_order(np.asarray(sources))
    shown = np.asarray(z)[np.ix_(rows, cols)]
    limit = limit or color_limit(shown)
    fig = plt.figure(figsize=(12, min(16.0, 2.5 + 0.18 * len(rows))))
    grid = fig.add_gridspec(2, 3, width_ratios=[40, 1.2, 0.6], height_ratios=[1.2, 12], wspace=0.05, hspace=0.05)
    main = fig.add_subplot(grid[1, 0])
    top = fig.add_subplot(grid[0, 0], sharex=main)
    side = fig.add_subplot(grid[1, 1], sharey=main)
    bar = fig.add_subplot(grid[1, 2])
    image = _image(main, shown, limit)
    with np.errstate(invalid="ignore"):
        _image(top, np.nanmean(shown, axis=0)[None, :], limit)
        _image(side, np.nanmean(shown, axis=1)[:, None], limit)
    main.set_yticks(np.arange(len(rows)) + 0.5, [tasks[i] for i in rows], fontsize=7 if len(rows) <= 40 else 4)
    src = np.asarray(sources)[cols]
    ticks = [(a + b) / 2 for _, a, b in _segments(src)]
    main.set_xticks(ticks, [name for name, _, _ in _segments(src)], rotation=30, fontsize=7)
    for _, _, b in _segments(src)[:-1]:
        main.axvline(b, color="k", lw=0.4)
    cats = np.asarray(categories)[rows]
    for _, _, b in _segments(cats)[:-1]:
        main.axhline(b, color="k", lw=0.6)
    top.set_axis_off()
    side.set_axis_off()
    top.set_title(title, fontsize=9)
    fig.colorbar(image, cax=bar, label="Δ NLL (nats/token)")
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def spectrum(singular_values, r2, path):
    """Singular values as bars with cumulative R² as a line."""
    plt = _pyplot()
    ranks = np.arange(1, len(r2) + 1)
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.bar(ranks, singular_values[:len(r2)], color="#4c72b0")
    ax.set_xlabel("rank r")
    ax.set_ylabel("singular value")
    twin = ax.twinx()
    twin.plot(ranks, r2, color="#c44e52", marker="o", ms=3)
    twin.set_ylim(0, 1.02)
    twin.set_ylabel("R²(r)", color="#c44e52")
    ax.set_title("Spectrum of Z and R² of rank-r truncations", fontsize=9)
    fig.savefig(path, dpi=150, bbox_inches="tight")
    plt.close(fig)


def components(parts, tasks, categories, sources, path):
    """Each rank-1 component s_k u_k v_kᵀ (given on the plotted columns, whose `sources` are grouped)
    as its own heatmap."""
    plt = _pyplot()
    rows = row_order(list(categories))
    panel = min(4.0, 0.6 + 0.12 * len(rows))
    fig, axes = plt.subplots(len(parts), 1, figsize=(10, 1.6 + len(parts) * panel), squeeze=False)
    for k, (ax, part) in enumerate(zip(axes[:, 0], parts)):
        shown = part[rows]
        _image(ax, shown, color_limit(shown))
        if len(rows) <= 40:
            ax.set_yticks(np.arange(len(rows)) + 0.5, [tasks[i] for i in rows], fontsize=5)
        else:
            ax.set_yticks([])
        segments = _segments(np.asarray(sources))
        ax.set_xticks([(a + b) / 2 for _, a, b in segments], [name for name, _, _ in segments], fontsize=6)
        for _, _, b in segments[:-1]:
            ax.axvline(b, color="k", lw=0.4)
        ax.set_title(f"component {k + 1}", fontsize=8)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def similarity_scatter(z, similarity, xlabel, stats, path, max_points: int = 200_000):
    """Z against a similarity over (task, example) pairs, as a hexbin density."""
    plt = _pyplot()
    z, s = np.asarray(z).ravel(), np.asarray(similarity).ravel()
    keep = np.flatnonzero(np.isfinite(z) & np.isfinite(s))
    if len(keep) > max_points:
        keep = np.sort(np.random.default_rng(0).choice(keep, max_points, replace=False))
    fig, ax = plt.subplots(figsize=(5, 4))
    ax.hexbin(s[keep], z[keep], gridsize=60, bins="log", cmap="viridis", mincnt=1)
    ax.axhline(0, color="k", lw=0.5)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel("Z (Δ NLL)")
    ax.set_title(f"Pearson {stats['pearson']:.3f}, Spearman {stats['spearman']:.3f}, n = {int(stats['n'])}",
                 fontsize=9)
    fig.savefig(path, dpi=150, bbox_inches="tight")
    plt.close(fig)


def task_correlations(corr, tasks, categories, path):
    """Task x task correlation of forgetting rows (column-centred), grouped by category."""
    plt = _pyplot()
    rows = row_order(list(categories))
    shown = np.asarray(corr)[np.ix_(rows, rows)]
    fig, ax = plt.subplots(figsize=(2 + 0.28 * len(rows), 1.5 + 0.28 * len(rows)))
    image = _image(ax, shown, 1.0)
    labels = [tasks[i] for i in rows]
    ax.set_xticks(np.arange(len(rows)) + 0.5, labels, rotation=90, fontsize=7)
    ax.set_yticks(np.arange(len(rows)) + 0.5, labels, fontsize=7)
    for _, _, b in _segments(np.asarray(categories)[rows])[:-1]:
        ax.axhline(b, color="k", lw=0.8)
        ax.axvline(b, color="k", lw=0.8)
    fig.colorbar(image, ax=ax, label="Pearson (column-centred Z rows)")
    ax.set_title("Which tasks forget the same examples", fontsize=9)
    fig.savefig(path, dpi=150, bbox_inches="tight")
    plt.close(fig)


def prediction_scores(scores, path, metrics=("rmse", "roc_auc", "top_q_f1", "precision_at_b")):
    """Methods compared per split: one panel per metric, mean ± std over seeds."""
    plt = _pyplot()
    splits = list(dict.fromkeys(scores["split"]))
    fig, axes = plt.subplots(len(splits), len(metrics), figsize=(3.2 * len(metrics), 2.6 * len(splits)),
                             squeeze=False)
    for r, split in enumerate(splits):
        for c, metric in enumerate(metrics):
            ax = axes[r, c]
            part = scores[(scores["split"] == split) & (scores["metric"] == metric)]
            ax.bar(part["method"], part["mean"], yerr=part["std"], color="#4c72b0", capsize=2)
            ax.set_title(f"{split}: {metric}", fontsize=8)
            ax.tick_params(axis="x", labelrotation=45, labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=150, bbox_inches="tight")
    plt.close(fig)


def _dots_by_arm(ax, frame, arms, column):
    """One column of dots per arm (each (task, seed) a dot, spread a little) with a bar at the mean."""
    for i, arm in enumerate(arms):
        values = frame.loc[frame["arm"] == arm, column].to_numpy()
        ax.scatter(np.full(len(values), i) + np.linspace(-0.15, 0.15, len(values)), values, s=10, alpha=0.6)
        ax.hlines(values.mean(), i - 0.3, i + 0.3, color="black")


def mitigation_forgetting(frame, tests, path):
    """Mean held-out forgetting per arm, with each (task, seed) as a dot and the interval of the paired
    difference to `none` (Hodges–Lehmann, bootstrap over tasks) in the label."""
    plt = _pyplot()
    arms = list(dict.fromkeys(frame["arm"]))
    fig, ax = plt.subplots(figsize=(1.2 + 0.9 * len(arms), 3.6))
    _dots_by_arm(ax, frame, arms, "heldout_forgetting")
    labels = []
    tests = tests[tests["statistic"] == "heldout_forgetting"] if len(tests) else tests
    versus_none = tests[tests["baseline"] == "none"].set_index("arm") if len(tests) else None
    for arm in arms:
        if versus_none is not None and arm in versus_none.index:
            row = versus_none.loc[arm]
            labels.append(f"{arm}\nΔ {row['hodges_lehmann']:+.3f}\n[{row['ci_low']:+.3f}, {row['ci_high']:+.3f}]\n"
                          f"p={row['p_value']:.2g}")
        else:
            labels.append(arm)
    ax.set_xticks(range(len(arms)), labels, fontsize=7)
    ax.axhline(0, color="grey", lw=0.5)
    ax.set_ylabel("held-out forgetting (mean ΔNLL, nats/token)")
    ax.set_title("Forgetting on never-replayed upstream examples", fontsize=9)
    fig.savefig(path, dpi=150, bbox_inches="tight")
    plt.close(fig)


def mitigation_paired(frame, pairs, path):
    """Per-task paired slopes from each comparison arm to the arm it is compared with (mean over seeds)."""
    plt = _pyplot()
    pairs = [p for p in pairs if p[1] != "none"] or pairs
    fig, axes = plt.subplots(1, max(1, len(pairs)), figsize=(2.6 * max(1, len(pairs)), 3.4), squeeze=False)
    means = frame.groupby(["arm", "task"])["heldout_forgetting"].mean()
    for ax, (arm, baseline) in zip(axes[0], pairs):
        for task in sorted(frame["task"].unique()):
            a, b = means.get((baseline, task), np.nan), means.get((arm, task), np.nan)
            ax.plot([0, 1], [a, b], marker="o", color="tab:green" if b < a else "tab:red", alpha=0.7)
        ax.set_xticks([0, 1], [baseline, arm])
        ax.set_title(f"{arm} vs {baseline}", fontsize=8)
    axes[0][0].set_ylabel("held-out forgetting per task")
    fig.savefig(path, dpi=150, bbox_inches="tight")
    plt.close(fig)


def mitigation_tradeoff(frame, path):
    """Target loss against held-out forgetting, one point per arm (mean over tasks and seeds)."""
    plt = _pyplot()
    means = frame.groupby("arm", sort=False)[["heldout_forgetting", "target_nll"]].mean()
    fig, ax = plt.subplots(figsize=(4.2, 3.4))
    ax.scatter(means["heldout_forgetting"], means["target_nll"])
    for arm, row in means.iterrows():
        ax.annotate(arm, (row["heldout_forgetting"], row["target_nll"]), fontsize=7, xytext=(3, 3),
                    textcoords="offset points")
    ax.set_xlabel("held-out forgetting (mean ΔNLL)")
    ax.set_ylabel("target validation NLL")
    ax.set_title("Learning vs forgetting (lower left is better)", fontsize=9)
    fig.savefig(path, dpi=150, bbox_inches="tight")
    plt.close(fig)


def mitigation_fronts(frame, points, path):
    """Learning against forgetting, one point per (arm, knob value, α) (mean over tasks and seeds): each
    arm's points in its colour, its Pareto front as a line, the fine-tunes as trained filled and their
    interpolations toward the base hollow; plain fine-tuning's learning as a dotted line."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    arms = list(dict.fromkeys(points["arm"]))
    palette = plt.get_cmap("tab10" if len(arms) <= 10 else "tab20")
    for k, (arm, rows) in enumerate(points.groupby("arm", sort=False)):
        colour = palette(k % palette.N)
        trained = rows["alpha"] == 1.0
        ax.scatter(rows.loc[trained, "heldout_forgetting"], rows.loc[trained, "target_nll"], color=colour, s=22,
                   label=arm, zorder=3)
        ax.scatter(rows.loc[~trained, "heldout_forgetting"], rows.loc[~trained, "target_nll"], facecolors="none",
                   edgecolors=colour, s=22, zorder=3)
        front = rows[rows["on_arm_front"]].sort_values("target_nll")
        ax.plot(front["heldout_forgetting"], front["target_nll"], color=colour, lw=1, alpha=0.8)
    plain = points[(points["arm"] == "none") & (points["alpha"] == 1.0)]
    if len(plain):
        ax.axhline(float(plain["target_nll"].iloc[0]), color="grey", lw=0.6, ls=":")
    ax.set_xlabel("held-out forgetting (mean ΔNLL)")
    ax.set_ylabel("target validation NLL (lower: learned more)")
    ax.set_title("The arena: learning vs forgetting (lower left is better;\nhollow: interpolations toward the base)",
                 fontsize=9)
    ax.legend(fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.savefig(path, dpi=150, bbox_inches="tight")
    plt.close(fig)


def mitigation_per_token(frame, path):
    """Held-out forgetting removed per 1,000 tokens trained beyond plain fine-tuning, per arm that trains
    more tokens (replay): mean over tasks and seeds, each (task, seed) a dot."""
    plt = _pyplot()
    costly = frame[frame["reduction_per_extra_ktoken"].notna()]
    arms = list(dict.fromkeys(costly["arm"]))
    fig, ax = plt.subplots(figsize=(1.2 + 0.9 * max(1, len(arms)), 3.4))
    _dots_by_arm(ax, costly, arms, "reduction_per_extra_ktoken")
    ax.set_xticks(range(len(arms)), arms, fontsize=7, rotation=30)
    ax.axhline(0, color="grey", lw=0.5)
    ax.set_ylabel("forgetting removed per 1k extra tokens (nats)")
    ax.set_title("What each replayed token buys", fontsize=9)
    fig.savefig(path, dpi=150, bbox_inches="tight")
    plt.close(fig)


TRANSITION_COLOURS = ("#d9d9d9", "#4c72b0", "#c44e52", "#ffffff")  # 0->0, 0->1, 1->0, 1->1


def transition_heatmap(codes, path):
    """Every (task, item) transition of correctness (a ForgettingMatrix of codes 2 * before + after):
    red where the item is forgotten (1->0, the 1s of Y), blue where it is gained (0->1, the 1s of
    Y_BT); rows grouped by category, items by source and, within a source, by base correctness."""
    from matplotlib.patches import Patch

    plt = _pyplot()
    values = codes.values
    rows = row_order(codes.task_categories())
    cols = column_order(codes.sources)
    base = values[0, cols] >= 2  # the base's correctness is the same in every row
    cols = cols[np.lexsort((~base, np.asarray(codes.sources)[cols]))]
    shown = values[np.ix_(rows, cols)].astype(int)
    rgba = np.array([[int(c[i:i + 2], 16) for i in (1, 3, 5)] + [255] for c in TRANSITION_COLOURS], np.uint8)[shown]
    fig, ax = plt.subplots(figsize=(12, min(16.0, 2.0 + 0.18 * len(rows))))
    ax.imshow(rgba, aspect="auto", interpolation="nearest", extent=(0, len(cols), len(rows), 0))
    ax.set_yticks(np.arange(len(rows)) + 0.5, [codes.tasks[i] for i in rows], fontsize=7 if len(rows) <= 40 else 4)
    src = np.asarray(codes.sources)[cols]
    segments = _segments(src)
    ax.set_xticks([(a + b) / 2 for _, a, b in segments], [name for name, _, _ in segments], fontsize=7)
    for _, _, b in segments[:-1]:
        ax.axvline(b, color="k", lw=0.4)
    for _, _, b in _segments(np.asarray(codes.task_categories())[rows])[:-1]:
        ax.axhline(b, color="k", lw=0.6)
    ax.legend([Patch(facecolor=c, edgecolor="#999999") for c in TRANSITION_COLOURS],
              ["0→0", "0→1 (backward transfer)", "1→0 (forgotten: Y = 1)", "1→1"],
              loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=4, fontsize=7, frameon=False)
    ax.set_title(f"Sample-wise correctness, base → fine-tuned ({len(cols)} items; Y is the red share of the "
                 f"base-correct items)", fontsize=9)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def transition_rates(table, path):
    """Per row: forgetting F and backward transfer BT, raw and chance-adjusted, side by side (the mean over
    sampling seeds, with their sd as error bars where there are several); and, as Harmon et al. plot
    post-training types, each row's chance-adjusted forgetting against its backward transfer, coloured by
    its category."""
    plt = _pyplot()
    if "seed" in table:
        table = table[table["seed"] == "all"]
    tasks = table[table["level"] == "task"].sort_values(["category", "task"], kind="stable")
    y = np.arange(len(tasks))
    benchmarks = table[table["level"] == "benchmark_category"]
    by_benchmark = benchmarks.pivot_table(index="task", columns="source", values="F_true", sort=False) \
        if "level" in table and len(benchmarks) else None
    panels = 4 if by_benchmark is not None and by_benchmark.shape[1] > 1 else 3
    fig, axes = plt.subplots(1, panels, figsize=(14 + 4 * (panels - 3), 1.6 + 0.28 * max(len(tasks), 8)),
                             gridspec_kw={"width_ratios": [1, 1, 1.2, 1.2][:panels]})
    for ax, (raw, adjusted, name, colour) in zip(axes, (("F", "F_true", "forgetting 1→0", "#c44e52"),
                                                         ("BT", "BT_true", "backward transfer 0→1", "#4c72b0"))):
        error = {"xerr": tasks[f"{adjusted}_sd"]} if f"{adjusted}_sd" in tasks else {}
        ax.barh(y - 0.2, tasks[raw], height=0.4, color=colour, alpha=0.45, label=f"{raw} (raw)")
        ax.barh(y + 0.2, tasks[adjusted], height=0.4, color=colour, label=f"{adjusted} (chance-adjusted)", **error)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("share of scored items")
        ax.legend(fontsize=7, loc="lower right")
        ax.set_yticks(y, [f"{t} ({c})" for t, c in zip(tasks["task"], tasks["category"])] if ax is axes[0] else [],
                      fontsize=7)
        ax.set_ylim(len(tasks) - 0.5, -0.5)
    ax = axes[2]
    for i, (category, rows) in enumerate(tasks.groupby("category", sort=True)):
        error = {"xerr": rows["BT_true_sd"], "yerr": rows["F_true_sd"]} if "F_true_sd" in rows else {}
        ax.errorbar(rows["BT_true"], rows["F_true"], fmt="o", ms=5, color=f"C{i}", label=category, capsize=2, **error)
        for _, row in rows.iterrows():
            ax.annotate(row["task"], (row["BT_true"], row["F_true"]), fontsize=6, xytext=(3, 3),
                        textcoords="offset points")
    right = float(np.nanmax([tasks["BT_true"].max(), 0.01])) * 1.25  # each axis its own range: BT is often
    top = float(np.nanmax([tasks["F_true"].max(), 0.01])) * 1.15    # tiny beside F; the dashed line is F = BT
    ax.plot([0, max(right, top)], [0, max(right, top)], color="0.7", lw=0.8, ls="--")
    ax.set_xlim(0, right)
    ax.set_ylim(0, top)
    ax.set_xlabel("backward transfer BT_true (0→1)")
    ax.set_ylabel("forgetting F_true (1→0)")
    ax.set_title("forgetting against backward transfer, by category", fontsize=9)
    ax.legend(fontsize=7, loc="upper right", title="category", title_fontsize=7)
    if panels == 4:  # Harmon et al.'s view: each row's forgetting per benchmark category
        grid = by_benchmark.reindex(tasks["task"])
        ax = axes[3]
        image = ax.imshow(grid.to_numpy(dtype=float), aspect="auto", cmap="Reds", vmin=0)
        ax.set_xticks(np.arange(grid.shape[1]), grid.columns, rotation=60, ha="right", fontsize=6)
        ax.set_yticks(y, [])
        ax.set_title("F_true per benchmark category", fontsize=9)
        fig.colorbar(image, ax=ax, fraction=0.05)
    fig.tight_layout()
    fig.savefig(path, dpi=150, bbox_inches="tight")
    plt.close(fig)


def binary_ranks(table, point_biserial, path):
    """Logistic MF of Y by rank (deviance explained, F1 at 0.5) beside the SVD R² of Z."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.4))
    for column, label, colour in (("deviance_explained", "Y: logistic MF deviance explained", "#c44e52"),
                                  ("f1", "Y: logistic MF F1 at 0.5", "#dd8452"),
                                  ("z_r2", "Z: SVD R²", "#4c72b0"),
                                  ("z_r2_base_correct_items", "Z on Y's items: SVD R²", "#8172b3")):
        if column in table and table[column].notna().any():
            ax.plot(table["rank"], table[column], marker="o", ms=3, label=label, color=colour)
    ax.set_xlabel("rank r")
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=7)
    title = (f"Low-rank fit of the 1→0 matrix Y and of Z (point-biserial r(Z, Y) = {point_biserial:.3f})"
             if np.isfinite(point_biserial) else "Low-rank fit of the 1→0 matrix Y")
    ax.set_title(title, fontsize=8)
    fig.savefig(path, dpi=150, bbox_inches="tight")
    plt.close(fig)


def probe_strategies(table, coverage, path):
    """RMSE and top-q F1 by k for each probe strategy, and the conformal intervals' coverage by k."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.2))
    for ax, metric in zip(axes[:2], ("rmse", "top_q_f1")):
        part = table[table["metric"] == metric]
        for strategy, rows in part.groupby("strategy", sort=False):
            ax.plot(rows["k"], rows["mean"], marker="o", ms=3, label=strategy)
        ax.set_xlabel("measured examples k")
        ax.set_title(f"{metric} by probe strategy", fontsize=8)
        ax.legend(fontsize=7)
    ax = axes[2]
    for (strategy, level), rows in coverage.groupby(["strategy", "level"], sort=False):
        ax.plot(rows["k"], rows["coverage"], marker="o", ms=3, label=f"{strategy}, {level:g}")
        ax.axhline(level, color="grey", lw=0.5, ls="--")
    ax.set_xlabel("measured examples k")
    ax.set_title("conformal interval coverage (dashed: nominal)", fontsize=8)
    if len(coverage):
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=150, bbox_inches="tight")
    plt.close(fig)
