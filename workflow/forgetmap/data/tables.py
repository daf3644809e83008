"""Reading user tables (parquet, jsonl, json) and checking their columns, naming file, row and column."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..errors import DataError

FORMATS = {".parquet": "parquet", ".jsonl": "jsonl", ".json": "json"}


def read_table(path: str | Path, columns: list[str] | None = None) -> pd.DataFrame:
    """Read a parquet, jsonl or json-records file into a DataFrame."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: file not found")
    kind = FORMATS.get(path.suffix)
    try:
        if kind == "parquet":
            return pd.read_parquet(path, columns=columns)
        if kind in ("jsonl", "json"):
            frame = pd.read_json(path, lines=kind == "jsonl", dtype=False)
            return frame if columns is None else frame[[c for c in columns if c in frame]]
    except (ValueError, OSError) as exc:
        where = _bad_json_line(path) if kind == "jsonl" else None
        if where is not None:
            raise DataError(f"{path}: line {where[0]}: not a JSON object: {where[1]}") from None
        raise DataError(f"{path}: cannot be read as {kind}: {exc}") from exc
    raise DataError(f"{path}: unknown format {path.suffix!r}; use one of {', '.join(FORMATS)}")


def _bad_json_line(path: Path) -> tuple[int, str] | None:
    """(1-based line number, reason) of the first line of a jsonl file that is not a JSON object."""
    import json

    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as exc:
                return number, exc.msg
            if not isinstance(value, dict):
                return number, f"a {type(value).__name__}, not an object"
    return None


def require_columns(frame: pd.DataFrame, columns: list[str], where: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise DataError(f"{where}: missing column(s) {', '.join(map(repr, missing))}; "
                        f"found {', '.join(map(repr, frame.columns))}")


def require_text(frame: pd.DataFrame, column: str, where: str, rows: pd.Series | None = None) -> None:
    """Every selected row has a non-empty string in `column`."""
    values = frame[column] if rows is None else frame.loc[rows, column]
    bad = values.map(lambda v: not isinstance(v, str) or not v.strip())
    if bad.any():
        row = int(bad[bad].index[0])
        raise DataError(f"{where}: row {row}, column {column!r}: empty or missing text "
                        f"({int(bad.sum())} such row(s))")
