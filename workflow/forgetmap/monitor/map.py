"""The forecast map: everything a forecast of one base model's forgetting needs, in one file.

A forgetting matrix forgetmap wrote (or an imported released one) holds the fit tasks' rows; a forecast
also needs k probe examples chosen from those rows (as the workflow chooses them: forgetmap.predict.probes,
`dopt` by default), the probes' texts to score, how they were scored (chat template, length), and what
the map is of (the model's architecture and vocabulary, the tokenizer's encoding of a sample text), so a
monitor of another model refuses before training starts instead of forecasting nonsense.

On disk (`*.parquet`): one row per usable example (measured under every fit task) with `example_id`,
`source`, `base_nll`, `probe`, `audit`, the upstream columns (`kind`, `text`, `prompt`, `response`: filled for the
probes and the audit examples only), `stratum` where the audit was drawn by strata (forgetmap.predict.audit), then
one float32 column per fit task; the metadata (`forgetmap`) records the rest. The
completion is the forecast job's own (`forgetmap.predict.forecast.fit_completion`): the same probe values
give the same forecast row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import DataError

FORMAT = "forecast_map"
FORMAT_VERSION = 1
UPSTREAM_COLUMNS = ("kind", "text", "prompt", "response")
AUDIT = 60  # examples drawn at random to bound the mean (predict.bound): as the workflow's `forecast.audit`
MAP_RECORD = ("fit_tasks", "method", "params", "levels", "scoring", "identity", "about")  # the metadata a map holds
DEFAULT_LEVELS = (0.8, 0.9)  # as prediction.intervals


def identity(model=None, tokenizer=None) -> dict:
    """What a map is of, as far as it is known: the model's architecture and vocabulary, the tokenizer's
    size and its encoding of a sample text (an architecture or tokenizer that differs shows in these)."""
    from ..models import SAMPLE

    facts: dict = {}
    if model is not None:
        config = model.config if hasattr(model, "config") else model
        facts["architecture"] = getattr(config, "model_type", None)
        facts["vocab_size"] = getattr(config, "vocab_size", None)
    if tokenizer is not None:
        facts["tokenizer_size"] = len(tokenizer)
        facts["tokenizer_sample"] = tokenizer(SAMPLE, add_special_tokens=False)["input_ids"]
    return facts


def differences(recorded: dict, seen: dict) -> list[str]:
    """Each fact of `recorded` that `seen` knows and contradicts, in words."""
    names = {"architecture": "architecture", "vocab_size": "vocabulary (config.vocab_size)",
             "tokenizer_size": "tokenizer size", "tokenizer_sample": "tokenizer's encoding of a sample text"}
    out = []
    for key, name in names.items():
        if key in recorded and key in seen and recorded[key] is not None and seen[key] is not None \
                and recorded[key] != seen[key]:
            def show(v):
                return f"{len(v)} tokens {v[:8]}" if isinstance(v, list) else repr(v)
            out.append(f"{name}: the map's {show(recorded[key])}, this run's {show(seen[key])}")
    return out


def upstream_files(upstream) -> list[str]:
    """The upstream shard files in corpus order: a list of files, one file, or a directory of shard-*.parquet
    (the workflow's shard-K.KEY.parquet, KEY the corpus's definition: a directory where two configs defined the
    corpus differently holds two of some shard and is refused, naming them)."""
    if isinstance(upstream, (str, Path)):
        path = Path(upstream)
        if path.is_dir():
            by_shard: dict[int, list[Path]] = {}
            for f in path.glob("shard-*.parquet"):
                index = f.name[len("shard-"):-len(".parquet")].split(".")[0]
                if index.isdigit():
                    by_shard.setdefault(int(index), []).append(f)
            if not by_shard:
                raise DataError(f"{path}: no upstream shards (shard-*.parquet) in this directory")
            twice = next((sorted(fs) for _, fs in sorted(by_shard.items()) if len(fs) > 1), None)
            if twice is not None:
                raise DataError(f"{path}: {', '.join(f.name for f in twice)} are the same shard of corpora defined "
                                f"differently (two configs); pass the shard files the map was made from")
            return [str(by_shard[k][0]) for k in sorted(by_shard)]
        return [str(path)]
    return [str(p) for p in upstream]


@dataclass
class ForecastMap:
    example_ids: np.ndarray      # (U,) the usable examples
    sources: np.ndarray          # (U,)
    base_nll: np.ndarray         # (U,) float32: the base's NLL the matrix was measured against
    train: np.ndarray            # (T, U) float32: the fit tasks' rows
    fit_tasks: list[str]
    known: np.ndarray            # (k,) the probes' positions among the usable examples, ascending
    probe_rows: pd.DataFrame     # the probes' upstream rows, in `known` order
    audit: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # (m,) drawn at random, ascending
    audit_rows: pd.DataFrame | None = None  # the audit examples' upstream rows, in `audit` order
    method: str = "mf"
    params: dict = field(default_factory=dict)
    levels: list[float] = field(default_factory=lambda: list(DEFAULT_LEVELS))
    scoring: dict = field(default_factory=lambda: {"chat_template": "auto", "max_length": 2048})
    facts: dict = field(default_factory=dict)   # identity(): what the map is of
    about: dict = field(default_factory=dict)   # where it came from: matrix, model name, strategy, seed
    path: str | None = None
    strata: np.ndarray | None = None  # (U,) each example's audit stratum (predict.audit), None: drawn uniformly
    _completion: tuple | None = field(default=None, repr=False)
    _folds: np.ndarray | None = field(default=None, repr=False)
    _mean_widths: dict | None = field(default=None, repr=False)
    _ends: dict = field(default_factory=dict, repr=False)

    @property
    def k(self) -> int:
        return len(self.known)

    @property
    def probe_ids(self) -> np.ndarray:
        return self.example_ids[self.known]

    @property
    def audit_ids(self) -> np.ndarray:
        return self.example_ids[self.audit]

    def measured_rows(self) -> pd.DataFrame:
        """The rows a check scores: the probes (the forecast's input), then the audit examples (its errors)."""
        return pd.concat([self.probe_rows, *([self.audit_rows] if len(self.audit) else [])], ignore_index=True)

    @classmethod
    def from_matrix(cls, matrix, upstream, *, fit_tasks: list[str] | None = None, k: int = 30,
                    probes: str = "dopt", seed: int = 0, method: str = "mf", params: dict | None = None,
                    levels=DEFAULT_LEVELS, chat_template: str = "auto", max_length: int = 2048,
                    probe_ids: list[str] | None = None, model=None, tokenizer=None, audit: int | None = None,
                    audit_seed: int = 0) -> "ForecastMap":
        """A map from a forgetting matrix (a path or a `ForgettingMatrix`) and its upstream shards: the fit
        tasks (default: every row) give the rows; the probes are `probe_ids` where given, else k chosen by
        `probes` as the workflow's forecast chooses them; `audit` further examples are drawn at random by strata
        of the fit rows (`audit_seed`, forgetmap.predict.audit) from the rest, measured at each check to bound the
        mean forgetting (predict.bound; None: AUDIT, or every other example where fewer; 0: none, and the bound is
        the map's constant one).
        `chat_template`/`max_length`: how the matrix's scores were made (the workflow's `models.NAME.score`);
        `model`/`tokenizer`: the base, to record what the map is of."""
        from ..data.upstream import read_ids, read_rows
        from ..matrix import ForgettingMatrix
        from ..predict.audit import audit_draw, two_strata
        from ..predict.forecast import choose, fit_rows, forecast_params

        where = str(matrix) if not isinstance(matrix, ForgettingMatrix) else "the forgetting matrix"
        forgetting = matrix if isinstance(matrix, ForgettingMatrix) else ForgettingMatrix.read(matrix)
        if forgetting.statistic != "nll_change":
            raise DataError(f"{where}: holds {forgetting.statistic!r}; a forecast from scored probes needs NLL "
                            f"changes in nats per token (statistic nll_change)")
        forgetting.require_measured(where, "the monitor's map fit")
        shards = upstream_files(upstream)
        if not np.array_equal(read_ids(shards), forgetting.example_ids):
            raise DataError(f"{where}: its examples are not those of the upstream files {shards[:2]}...: give the "
                            f"shards the matrix was scored on")
        fit_tasks = list(fit_tasks) if fit_tasks is not None else list(forgetting.tasks)
        # a monitor takes the probes' change from its own baseline: a matrix imported without the base's
        # log-probs makes a map too (its base NLL NaN, and the check that the run's model is the map's left out)
        train, usable = fit_rows(forgetting, fit_tasks, where, base=bool(np.isfinite(forgetting.base_nll).any()))
        ids = forgetting.example_ids[usable]
        if probe_ids is not None:
            position = {e: i for i, e in enumerate(ids)}
            missing = [p for p in probe_ids if p not in position]
            if missing:
                raise DataError(f"{where}: probe example(s) {', '.join(map(str, missing[:5]))} are not usable "
                                f"examples of the map (absent, or unmeasured under a fit task)")
            known = np.sort(np.array([position[p] for p in probe_ids], dtype=np.int64))
            strategy = "given"
        else:
            known = np.asarray(choose(train, k, probes, seed, where), dtype=np.int64)
            strategy = probes
        rest = np.setdiff1d(np.arange(len(ids)), known)
        audit = min(AUDIT, len(rest)) if audit is None else audit
        if audit < 0 or audit > len(rest):
            raise DataError(f"{where}: audit {audit} examples: there are {len(rest)} usable examples besides the "
                            f"{len(known)} probes")
        drawn, strata = audit_draw(train, known, audit, audit_seed)
        columns = ["example_id", "source", *UPSTREAM_COLUMNS]
        rows = read_rows(shards, usable[known]).reset_index(drop=True)
        audit_rows = read_rows(shards, usable[drawn]).reset_index(drop=True)[columns] if audit else None
        about = {"matrix": str(matrix) if not isinstance(matrix, ForgettingMatrix) else None,
                 "probes": strategy, "seed": seed, "examples": int(forgetting.shape[1]), "audit_seed": audit_seed}
        return cls(ids, forgetting.sources[usable], forgetting.base_nll[usable], train, fit_tasks, known,
                   rows[columns], drawn, audit_rows, method, forecast_params(method, params),
                   [float(v) for v in levels], {"chat_template": chat_template, "max_length": int(max_length)},
                   identity(model, tokenizer), about, strata=two_strata(strata))

    # --- the forecast ---------------------------------------------------------------------------------

    def completion(self):
        """(the fitted method, {level: half-width per example}): fitted once, on first use."""
        if self._completion is None:
            from ..predict.forecast import fit_completion

            self._completion = fit_completion(self.train, self.known, self.method, self.params, self.levels)
        return self._completion

    def _fold_errors(self) -> np.ndarray:
        """The completion's leave-one-fit-task-out errors of a row's mean, passed over once
        (forgetmap.predict.conformal.fold_mean_errors)."""
        if self._folds is None:
            from ..predict.conformal import fold_mean_errors

            self._folds = fold_mean_errors(self.train, self.known, self.completion()[0], self.method, self.params)
        return self._folds

    def mean_halfwidth(self, level: float) -> float:
        """The half-width of the conformal interval around a forecast row's mean at `level` (inf where the
        map has too few fit tasks for it): what bounds the mean forgetting a budget is set on."""
        if self._mean_widths is None:
            from ..predict.conformal import mean_halfwidths

            widths = self.completion()[1]
            self._mean_widths = mean_halfwidths(self._fold_errors(), sorted(widths)) if widths else {}
        return self._mean_widths.get(level, float("inf"))

    def bound_ends(self, level: float) -> tuple[float, float] | None:
        """(up, down): the ends of the bound on a check's mean at `level` in t's half-widths, as the fit tasks'
        leave-one-task-out rows place the truth under audits drawn as this map's was (forgetmap.predict.ends;
        computed once per level, a second or two); None without audit examples or with fewer than 3 fit tasks."""
        if level not in self._ends:
            from ..predict.ends import studentized_ends

            found = studentized_ends(self.train, self.known, self.completion()[0], self.method, self.params,
                                     self.audit, self.strata, [level]) if len(self.audit) else None
            self._ends[level] = None if found is None else found[level]
        return self._ends[level]

    def forecast(self, values: np.ndarray) -> tuple[np.ndarray, dict[float, np.ndarray]]:
        """(the forecast row over the usable examples (U,) float32, {level: half-width (U,)}) from the
        probes' values Z = NLL now − NLL before, in `known` order."""
        values = np.asarray(values, dtype=np.float64).reshape(1, -1)
        if values.shape[1] != self.k:
            raise ValueError(f"{values.shape[1]} probe values for {self.k} probes")
        model, widths = self.completion()
        row = model.predict(self.known[None, :], values).astype(np.float32, copy=False)[0]
        return row, widths

    # --- the file -------------------------------------------------------------------------------------

    def write(self, path: str | Path) -> None:
        import pyarrow as pa

        from ..io import write_table

        n = len(self.example_ids)
        is_probe, is_audit = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
        is_probe[self.known] = True
        is_audit[self.audit] = True
        columns = {"example_id": pa.array(self.example_ids.astype(str)), "source": pa.array(self.sources.astype(str)),
                   "base_nll": pa.array(self.base_nll, pa.float32()), "probe": pa.array(is_probe),
                   "audit": pa.array(is_audit)}
        if self.strata is not None:
            columns["stratum"] = pa.array(self.strata, pa.int8())
        for name in UPSTREAM_COLUMNS:
            full = np.full(n, None, dtype=object)
            for positions, rows in ((self.known, self.probe_rows), (self.audit, self.audit_rows)):
                if len(positions):
                    full[positions] = rows[name].astype(object).where(rows[name].notna(), None).to_numpy()
            columns[name] = pa.array(full, pa.string())
        for t, task in enumerate(self.fit_tasks):
            columns[task] = pa.array(self.train[t], pa.float32())
        write_table(pa.table(columns), path, {
            "format": FORMAT, "format_version": FORMAT_VERSION, "fit_tasks": self.fit_tasks, "method": self.method,
            "params": self.params, "levels": self.levels, "scoring": self.scoring, "identity": self.facts,
            "about": self.about})
        self.path = str(path)

    @classmethod
    def read(cls, path: str | Path) -> "ForecastMap":
        import pyarrow.parquet as pq

        from ..io import read_metadata

        path = Path(path)
        if not path.exists():
            raise DataError(f"{path}: file not found")
        try:
            meta = read_metadata(path)
        except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError; a bad JSON record too
            raise DataError(f"{path}: not a readable forecast map (a parquet file whose footer and forgetmap "
                            f"record can be read): {exc}; the file is truncated or damaged: write it again "
                            f"(ForecastMap.write)") from None
        if meta.get("format") != FORMAT:
            raise DataError(f"{path}: not a forecast map (a forgetting matrix is made into one with "
                            f"forgetmap.monitor.ForecastMap.from_matrix)")
        if meta.get("format_version") != FORMAT_VERSION:
            raise DataError(f"{path}: forecast map format {meta.get('format_version')}, this forgetmap reads "
                            f"{FORMAT_VERSION}: write it again")
        absent = [key for key in MAP_RECORD if key not in meta]
        if absent:
            raise DataError(f"{path}: the forecast map's record lacks {', '.join(absent)}: write it again")
        try:
            frame = pq.read_table(path).to_pandas()
        except (OSError, ValueError) as exc:
            raise DataError(f"{path}: the forecast map's rows cannot be read ({exc}): the file is truncated or "
                            f"damaged: write it again (ForecastMap.write)") from None
        missing = [c for c in ("example_id", "source", "base_nll", "probe", *UPSTREAM_COLUMNS, *meta["fit_tasks"])
                   if c not in frame.columns]
        if missing:
            raise DataError(f"{path}: missing column(s) {', '.join(missing)}")
        known = np.flatnonzero(frame["probe"].to_numpy())
        audit = np.flatnonzero(frame["audit"].to_numpy()) if "audit" in frame else np.zeros(0, dtype=np.int64)
        if np.intersect1d(known, audit).size:
            raise DataError(f"{path}: example(s) {frame['example_id'].iloc[np.intersect1d(known, audit)].tolist()[:5]} "
                            f"are marked both probe and audit: write the map again")
        measured = {}
        for role, positions in (("probe", known), ("audit", audit)):
            rows = frame.iloc[positions].reset_index(drop=True)
            blank = rows["kind"].isna() | (rows["text"].isna() & rows["prompt"].isna())
            if blank.any():
                raise DataError(f"{path}: {role} example(s) {rows['example_id'][blank].tolist()[:5]} have no text to score")
            measured[role] = rows[["example_id", "source", *UPSTREAM_COLUMNS]]
        train = np.stack([frame[t].to_numpy(dtype=np.float32) for t in meta["fit_tasks"]])
        strata = _read_strata(frame, known, audit, path) if "stratum" in frame else None
        return cls(frame["example_id"].to_numpy().astype(str), frame["source"].to_numpy().astype(str),
                   frame["base_nll"].to_numpy(dtype=np.float32), train, list(meta["fit_tasks"]), known,
                   measured["probe"], audit, measured["audit"] if len(audit) else None, meta["method"],
                   meta["params"], meta["levels"], meta["scoring"], meta["identity"], meta["about"], str(path),
                   strata=strata)


def _read_strata(frame: pd.DataFrame, known: np.ndarray, audit: np.ndarray, path: Path) -> np.ndarray | None:
    """A map file's `stratum` column, checked: -1 at the probes and only there, 0 or 1 elsewhere, each stratum
    holding audit examples; None where every example is in one (drawn uniformly)."""
    column = frame["stratum"]
    values = column.to_numpy()
    expected = np.zeros(len(frame), dtype=bool)
    expected[known] = True
    bad = np.flatnonzero(column.isna().to_numpy() | ~np.isin(values, [-1, 0, 1]) | ((values == -1) != expected))
    if len(bad):
        raise DataError(f"{path}: column `stratum`: row(s) {bad[:5].tolist()} (example {frame['example_id'].iloc[bad[0]]}"
                        f") hold {values[bad[:5]].tolist()}: -1 at the probes and only there, 0 or 1 elsewhere; write "
                        f"the map again")
    from ..predict.audit import two_strata

    strata = two_strata(values.astype(np.int8))
    if strata is None:
        return None
    if len(audit) and set(np.unique(strata[audit]).tolist()) != {0, 1}:
        raise DataError(f"{path}: column `stratum`: the audit examples are not drawn from both strata; write the map "
                        f"again")
    return strata
