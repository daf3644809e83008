"""How forgetting relates to similarity (paper §4): semantic, gradient, and between tasks.

A similarity matrix S (tasks x examples, the shape of Z) is compared with Z by Pearson and Spearman
correlation over all (task, example) pairs, as the paper does, and within each task. Pairs where
either value is NaN are left out. Everything is vectorised: the cost grows linearly with N.
"""

from __future__ import annotations

import logging
import time
import warnings

import numpy as np
import pandas as pd
from scipy.stats import rankdata

log = logging.getLogger(__name__)


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    a = a - a.mean()
    b = b - b.mean()
    denom = np.sqrt((a * a).sum() * (b * b).sum())
    return float((a * b).sum() / denom) if denom > 0 else float("nan")


def _pair(z: np.ndarray, s: np.ndarray) -> tuple[float, float, int]:
    keep = np.isfinite(z) & np.isfinite(s)
    a, b = z[keep].astype(np.float64), s[keep].astype(np.float64)
    if len(a) < 3:
        return float("nan"), float("nan"), len(a)
    return _pearson(a, b), _pearson(rankdata(a), rankdata(b)), len(a)


def pair_correlations(z: np.ndarray, s: np.ndarray, tasks: list[str]) -> pd.DataFrame:
    """Pearson and Spearman of Z against S over all pairs (scope `all`) and per task.

    A constant row (or similarity) has no correlation: NaN, never a number made up.
    """
    if z.shape != s.shape:
        raise ValueError(f"Z has shape {z.shape} but the similarity matrix {s.shape}")
    rows = [{"scope": "all", **dict(zip(("pearson", "spearman", "n"), _pair(z.ravel(), s.ravel())))}]
    for i, task in enumerate(tasks):
        rows.append({"scope": task, **dict(zip(("pearson", "spearman", "n"), _pair(z[i], s[i])))})
    return pd.DataFrame(rows, columns=["scope", "pearson", "spearman", "n"])


def _row_correlation(z: np.ndarray) -> np.ndarray:
    """Pearson correlation between rows over the columns finite in every row (NaN for constant rows)."""
    z = z[:, np.isfinite(z).all(axis=0)].astype(np.float64)
    centred = z - z.mean(axis=1, keepdims=True)
    norms = np.sqrt((centred ** 2).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return (centred @ centred.T) / np.outer(norms, norms)


def _pairwise_correlation(z: np.ndarray) -> np.ndarray:
    """Pearson correlation between rows, each pair over the columns finite in both (a fractional map's measured
    cells); NaN for a pair with fewer than 3 such columns or a constant part."""
    finite = np.isfinite(z)
    w = finite.astype(np.float64)
    x = np.where(finite, z, 0.0).astype(np.float64)
    n = w @ w.T
    sx = x @ w.T  # [i, j]: row i's sum over the columns both rows have
    sxx = (x * x) @ w.T
    sxy = x @ x.T
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (n * sxy - sx * sx.T) / np.sqrt((n * sxx - sx ** 2) * (n * sxx.T - sx.T ** 2))
    return np.where(n >= 3, r, np.nan)


def task_correlations(z: np.ndarray, pairwise: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """M x M row correlations of Z, raw and after removing each example's mean over tasks (what a
    task shares with its category beyond what every fine-tune does); `pairwise`: each pair over the
    columns finite in both (a fractional map's measured cells), else over those finite in every row."""
    correlation = _pairwise_correlation if pairwise else _row_correlation
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an example no row measured: its mean is NaN
        centred = z - np.nanmean(z, axis=0, keepdims=True)
    return correlation(z), correlation(centred)


def cross_task(z: np.ndarray, tasks: list[str], categories: list[str],
               correlations: tuple[np.ndarray, np.ndarray] | None = None) -> pd.DataFrame:
    """Every pair of tasks: Pearson correlation of their rows, raw and column-centred
    (`correlations` from `task_correlations`, computed here if not given)."""
    raw, centred = correlations if correlations is not None else task_correlations(z)
    i, j = np.triu_indices(len(tasks), k=1)
    return pd.DataFrame({"task_a": np.asarray(tasks)[i], "task_b": np.asarray(tasks)[j],
                         "category_a": np.asarray(categories)[i], "category_b": np.asarray(categories)[j],
                         "pearson": raw[i, j], "pearson_column_centred": centred[i, j]})


def category_summary(pairs: pd.DataFrame, permutations: int = 10000, seed: int = 0) -> pd.DataFrame:
    """Mean pair correlation within and across categories, and their difference with a one-sided
    p-value against shuffling the category labels over the tasks (`n`: permutations): whether rows of a
    category correlate more than the same number of task pairs drawn without regard to category."""
    same = (pairs["category_a"] == pairs["category_b"]).to_numpy()
    columns = ("pearson", "pearson_column_centred")
    within, across = ({"pairs": name, "n": int(mask.sum()), **pairs.loc[mask, list(columns)].mean().to_dict(),
                       "p_value": np.nan} for name, mask in (("within category", same), ("across categories", ~same)))
    difference = {"pairs": "within - across", "n": permutations, **{c: within[c] - across[c] for c in columns},
                  "p_value": _label_permutation_p(pairs, "pearson_column_centred", permutations, seed)
                  if same.any() and (~same).any() else np.nan}
    return pd.DataFrame([within, across, difference])


def _label_permutation_p(pairs: pd.DataFrame, column: str, permutations: int, seed: int) -> float:
    """Share of category labelings (shuffled over the tasks) whose within - across mean of `column` is
    at least the observed one, the observed labeling counted once."""
    label = dict(zip(pairs["task_a"], pairs["category_a"])) | dict(zip(pairs["task_b"], pairs["category_b"]))
    position = {task: k for k, task in enumerate(label)}
    a, b = pairs["task_a"].map(position).to_numpy(), pairs["task_b"].map(position).to_numpy()
    _, categories = np.unique(list(label.values()), return_inverse=True)
    rng = np.random.default_rng(seed)
    labelings = np.stack([categories, *(rng.permutation(categories) for _ in range(permutations))])
    values = pairs[column].to_numpy(dtype=np.float64)
    finite = np.isfinite(values)  # a constant row correlates with nothing (NaN), as in the means
    same = labelings[:, a] == labelings[:, b]
    within, across = same & finite, ~same & finite
    values = np.where(finite, values, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        gap = (within @ values) / within.sum(1) - (across @ values) / across.sum(1)
    return float(np.sum(gap[1:] >= gap[0] - 1e-12) + 1) / (1 + permutations)


def cosine_similarity(tasks: np.ndarray, examples: np.ndarray) -> np.ndarray:
    """Cosine between each task vector and each example vector (zero vectors give 0, as nan_to_num)."""
    def unit(x):
        norm = np.linalg.norm(x, axis=1, keepdims=True)
        return np.divide(x, norm, out=np.zeros_like(x, dtype=np.float64), where=norm > 0)

    return (unit(tasks.astype(np.float64)) @ unit(examples.astype(np.float64)).T).astype(np.float32)


# ------------------------------------------------------------------------------------------------
# the three analyses as the workflow runs them: each writes a TSV and a figure into `out_dir`

def matrix_and_upstream(matrix_path, shard_paths):
    """The matrix and the upstream shards' rows, refused where they are not the same examples in the same order."""
    from .errors import DataError
    from .matrix import ForgettingMatrix

    matrix = ForgettingMatrix.read(matrix_path)
    upstream = pd.concat([pd.read_parquet(p) for p in shard_paths], ignore_index=True)
    if upstream["example_id"].astype(str).tolist() != matrix.example_ids.tolist():
        raise DataError(f"{matrix_path}: its examples are not those of the upstream shards; rebuild the matrix")
    return matrix, upstream


def _write(frame: pd.DataFrame, path) -> None:
    from .io import atomic_path

    with atomic_path(path) as tmp:
        frame.to_csv(tmp, sep="\t", index=False, float_format="%.6g")


def semantic_analysis(matrix_path, shard_paths, task_paths: dict[str, str], out_tsv, out_png,
                      batch_size: int = 64, max_task_examples: int | None = None, device: str = "cpu",
                      out_npy=None) -> dict:
    """Cosine between each task's mean MiniLM embedding and each upstream example's, against Z;
    the similarity matrix itself (tasks x examples, float32) goes to `out_npy` for prediction."""
    from . import plots
    from .embed import embed, example_texts

    matrix, upstream = matrix_and_upstream(matrix_path, shard_paths)
    examples = embed(example_texts(upstream), batch_size, device=device)
    similarity = task_similarity(task_paths, matrix.tasks, examples, batch_size, max_task_examples, device)
    if out_npy is not None:
        from .io import atomic_path

        with atomic_path(out_npy) as tmp:
            with open(tmp, "wb") as handle:
                np.save(handle, similarity)
    z = matrix.measured_values()  # a fractional map's measured cells alone
    table = pair_correlations(z, similarity, matrix.tasks).assign(reads=matrix.reads(measured_only=True))
    _write(table, out_tsv)
    plots.similarity_scatter(z, similarity, "cosine(task mean embedding, example embedding)",
                             table.iloc[0], out_png)
    return table.iloc[0].to_dict()


def task_similarity(task_paths: dict[str, str], tasks: list[str], examples: np.ndarray, batch_size: int,
                    max_task_examples: int | None, device: str) -> np.ndarray:
    """Cosine between each task's mean MiniLM embedding (its training examples, at most `max_task_examples`) and
    each upstream example's (`examples`, embedded): tasks x examples, float32."""
    from .embed import embed, task_texts

    vectors = np.stack([embed(task_texts(pd.read_parquet(task_paths[t]), max_task_examples), batch_size,
                              device=device).mean(0) for t in tasks])
    return cosine_similarity(vectors, examples)


def gradient_analysis(base_dir, matrix_path, shard_paths, task_paths: dict[str, str], out_tsv, out_png,
                      settings: dict) -> dict:
    """Mean projected task gradient · projected example gradient (divided by dim), against Z."""
    import torch

    from . import plots
    from .data.chat import encode_chat, encode_examples
    from .gradients import mean_projection, projected_gradients
    from .models import load_model, load_tokenizer, pick_device

    matrix, upstream = matrix_and_upstream(matrix_path, shard_paths)
    device = pick_device(settings["device"])
    tokenizer = load_tokenizer(base_dir)
    model = load_model(base_dir, device, torch.float32, "sdpa")  # a GPU's fused attention: no scores kept
    examples = encode_examples(tokenizer, upstream, settings["chat_template"], settings["max_length"])
    # upstream lm examples are trained on every token (as the reference's make_label_lm), chat on the response
    upstream_grads = projected_gradients(model, examples, settings["dim"], settings["seed"])
    task_vectors, started = [], time.monotonic()
    for done, task in enumerate(matrix.tasks, 1):
        frame = pd.read_parquet(task_paths[task])
        frame = frame[frame["split"] == "train"].iloc[:settings["max_task_examples"]]
        encoded = encode_chat(tokenizer, frame["prompt"].tolist(), frame["response"].tolist(),
                              settings["chat_template"], settings["max_length"])
        task_vectors.append(mean_projection(model, encoded, settings["dim"], settings["seed"], settings["max_length"]))
        each = (time.monotonic() - started) / done  # the log says how far the tasks' means have come
        log.info("task gradient means: %d of %d tasks (%s, %d examples), %.1f s each, about %.1f min left", done,
                 len(matrix.tasks), task, len(encoded), each, each * (len(matrix.tasks) - done) / 60)
    score = (np.stack(task_vectors).astype(np.float64) @ upstream_grads.T.astype(np.float64)) / settings["dim"]
    z = matrix.measured_values()  # a fractional map's measured cells alone
    table = pair_correlations(z, score.astype(np.float32), matrix.tasks).assign(reads=matrix.reads(measured_only=True))
    _write(table, out_tsv)
    plots.similarity_scatter(z, score, "task gradient · example gradient (projected)",
                             table.iloc[0], out_png)
    return table.iloc[0].to_dict()


def cross_task_analysis(matrix_path, out_tsv, out_summary, out_png) -> dict:
    from . import plots
    from .matrix import ForgettingMatrix

    matrix = ForgettingMatrix.read(matrix_path)
    categories = matrix.task_categories()
    correlations = task_correlations(matrix.measured_values(), pairwise=matrix.completed)
    reads = matrix.reads(measured_only=True)  # each pair of rows over the cells both measured
    pairs = cross_task(matrix.values, matrix.tasks, categories, correlations).assign(reads=reads)
    summary = category_summary(pairs).assign(reads=reads)
    _write(pairs, out_tsv)
    _write(summary, out_summary)
    plots.task_correlations(correlations[1], matrix.tasks, categories, out_png)
    return {**{row["pairs"]: row["pearson_column_centred"] for _, row in summary.iterrows()},
            "p_value": summary["p_value"].iloc[-1]}


def semantic_command(matrix: str, shards: list[str], tasks: list[str], settings: dict, threads: int, out: str,
                     figure: str, similarity_out: str | None = None) -> dict:
    """`forgetmap semantic-similarity`: TASK=path arguments, the model's `correlations` settings."""
    from .models import pick_device, set_threads

    set_threads(threads)
    return semantic_analysis(matrix, shards, task_arguments(tasks), out, figure, settings["batch_size"],
                             settings["max_task_examples"], str(pick_device(settings["device"])), similarity_out)


def gradient_command(base: str, matrix: str, shards: list[str], tasks: list[str], settings: dict, threads: int,
                     out: str, figure: str) -> dict:
    """`forgetmap gradient-similarity`."""
    from .models import set_threads

    set_threads(threads)
    return gradient_analysis(base, matrix, shards, task_arguments(tasks), out, figure, settings)


def task_arguments(items: list[str]) -> dict[str, str]:
    """TASK=path command-line arguments as {task: path}."""
    return dict(item.split("=", 1) for item in items)
