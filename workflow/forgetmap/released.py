"""The statistics Jin & Ren released, read into forgetmap's own files (reference §1.3, §2).

- A matrix `<name>.npy` (M x N float, Z = logp_before - logp_after = NLL_after - NLL_before, already
  the forgetting sign) with `<name>.npy.meta`, JSON `{category: {"start": s, "stop": e, "tasks": [...]}}`
  giving each category's row range and task names.
- A base log-prob array `<model>_base_ppl.npy` (N mean log-probs, negative; NaN where the span was
  empty); forgetmap stores `base_nll = -logp`.
- Prediction split pickles with `train_mat`, `test_mat`, `train_ocl_idxs`, `test_ocl_idxs`,
  `train_ocl_task_info`, `test_ocl_task_info` (lists of `{cat, name, split}`); forgetmap keeps the
  task lists as a split definition, `{"name", "train_tasks", "test_tasks", "source"}`.

A binary matrix (`statistic: forgotten_1to0`, the paper's exact-match setup, reference §1.4) holds Y:
1 where an item the base model answered right is answered wrong after the fine-tune, 0 where it is
still right, NaN where it does not count; the released file keeps the base-correct items only
(142 x 4,764). It imports as a Y matrix (the 1->0 statistic) for the logistic-MF ranks and the
prediction of Y; any other value is an error naming its row and column.

NaN handling: NaN entries stay NaN in the imported matrix (the reference's "-full" files keep NaN
columns). Analyses then decide: low-rank analysis drops every column with a NaN in any kept row (the
reference drops columns where row 0 is NaN; NaN columns are shared by every row in its files, so the
two agree), and an all-NaN row (the reference's stand-in for a missing task file) is dropped and
reported rather than read as zero.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np

from .errors import DataError
from .matrix import ForgettingMatrix


def read_meta(meta_path: str | Path, n_rows: int) -> tuple[list[str], dict[str, str]]:
    """Task names in row order and task -> category, from a `.meta` file covering every row once."""
    try:
        meta = json.loads(Path(meta_path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise DataError(f"{meta_path}: not a readable JSON .meta file: {exc}") from exc
    names: list[str | None] = [None] * n_rows
    categories: dict[str, str] = {}
    for category, entry in meta.items():
        try:
            start, stop, tasks = int(entry["start"]), int(entry["stop"]), list(entry["tasks"])
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"{meta_path}: category {category!r} needs start, stop and tasks") from exc
        if stop - start != len(tasks) or start < 0 or stop > n_rows:
            raise DataError(f"{meta_path}: category {category!r} spans rows {start}..{stop - 1} with "
                            f"{len(tasks)} task names, for a matrix of {n_rows} rows")
        for row, task in zip(range(start, stop), tasks):
            if names[row] is not None:
                raise DataError(f"{meta_path}: row {row} is claimed by two categories")
            names[row] = str(task)
            categories[str(task)] = category
    missing = [i for i, n in enumerate(names) if n is None]
    if missing:
        raise DataError(f"{meta_path}: rows {missing[:5]} have no category (matrix has {n_rows} rows)")
    if len(set(names)) != len(names):
        raise DataError(f"{meta_path}: duplicate task names")
    return names, categories  # type: ignore[return-value]


def released_tasks(matrix_path: str | Path, meta_path: str | Path | None = None) -> list[str]:
    """The task names an import will produce, cheaply (the matrix is memory-mapped, not read)."""
    n_rows = np.load(matrix_path, mmap_mode="r").shape[0]
    meta_path = meta_path or f"{matrix_path}.meta"
    if Path(meta_path).exists():
        return read_meta(meta_path, n_rows)[0]
    return [f"task_{i}" for i in range(n_rows)]


def check_binary(y: np.ndarray, path: str | Path) -> None:
    """Y holds 0, 1 or NaN; anything else (a {-1, 0, 1} base_em - ft_em file, say) names its place."""
    bad = np.argwhere(np.isfinite(y) & (y != 0) & (y != 1))
    if len(bad):
        row, column = (int(v) for v in bad[0])
        raise DataError(f"{path}: value {y[row, column]:g} at row {row}, column {column}: a binary matrix holds 0 "
                        f"(still right), 1 (right before, wrong after) or NaN; a base_em - ft_em file (-1 / 0 / 1) "
                        f"cannot tell 1->1 from 0->0: keep its base-correct columns and map -1 to 0")


def import_matrix(matrix_path: str | Path, meta_path: str | Path | None = None,
                  base_logprobs: str | Path | None = None, sources: str | Path | None = None,
                  corpus: str = "upstream", groups: dict[str, str] | None = None,
                  statistic: str = "nll_change", example_ids: str | Path | None = None) -> ForgettingMatrix:
    """A released `.npy` (+ `.meta`, base log-probs, source labels, example ids) as a ForgettingMatrix of Z
    (`statistic` nll_change) or of the binary Y (forgotten_1to0)."""
    try:
        z = np.load(matrix_path)
    except (OSError, ValueError) as exc:
        raise DataError(f"{matrix_path}: not a readable .npy array: {exc}") from exc
    if z.ndim != 2:
        raise DataError(f"{matrix_path}: expected a 2-D tasks x examples array, got shape {z.shape}")
    n_tasks, n = z.shape
    if statistic == "forgotten_1to0":
        check_binary(z, matrix_path)
    meta_path = meta_path or f"{matrix_path}.meta"
    if Path(meta_path).exists():
        tasks, categories = read_meta(meta_path, n_tasks)
    else:
        tasks = [f"task_{i}" for i in range(n_tasks)]
        categories = {t: "released" for t in tasks}
    if base_logprobs is not None:
        base = np.load(base_logprobs)
        if base.shape != (n,):
            raise DataError(f"{base_logprobs}: {base.shape[0] if base.ndim else 0} base log-probs for a matrix "
                            f"of {n} examples")
        base_nll = -base.astype(np.float32)
    else:
        base_nll = np.full(n, np.nan, dtype=np.float32)
    labels = np.full(n, "unknown", dtype=object)
    if sources is not None:
        labels = np.array(Path(sources).read_text().splitlines(), dtype=object)
        if len(labels) != n:
            raise DataError(f"{sources}: {len(labels)} source labels (one per line) for {n} examples")
    ids = np.array([f"{corpus}-{j:06d}" for j in range(n)])
    if example_ids is not None:
        ids = np.array(Path(example_ids).read_text().splitlines(), dtype=object).astype(str)
        if len(ids) != n or len(set(ids)) != n:
            raise DataError(f"{example_ids}: {len(ids)} example ids ({len(set(ids))} distinct), one per line, for "
                            f"{n} examples")
    groups = groups or {}
    return ForgettingMatrix(z.astype(np.float32), tasks, ids, labels.astype(str), base_nll, categories,
                            {c: groups.get(c, "in_domain") for c in sorted(set(categories.values()))}, statistic)


def import_split(pickle_path: str | Path, name: str, known_tasks: list[str] | None = None) -> dict:
    """A released prediction split as forgetmap's split definition (task names from its task info)."""
    try:
        with open(pickle_path, "rb") as handle:
            split = pickle.load(handle)
    except (OSError, pickle.UnpicklingError, EOFError) as exc:
        raise DataError(f"{pickle_path}: not a readable split pickle: {exc}") from exc
    needed = ("train_mat", "test_mat", "train_ocl_task_info", "test_ocl_task_info")
    missing = [k for k in needed if k not in split]
    if missing:
        raise DataError(f"{pickle_path}: missing key(s) {', '.join(missing)}")
    out = {"name": name, "source": str(pickle_path)}
    for part in ("train", "test"):
        info, mat = split[f"{part}_ocl_task_info"], np.asarray(split[f"{part}_mat"])
        if len(info) != mat.shape[0]:
            raise DataError(f"{pickle_path}: {part}_ocl_task_info has {len(info)} entries for "
                            f"{mat.shape[0]} rows of {part}_mat")
        out[f"{part}_tasks"] = [str(entry["name"]) for entry in info]
    overlap = set(out["train_tasks"]) & set(out["test_tasks"])
    if overlap:
        raise DataError(f"{pickle_path}: task(s) {sorted(overlap)} are both train and test tasks")
    if known_tasks is not None:
        unknown = [t for t in out["train_tasks"] + out["test_tasks"] if t not in known_tasks]
        if unknown:
            raise DataError(f"{pickle_path}: task(s) {unknown[:5]} are not rows of the imported matrix")
    return out


def import_command(matrix: str, meta: str | None, base_logprobs: str | None, sources: str | None,
                   example_ids: str | None, corpus: str, groups: dict | None, statistic: str, out: str) -> dict:
    """`forgetmap import`: the released matrix as a forgetting.parquet (Z) or forgetting_1to0.parquet (Y)."""
    imported = import_matrix(matrix, meta, base_logprobs, sources, corpus, groups, statistic, example_ids)
    imported.write(out, {"imported_from": str(matrix)})
    return {"tasks": imported.shape[0], "examples": imported.shape[1], "nan": int(np.isnan(imported.values).sum())}


def import_split_command(matrix: str, meta: str | None, name: str, split: str, out: str, **_released) -> dict:
    """`forgetmap import-split`: a released split pickle as a split definition JSON."""
    from .io import atomic_path

    definition = import_split(split, name, released_tasks(matrix, meta))
    with atomic_path(out) as tmp:
        tmp.write_text(json.dumps(definition, indent=1))
    return {"train": len(definition["train_tasks"]), "test": len(definition["test_tasks"])}


def release(matrix: ForgettingMatrix, directory: str | Path, name: str,
            splits: dict[str, dict] | None = None) -> dict[str, str]:
    """Write `matrix` in the authors' released format, which `import_matrix` and `import_split` read back whole:
    NAME.npy (tasks x examples float32), NAME.npy.meta (each category's row range and task names: a category's rows
    must be contiguous), NAME_base_ppl.npy (the base's mean log-probs, -base_nll), NAME_sources.txt and
    NAME_example_ids.txt (one line per example), and each of `splits` (split definitions: train_tasks,
    test_tasks) as the split pickle NAME_split_SPLIT.pkl. Returns the files by role."""
    from .io import atomic_path

    splits = splits or {}
    for split, definition in splits.items():
        unknown = [t for t in [*definition["train_tasks"], *definition["test_tasks"]] if t not in matrix.tasks]
        if unknown:
            raise DataError(f"split {split!r}: task(s) {unknown[:5]} are not rows of the matrix")

    order = list(dict.fromkeys(matrix.categories.get(t, "released") for t in matrix.tasks))
    meta, row = {}, 0
    for category in order:
        tasks = [t for t in matrix.tasks if matrix.categories.get(t, "released") == category]
        if matrix.tasks[row:row + len(tasks)] != tasks:
            raise DataError(f"category {category!r}: its tasks {tasks} are not contiguous rows of the matrix; the "
                            f"released .meta gives each category one row range")
        meta[category] = {"start": row, "stop": row + len(tasks), "tasks": tasks}
        row += len(tasks)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    files = {"matrix": directory / f"{name}.npy", "meta": directory / f"{name}.npy.meta",
             "base_logprobs": directory / f"{name}_base_ppl.npy", "sources": directory / f"{name}_sources.txt",
             "example_ids": directory / f"{name}_example_ids.txt"}
    arrays = {"matrix": matrix.values.astype(np.float32), "base_logprobs": -matrix.base_nll.astype(np.float32)}
    texts = {"meta": json.dumps(meta, indent=1) + "\n", "sources": "".join(f"{s}\n" for s in matrix.sources),
             "example_ids": "".join(f"{i}\n" for i in matrix.example_ids)}
    pickles = {}
    for split, definition in splits.items():
        files[f"split:{split}"] = directory / f"{name}_split_{split}.pkl"
        pickles[f"split:{split}"] = {
            **{f"{part}_mat": matrix.values[[matrix.tasks.index(t) for t in definition[f"{part}_tasks"]]]
               for part in ("train", "test")},
            **{f"{part}_ocl_task_info": [{"cat": matrix.categories.get(t, "released"), "name": t, "split": "train"}
                                         for t in definition[f"{part}_tasks"]] for part in ("train", "test")}}
    for role, path in files.items():
        with atomic_path(path) as tmp:
            if role in arrays:
                with open(tmp, "wb") as handle:  # np.save adds .npy to a bare name
                    np.save(handle, arrays[role])
            elif role in pickles:
                tmp.write_bytes(pickle.dumps(pickles[role]))
            else:
                tmp.write_text(texts[role])
    return {role: str(path) for role, path in files.items()}


def release_command(matrix: str, name: str | None, splits: list[str] | None, out: str) -> dict:
    """`forgetmap release`: a matrix file (and split definitions, SPLIT=file.json) as a released map (`release`)."""
    read = ForgettingMatrix.read(matrix)
    definitions = {}
    for pair in splits or []:
        split, _, path = pair.partition("=")
        try:
            definitions[split] = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise DataError(f"{path}: not a readable split definition (--splits {pair}): {exc}") from exc
    files = release(read, out, name or Path(matrix).stem, definitions)
    return {"tasks": read.shape[0], "examples": read.shape[1], **files}
