"""A map at a fraction of its cells: which (task, example) cells a checkpoint's scoring measures, and the rest of
the forgetting matrix completed from them with a conformal half-width per completed cell.

The map is low-rank (forgetmap.lowrank), so a few measured cells per example determine the others (Chen et al.,
JMLR 2015; PromptEval, NeurIPS 2024). Each design is a rule on stable cell keys, so it is nested: a larger
fraction measures every cell a smaller one did, and a task added to the config leaves every other task's cells
as they were (`design`). The two designs a workflow's scoring jobs use (`row`: uniform and balanced) give each
task's cells from the task and each example's id alone, so a job scoring one shard needs nothing else:

- `uniform`: each cell measured where its key (a hash of task and example id) is below the fraction;
- `stratified`: in each task, the same share of each source's examples (lowest keys first);
- `balanced`: every example measured under about the same number of tasks (within two of fraction x tasks): the
  tasks, in the config's order, placed on a low-discrepancy circle (golden-ratio steps) and each example given an
  arc of length `fraction` at an offset hashed from its id, so any prefix of the tasks covers every example almost
  evenly (a hash per cell covers binomially: some examples under no task);
- `leverage`: two phases, the first half of the budget balanced, then the rest drawn by each example's leverage
  under a low-rank fit of the first (Chen et al.'s sampling), which an added task changes for all.

The completion (`complete`) is each task's mean over each source's measured examples (shrunk toward the task's
mean) plus a rank-r factorisation of the residual fitted by alternating ridge least squares on the measured cells
only; rank (0 included) and ridge are chosen on a tenth of the measured cells held out. Each completed cell's
half-width at a level is split conformal: the measured cells in ten folds, each completed by a fit on the other
nine (a fold leaves each example most of its few cells), the score |z - ẑ| over the task's root-mean-square fold error, and the half-width the ⌈(n + 1) level⌉-th
smallest score times that spread.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np


DESIGNS = ("uniform", "stratified", "balanced", "leverage")
GOLDEN = (np.sqrt(5.0) - 1) / 2
RANKS = (1, 2, 3, 5)
REGS = (0.1, 1.0, 10.0)  # times the measured cells' mean square per factor row
FOLDS = 10


def _key64(text: str) -> np.uint64:
    return np.frombuffer(hashlib.blake2b(text.encode(), digest_size=8).digest(), dtype=np.uint64)[0]


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: 64 well-mixed bits from each uint64."""
    x = np.asarray(x, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def cell_keys(tasks: list[str], example_ids: list[str], seed: int = 0) -> np.ndarray:
    """(T, U) keys uniform in [0, 1), each a hash of (seed, task, example id): the same cell, the same key, in
    any config that holds it."""
    rows = np.array([_key64(f"{seed}\x00{task}") for task in tasks], dtype=np.uint64)
    return _unit(_mix(rows[:, None] ^ _id_hashes(example_ids)[None, :]))


def _unit(bits: np.ndarray) -> np.ndarray:
    """53 of 64 hashed bits as a float uniform in [0, 1)."""
    return (bits >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def _id_hashes(example_ids: list[str]) -> np.ndarray:
    """Each example id's mixed 64-bit hash, which every task's uniform key of it mixes in."""
    return _mix(np.array([_key64(str(example)) for example in example_ids], dtype=np.uint64))


def example_offsets(example_ids: list[str], seed: int = 0) -> np.ndarray:
    """Each example's offset on the circle, uniform in [0, 1): a hash of its id alone, so a scoring job that sees
    one shard places its examples as the whole corpus does, and a corpus that grows moves none of them."""
    return _unit(np.array([_key64(f"{seed}\x01{example}") for example in example_ids], dtype=np.uint64))


ROW_DESIGNS = ("uniform", "balanced")  # a task's cells from its name or place and each example's id alone


def _example_keys(kind: str, example_ids: list[str], seed: int = 0) -> np.ndarray:
    """What a row design reads of each example, computed once for every row: its offset on the circle (balanced)
    or its id's mixed hash (uniform, as `cell_keys` mixes it)."""
    if kind == "balanced":
        return example_offsets(example_ids, seed)
    if kind == "uniform":
        return _id_hashes(example_ids)
    raise ValueError(f"design: {kind!r} is not one of {', '.join(ROW_DESIGNS)} (a design a scoring job computes "
                     "from its own row)")


def _row_scores(kind: str, task: str, place: int, keys: np.ndarray, seed: int = 0) -> np.ndarray:
    """(U,) in [0, 1): a row's cell is measured where its score is below the fraction (`keys`: _example_keys)."""
    if kind == "balanced":
        return (place * GOLDEN - keys) % 1.0
    return _unit(_mix(_key64(f"{seed}\x00{task}") ^ keys))


def row(kind: str, fraction: float, task: str, place: int, example_ids: list[str], seed: int = 0) -> np.ndarray:
    """(U,) bool: the cells a `kind` design (one of ROW_DESIGNS) measures in one task's row, `place` the task's
    position among the model's tasks (balanced) and `example_ids` any of the corpus's examples (a shard): the
    same cells `design` gives that row, computed from the row alone (what one scoring job knows)."""
    fraction = check_fraction(fraction)
    example_ids = [str(e) for e in example_ids]
    if fraction >= 1:
        return np.ones(len(example_ids), dtype=bool)
    return _row_scores(kind, task, place, _example_keys(kind, example_ids, seed), seed) < fraction


def _cover(kind: str, fraction: float, tasks: list[str], keys: np.ndarray, seed: int = 0) -> np.ndarray:
    """(U,): how many of `tasks` measure each example (`keys`: _example_keys, hashed once for every row)."""
    cover = np.zeros(len(keys), dtype=np.int64)
    for place, task in enumerate(tasks):
        cover += _row_scores(kind, task, place, keys, seed) < fraction
    return cover


def least_cover(kind: str, fraction: float, tasks: list[str], example_ids: list[str], seed: int = 0) -> int:
    """The fewest tasks any example is measured under."""
    cover = _cover(kind, fraction, tasks, _example_keys(kind, example_ids, seed), seed)
    return int(cover.min()) if len(cover) else 0


def smallest_fraction(kind: str, tasks: list[str], example_ids: list[str], need: int, seed: int = 0) -> float | None:
    """The smallest fraction in steps of 0.01 at which every example is measured under at least `need` tasks
    (None where even every cell is too few: fewer tasks than `need`)."""
    if len(tasks) < need:
        return None
    keys = _example_keys(kind, example_ids, seed)
    low, high = 0, 100  # cover grows with the fraction (the designs are nested): bisect the hundredths
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if _cover(kind, mid / 100, tasks, keys, seed).min() >= need else (mid, high)
    return high / 100


def check_fraction(fraction) -> float:
    """`fraction` as a float, or ValueError where it is not in (0, 1] (a config's key is checked by the config
    package, which names it)."""
    if not isinstance(fraction, (int, float)) or isinstance(fraction, bool) or not 0 < fraction <= 1:
        raise ValueError(f"cells: {fraction!r} is not a fraction in (0, 1]")
    return float(fraction)


def design(kind: str, fraction: float, tasks: list[str], example_ids: list[str], sources=None, seed: int = 0,
           measured: np.ndarray | None = None) -> np.ndarray:
    """(T, U) bool: the cells a `kind` design measures at `fraction`. `sources`: each example's source
    (`stratified`); `measured`: the values of the first phase's cells (`leverage`; NaN elsewhere), None for the
    first phase itself."""
    fraction = check_fraction(fraction)
    tasks, example_ids = list(tasks), [str(e) for e in example_ids]
    if fraction >= 1:
        return np.ones((len(tasks), len(example_ids)), dtype=bool)
    if kind in ROW_DESIGNS:
        keys = _example_keys(kind, example_ids, seed)
        return np.stack([_row_scores(kind, task, place, keys, seed) < fraction for place, task in enumerate(tasks)]) \
            if tasks else np.zeros((0, len(example_ids)), dtype=bool)
    if kind == "stratified":
        keys = cell_keys(tasks, example_ids, seed)
        sources = np.asarray(sources if sources is not None else [""] * len(example_ids)).astype(str)
        mask = np.zeros(keys.shape, dtype=bool)
        for source in np.unique(sources):
            members = np.flatnonzero(sources == source)
            take = int(round(fraction * len(members)))
            order = np.argsort(keys[:, members], axis=1, kind="stable")[:, :take]
            mask[np.arange(len(tasks))[:, None], members[order]] = True
        return mask
    if kind == "leverage":
        first = design("balanced", fraction / 2, tasks, example_ids, seed=seed)
        if measured is None:
            return first
        values = np.where(first, measured, np.nan)
        fit = complete(values, first, sources, levels=(), seed=seed)
        lev = fit.example_leverage / fit.example_leverage.mean()
        left = (~first).sum(axis=0)  # each example's cells the first phase did not measure
        budget = fraction * first.size - first.sum()
        low, high = 0.0, 1.0
        while np.sum(np.minimum(1.0, high * lev) * left) < budget and high < 1e9:
            high *= 2
        for _ in range(60):  # each example's chance of each cell left, in proportion to its leverage
            mid = (low + high) / 2
            low, high = (mid, high) if np.sum(np.minimum(1.0, mid * lev) * left) < budget else (low, mid)
        keys = cell_keys(tasks, example_ids, seed + 1)
        return first | (keys < np.minimum(1.0, high * lev)[None, :])
    raise ValueError(f"design: {kind!r} is not one of {', '.join(DESIGNS)}")


@dataclass
class Completion:
    values: np.ndarray        # (T, U) the measured cells as measured, the others completed
    measured: np.ndarray      # (T, U) bool
    halfwidths: dict          # {level: (T, U) half-width, 0 at measured cells}
    rank: int
    reg: float
    example_leverage: np.ndarray  # (U,) each example's leverage under the fit (the squared norm of its factors)


def source_means(z: np.ndarray, mask: np.ndarray, sources=None, prior: float = 5.0) -> np.ndarray:
    """(T, U): each task's mean over its measured cells of each example's source, shrunk toward the task's own
    mean as if `prior` cells of it were among them (a source with few measured cells leans on the task)."""
    t, u = z.shape
    sources = np.zeros(u, dtype=np.int64) if sources is None else np.unique(np.asarray(sources).astype(str),
                                                                             return_inverse=True)[1]
    zf = np.where(mask, z, 0.0)
    task_mean = zf.sum(axis=1) / np.maximum(mask.sum(axis=1), 1)
    base = np.empty((t, u))
    for source in np.unique(sources):
        cols = sources == source
        count = mask[:, cols].sum(axis=1)
        base[:, cols] = ((zf[:, cols].sum(axis=1) + prior * task_mean) / (count + prior))[:, None]
    return base


def _als(r: np.ndarray, mask: np.ndarray, rank: int, reg: float, seed: int, sweeps: int = 40):
    """A (T, rank), B (U, rank) with A Bᵀ ≈ r on the measured cells, ridge `reg` on each factor row."""
    rng = np.random.default_rng(seed)
    t, u = r.shape
    rf = np.where(mask, r, 0.0)
    m = mask.astype(np.float64)
    a = rng.normal(scale=0.1, size=(t, rank))
    b = rng.normal(scale=0.1, size=(u, rank))
    eye = reg * np.eye(rank)

    def outer(f):  # each factor row's outer product, flattened: a row's Gram matrix is the mask times these
        return (f[:, :, None] * f[:, None, :]).reshape(len(f), rank * rank)

    for _ in range(sweeps):
        gram = (m @ outer(b)).reshape(t, rank, rank) + eye
        a = np.linalg.solve(gram, (rf @ b)[:, :, None])[:, :, 0]
        gram = (m.T @ outer(a)).reshape(u, rank, rank) + eye
        b = np.linalg.solve(gram, (rf.T @ a)[:, :, None])[:, :, 0]
    return a, b


def _fit(z: np.ndarray, mask: np.ndarray, sources, rank: int, reg: float, seed: int):
    """The source means plus a rank-`rank` fit of the residual (rank 0: the source means alone); `reg` in units
    of the residual's mean square times the measured cells per factor row."""
    base = source_means(z, mask, sources)
    if rank == 0:
        return base, np.zeros((z.shape[1], 0))
    residual = np.where(mask, z - base, 0.0)
    scale = float(np.mean(residual[mask] ** 2)) or 1.0
    a, b = _als(residual, mask, rank, reg * scale * mask.sum() / sum(mask.shape), seed)
    return base + a @ b.T, b


def complete(z: np.ndarray, mask: np.ndarray, sources=None, ranks=RANKS, regs=REGS, levels=(0.8, 0.9),
             seed: int = 0, folds: int = FOLDS) -> Completion:
    """The matrix completed from its measured cells (`mask`; `z` elsewhere ignored), `sources` each example's
    source (None: one), rank (0 among the choices: the source means alone) and ridge chosen on a tenth of the
    measured cells, with split-conformal half-widths at `levels` (module docstring). A measured cell keeps its
    value, NaN included (an empty scored span: no value to fit, none made up)."""
    z = np.asarray(z, dtype=np.float64)
    given = np.asarray(mask, dtype=bool)
    mask = given & np.isfinite(z)
    rng = np.random.default_rng(seed)
    cells = np.flatnonzero(mask)
    held = rng.random(len(cells)) < 0.1
    train = mask.copy()
    train.flat[cells[held]] = False
    errors = {}
    for rank, reg in [(0, 0.0)] + [(rank, reg) for rank in ranks for reg in regs]:
        pred, _ = _fit(z, train, sources, rank, reg, seed)
        errors[(rank, reg)] = float(np.mean((pred.flat[cells[held]] - z.flat[cells[held]]) ** 2))
    rank, reg = min(errors, key=errors.get)
    pred, b = _fit(z, mask, sources, rank, reg, seed)
    values = np.where(given, z, pred)
    halfwidths = {}
    if levels:
        fold = rng.integers(0, folds, size=len(cells))
        residual = np.empty(len(cells))
        for f in range(folds):
            train = mask.copy()
            train.flat[cells[fold == f]] = False
            out, _ = _fit(z, train, sources, rank, reg, seed)
            residual[fold == f] = out.flat[cells[fold == f]] - z.flat[cells[fold == f]]
        rows = cells // z.shape[1]
        spread = np.sqrt(np.bincount(rows, residual ** 2, minlength=len(z)) / np.maximum(np.bincount(rows, minlength=len(z)), 1))
        spread = np.where(spread > 0, spread, np.median(spread[spread > 0]) if (spread > 0).any() else 1.0)
        scores = np.sort(np.abs(residual) / spread[rows])
        for level in levels:
            at = int(np.ceil((len(scores) + 1) * level)) - 1
            q = float(scores[at]) if at < len(scores) else np.inf
            halfwidths[float(level)] = np.where(given, 0.0, q * spread[:, None])
    leverage = np.sum(b ** 2, axis=1) if b.shape[1] else np.ones(z.shape[1])
    return Completion(values, mask, halfwidths, rank, reg, leverage)


def masked_r2(z: np.ndarray, mask: np.ndarray, max_rank: int = 5, seed: int = 0) -> np.ndarray:
    """R²(1..max_rank) of the uncentred rank-r fit on the measured cells only (forgetmap.lowrank's definition,
    its sums over the measured cells): what the measured part of a fractional map says of its rank, with no
    completed cell in either sum."""
    z = np.asarray(z, dtype=np.float64)
    mask = np.asarray(mask, dtype=bool) & np.isfinite(z)
    values = z[mask]
    total = float(np.mean((values - values.mean()) ** 2))
    r2 = []
    for rank in range(1, max_rank + 1):
        a, b = _als(z, mask, rank, 1e-6 * float(np.mean(values ** 2)) * mask.sum() / sum(mask.shape), seed, 60)
        r2.append(1 - float(np.mean(((a @ b.T)[mask] - values) ** 2)) / total)
    return np.array(r2)

