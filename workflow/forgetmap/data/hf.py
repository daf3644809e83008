"""Rows of a Hugging Face dataset in forgetmap's contracts (`format: hf`, for corpora and tasks).

`dataset` is what `datasets.load_dataset` takes: a hub id, a local dataset directory (a repository's
files, or `save_to_disk` output), or a builder (`json`, `parquet`, `csv`) with `data_files`; with
`name`, `split` and `revision`. Nothing is fetched here that the user's environment cannot serve: a
hub id must be in the local datasets cache unless the environment allows downloads (HF_DATASETS_OFFLINE).

Then, in order:
- `where`: a row filter, column -> value, list of values, or glob pattern (`science*`, Tulu's `dataset`);
- `messages`: a column of chat turns ({role, content}); `turns: first` takes the first user turn and the
  assistant turn after it (the paper's Tulu tasks), `turns: all` the last assistant turn as the response and
  every turn before it as the prompt, earlier turns marked `<|user|>` / `<|assistant|>` as Tulu writes them;
- `columns`: contract column -> dataset column, or a template over dataset columns (`"{question}\\nAnswer:"`);
  a `context` column is folded into the prompt by `context_template` where it is not empty (Dolly);
- items: `choices` (a list column) with an integer `answer` becomes the answer's text (MMLU-style).
The dataset's fingerprint is returned with the rows, so what was read is recorded and a changed dataset
changes the plan's digests.
"""

from __future__ import annotations

import fnmatch
import string
from pathlib import Path

import pandas as pd

from ..errors import DataError

CONTEXT_TEMPLATE = "Context: {context}\n\n{prompt}"


def describe(spec: dict) -> str:
    if spec.get("parts") and not spec.get("dataset"):
        return "datasets " + "; ".join(describe({**spec, "parts": None, **part})[len("dataset "):]
                                       for part in spec["parts"])
    where = spec["dataset"] + (f" ({spec['name']})" if spec.get("name") else "")
    return f"dataset {where}, split {spec.get('split') or 'train'}"


def load(spec: dict, split: str | None = None):
    """The `datasets.Dataset` the spec names (`split` overrides the spec's); loaded once per process, as
    planning asks for the same dataset once per task (Tulu's 11 subsets are one dataset)."""
    import json

    keys = ("dataset", "name", "revision", "data_files")
    key = json.dumps([split or spec.get("split") or "train", *(spec.get(k) for k in keys)], sort_keys=True)
    if key not in _LOADED:
        _LOADED[key] = _load(spec, split)
    return _LOADED[key]


_LOADED: dict = {}


def _load(spec: dict, split: str | None):
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    split = split or spec.get("split") or "train"
    source = Path(spec["dataset"]).expanduser()
    try:
        if source.is_dir() and ((source / "state.json").exists() or (source / "dataset_dict.json").exists()):
            loaded = datasets.load_from_disk(str(source))
            return loaded[split] if isinstance(loaded, datasets.DatasetDict) else loaded
        return datasets.load_dataset(spec["dataset"], name=spec.get("name"), split=split,
                                     revision=spec.get("revision"), data_files=spec.get("data_files"))
    except (FileNotFoundError, ValueError, KeyError, ConnectionError, OSError) as exc:
        raise DataError(f"{describe({**spec, 'split': split})}: cannot be loaded: {exc}") from None


def fingerprint(spec: dict, split: str | None = None) -> str:
    return load(spec, split)._fingerprint


def frame(spec: dict, contract: list[str], split: str | None = None) -> tuple[pd.DataFrame, str]:
    """(the rows mapped to the `contract` columns the spec provides, the dataset's fingerprint)."""
    dataset = load(spec, split)
    where = describe({**spec, "split": split or spec.get("split")})
    rows = dataset.to_pandas()
    rows = _filtered(rows, spec.get("where") or {}, where)
    if rows.empty:
        raise DataError(f"{where}: no rows{' match the filter ' + repr(spec['where']) if spec.get('where') else ''}")
    out = pd.DataFrame(index=rows.index)
    if spec.get("messages"):
        out["prompt"], out["response"] = _turns(rows, spec["messages"], spec.get("turns") or "first", where)
    for column, source in _sources(spec, contract, rows.columns).items():
        out[column] = _column(rows, source, where, column)
    if "context" in out:
        template = spec.get("context_template") or CONTEXT_TEMPLATE
        has = out["context"].map(lambda v: isinstance(v, str) and bool(v.strip()))
        out.loc[has, "prompt"] = [template.format(context=c, prompt=p)
                                  for c, p in zip(out.loc[has, "context"], out.loc[has, "prompt"])]
        out = out.drop(columns="context")
    if "answer" in out and "choices" in out:
        out["answer"] = _answer_texts(out["answer"], out["choices"], where)
    return out.reset_index(drop=True), dataset._fingerprint


def check(spec: dict, contract: list[str], required: list[str], split: str | None = None) -> None:
    """What `frame` would reject about the dataset's shape, found at planning without reading its texts: a
    filter, mapped, template or messages column that is missing, a filter that keeps no row, a `required`
    contract column that nothing provides. Faults of single rows (an empty text, an answer index outside
    its choices) are found where the rows are read, in the job that reads them."""
    dataset = load(spec, split)
    where = describe({**spec, "split": split or spec.get("split")})
    columns = list(dataset.column_names)
    filters = spec.get("where") or {}
    _filtered(pd.DataFrame(columns=columns), filters, where)  # its columns exist
    kept = len(_filtered(dataset.select_columns(list(filters)).to_pandas(), filters, where)) if filters else len(dataset)
    if not kept:
        raise DataError(f"{where}: no rows{' match the filter ' + repr(filters) if filters else ''}")
    provided = set()
    if spec.get("messages"):
        if spec["messages"] not in columns:
            raise DataError(f"{where}: messages column {spec['messages']!r} not found; columns: {', '.join(columns)}")
        provided |= {"prompt", "response"}
    shape = pd.DataFrame(columns=columns)  # the columns without their rows: what `_column` checks
    for column, source in _sources(spec, contract, columns).items():
        _column(shape, source, where, column)
        provided.add(column)
    absent = [c for c in required if c not in provided]
    if absent:
        raise DataError(f"{where}: no column gives {', '.join(map(repr, absent))} (map one under `columns`, or name "
                        f"a `messages` column); columns: {', '.join(columns)}")


def _sources(spec: dict, contract: list[str], columns) -> dict[str, str]:
    """Contract column -> the dataset column or template that gives it: the spec's `columns`, else a
    dataset column of the same name (except for what a `messages` column gives)."""
    given = {"prompt", "response"} if spec.get("messages") else set()
    out = {}
    for column in contract:
        source = (spec.get("columns") or {}).get(column)
        if source is None and column in columns and column not in given:
            source = column
        if source is not None:
            out[column] = source
    return out


def _filtered(rows: pd.DataFrame, where: dict, described: str) -> pd.DataFrame:
    for column, wanted in where.items():
        if column not in rows:
            raise DataError(f"{described}: filter column {column!r} not found; columns: {', '.join(rows.columns)}")
        values = wanted if isinstance(wanted, list) else [wanted]
        patterns = [str(v) for v in values]
        keep = rows[column].map(lambda v: any(fnmatch.fnmatchcase(str(v), p) for p in patterns))
        rows = rows[keep.to_numpy(bool)]
    return rows


def _column(rows: pd.DataFrame, source: str, described: str, contract: str) -> pd.Series:
    """A dataset column, a field of a struct column (`choices.text`, ARC's options), or a template over
    several (`{field}`), as strings."""
    if "{" not in source and source not in rows and "." in source and source.split(".", 1)[0] in rows:
        column, field = source.split(".", 1)
        try:
            return rows[column].map(lambda v: None if v is None else v[field])
        except (KeyError, TypeError, IndexError):
            raise DataError(f"{described}: column {column!r} has no field {field!r} (for {contract!r})") from None
    if "{" not in source:
        if source not in rows:
            raise DataError(f"{described}: column {source!r} (for {contract!r}) not found; columns: "
                            f"{', '.join(rows.columns)}")
        return rows[source]
    fields = [name for _, name, _, _ in string.Formatter().parse(source) if name]
    missing = [f for f in fields if f not in rows]
    if missing:
        raise DataError(f"{described}: template {source!r} (for {contract!r}) names column(s) {', '.join(missing)}, "
                        f"not found; columns: {', '.join(rows.columns)}")
    return pd.Series([source.format(**{f: "" if v is None else v for f, v in zip(fields, values)})
                      for values in zip(*(rows[f] for f in fields))], index=rows.index, dtype=object)


def _turns(rows: pd.DataFrame, column: str, turns: str, described: str) -> tuple[list, list]:
    if column not in rows:
        raise DataError(f"{described}: messages column {column!r} not found; columns: {', '.join(rows.columns)}")
    prompts, responses = [], []
    for position, messages in enumerate(rows[column]):
        messages = [dict(m) for m in (messages if messages is not None else [])]
        roles = [m.get("role") for m in messages]
        if turns == "first":
            user = next((i for i, r in enumerate(roles) if r == "user"), None)
            reply = next((i for i, r in enumerate(roles) if r == "assistant" and user is not None and i > user), None)
            if reply is None:
                raise DataError(f"{described}: row {position}, column {column!r}: no user turn followed by an "
                                f"assistant turn")
            prompts.append(messages[user]["content"])
            responses.append(messages[reply]["content"])
            continue
        last = max((i for i, r in enumerate(roles) if r == "assistant"), default=None)
        if last is None or "user" not in roles[:last]:
            raise DataError(f"{described}: row {position}, column {column!r}: no assistant turn after a user turn")
        before = messages[:last]
        first_user = roles.index("user")
        parts = [before[first_user]["content"]]
        for message in before[first_user + 1:]:  # later turns as Tulu marks them; the template adds the last marker
            parts.append(f"<|{message['role']}|>\n{message['content']}")
        prompts.append("\n".join(parts))
        responses.append(messages[last]["content"])
    return prompts, responses


def _answer_texts(answers: pd.Series, choices: pd.Series, described: str) -> list:
    """An integer answer (MMLU's index into its choices), or a letter or number label that is not itself an
    option (ARC's answerKey "B" or "2"), as the choice's text; text answers stay."""
    out = []
    for position, (answer, options) in enumerate(zip(answers, choices)):
        if answer is None or options is None:
            out.append(answer)
            continue
        options = list(options)
        if isinstance(answer, str):
            label = answer.strip()
            if label in options or not (len(label) == 1 and (label.isupper() or label.isdigit())):
                out.append(answer)
                continue
            index = ord(label) - ord("A") if label.isalpha() else int(label) - 1  # ARC numbers its labels from 1
            if not 0 <= index < len(options):
                raise DataError(f"{described}: row {position}, column 'answer': label {label!r} is outside its "
                                f"{len(options)} choices")
            out.append(str(options[index]))
            continue
        index = int(answer)
        if not 0 <= index < len(options):
            raise DataError(f"{described}: row {position}, column 'answer': index {index} is outside its "
                            f"{len(options)} choices")
        out.append(str(options[index]))
    return out


def distinct(spec: dict, column: str) -> list[str]:
    """The distinct values of a column (after the spec's filter), in first-seen order: one task each."""
    rows = _filtered(load(spec).to_pandas(), spec.get("where") or {}, describe(spec))
    if column not in rows:
        raise DataError(f"{describe(spec)}: column {column!r} not found; columns: {', '.join(rows.columns)}")
    return [str(v) for v in dict.fromkeys(rows[column].tolist())]
