"""Evaluation logs users already hold, as correctness rows: no model runs.

Two formats, one file or glob per sampling seed:
- lm-evaluation-harness `--log_samples` files (`samples_<task>_<date>.jsonl`): per line `doc_id`, `doc`,
  `target`, `arguments` (`gen_args_i.arg_0` the context, `arg_1` a continuation), `filtered_resps` and
  one field per metric (`acc`, `acc_norm`, `exact_match`, ...). k is the number of loglikelihood
  requests of a multiple-choice document (0 for generated answers); the predicted answer is the option
  with the highest log-likelihood, or the filtered response.
- LightEval details (`details_<task>_<date>.parquet`): per row `doc` (`query`, `choices`, `gold_index`,
  `id`), `model_response` (`text`, `logprobs`) and `metric` (`extractive_match`, `acc`, ...). k is the
  number of choices.

Correctness is the metric rounded to 0 / 1 (Harmon et al. round LightEval's extractive match). Each
logged item is aligned with an upstream item: by prompt (the logged context equal to the item's
`prompt`, or ending with it where the log put few-shot examples or a template before it, or with it and
then at most `TAIL` characters where a chat template closed the user turn after it: the item whose
prompt ends latest, the longest where several do) or by id (a
template over the log's fields, e.g. `{doc[id]}` or `mmlu-{doc_id}`, equal to the `example_id`). A
logged item that aligns with nothing, an upstream item no log holds, a missing metric field and seeds
that hold different items are errors naming the file and the item.
"""

from __future__ import annotations

import glob
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import DataError

FORMATS = ("lm_eval", "lighteval")
DEFAULT_METRIC = {"lm_eval": "acc", "lighteval": "extractive_match"}
SUFFIX = 64  # characters of a prompt's end indexed for prompts the log prefixed (few-shot, templates)
TAIL = 200   # characters a chat template may write after the user's prompt (its closing and assistant markers)


def seed_files(patterns: list[str]) -> list[list[str]]:
    """Each seed's files: one glob per seed (`**` reaches into subdirectories), sorted."""
    return [sorted(glob.glob(p, recursive=True)) for p in patterns]


# --- reading ----------------------------------------------------------------------------------------------

def _value(record: dict, metric: str, where: str) -> float:
    if metric not in record or record[metric] is None:
        fields = ", ".join(sorted(k for k, v in record.items() if isinstance(v, (int, float)) and k != "doc_id"))
        raise DataError(f"{where}: no metric field {metric!r}; numeric fields: {fields or 'none'}")
    value = float(record[metric])
    if math.isnan(value):
        raise DataError(f"{where}: metric {metric!r} is NaN")
    return value


def read_lm_eval(path: str, metric: str) -> pd.DataFrame:
    """One lm-eval samples file: prompt, the log's id fields, correct, k, predicted."""
    rows = []
    with open(path, encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}: line {line_number}: not JSON ({exc.msg})") from None
            where = f"{path}: line {line_number} (doc_id {record.get('doc_id')})"
            arguments = record.get("arguments") or {}
            requests = [arguments[k] for k in sorted(arguments, key=lambda k: int(k.rsplit("_", 1)[-1]))] \
                if isinstance(arguments, dict) else [dict(enumerate(a)) for a in arguments]
            first = requests[0] if requests else {}
            context = first.get("arg_0", first.get(0, ""))
            responses = record.get("filtered_resps") or []
            loglik = len(requests) > 1 and all(isinstance(r, list) and len(r) == 2 for r in responses)
            margin = np.nan
            if loglik:  # multiple choice: the option with the highest log-likelihood
                scores = [float(r[0]) for r in responses]
                option = requests[int(np.argmax(scores))]
                predicted = str(option.get("arg_1", option.get(1, ""))).strip()
                if metric == "acc":
                    margin = option_margin(scores, record.get("target"),
                                           [str(r.get("arg_1", r.get(1, ""))).strip() for r in requests])
            else:
                predicted = str(responses[0]) if responses else ""
            rows.append({"prompt": str(context), "doc_id": record.get("doc_id"), "doc": record.get("doc") or {},
                         "correct": round(_value(record, metric, where)), "k": len(requests) if loglik else 0,
                         "predicted": predicted, "margin": margin, "where": where})
    return pd.DataFrame(rows)


def read_lighteval(path: str, metric: str) -> pd.DataFrame:
    """One LightEval details parquet: prompt (`doc.query`), the doc, correct, k, predicted."""
    frame = pd.read_parquet(path)
    for column in ("doc", "metric"):
        if column not in frame:
            raise DataError(f"{path}: no column {column!r}: not a LightEval details file (columns: "
                            f"{', '.join(frame.columns)})")
    rows = []
    for i, (doc, metrics) in enumerate(zip(frame["doc"], frame["metric"])):
        doc = dict(doc or {})
        where = f"{path}: row {i} (id {doc.get('id')!r})"
        response = frame["model_response"].iloc[i] if "model_response" in frame else None
        response = response if isinstance(response, dict) else {}
        text = [] if response.get("text") is None else list(response["text"])
        logprobs = [] if response.get("logprobs") is None else list(response["logprobs"])
        choices = [] if doc.get("choices") is None else [str(c) for c in doc["choices"]]
        margin = np.nan
        if text:  # a generated answer
            predicted = str(text[0])
        elif choices and len(logprobs) == len(choices):  # options scored: the most likely one
            predicted = choices[int(np.argmax(logprobs))].strip()
            gold = doc.get("gold_index")
            gold = list(gold) if isinstance(gold, (list, tuple, np.ndarray)) else [gold]
            if len(gold) == 1:
                margin = option_margin([float(v) for v in logprobs], gold[0], [c.strip() for c in choices])
        else:
            predicted = ""
        rows.append({"prompt": str(doc.get("query", "")), "doc_id": doc.get("id", i), "doc": doc,
                     "correct": round(_value(dict(metrics or {}), metric, where)),
                     "k": len(choices) if len(choices) >= 2 else 0, "predicted": predicted, "margin": margin,
                     "where": where})
    return pd.DataFrame(rows)


def option_margin(scores: list[float], gold, options: list[str]) -> float:
    """The gold option's summed log-likelihood less the best other's (forgetmap.correctness.margins), the gold an
    index or an option's text; NaN where the log names no gold among the options."""
    if isinstance(gold, (int, np.integer)) or (isinstance(gold, str) and gold.strip().isdigit()):
        index = int(gold)
    elif isinstance(gold, str) and gold.strip() in options:
        index = options.index(gold.strip())
    else:
        return float("nan")
    if not 0 <= index < len(scores):
        return float("nan")
    return float(scores[index] - max(s for j, s in enumerate(scores) if j != index))


READERS = {"lm_eval": read_lm_eval, "lighteval": read_lighteval}


# --- aligning -----------------------------------------------------------------------------------------

def align(logged: pd.DataFrame, items: pd.DataFrame, how: str, template: str | None) -> np.ndarray:
    """The upstream item (a row position of `items`: example_id, prompt) of every logged item."""
    if how == "id":
        ids = {str(e): i for i, e in enumerate(items["example_id"])}
        out = []
        for record in logged.itertuples():
            try:
                key = template.format(doc_id=record.doc_id, doc=record.doc)
            except (KeyError, IndexError, AttributeError) as exc:
                raise DataError(f"{record.where}: the id template {template!r} names a field the log lacks "
                                f"({exc})") from None
            if key not in ids:
                raise DataError(f"{record.where}: id {key!r} is not an upstream item's example_id")
            out.append(ids[key])
        return np.asarray(out, dtype=np.int64)
    prompts = items["prompt"].astype(str).str.strip().tolist()
    exact: dict[str, int] = {}
    by_end: dict[str, list[int]] = {}
    for i, p in enumerate(prompts):
        exact.setdefault(p, i)
        by_end.setdefault(p[-SUFFIX:], []).append(i)
    short = sorted({len(p) for p in prompts if len(p) < SUFFIX})  # prompts whole in by_end's keys

    def ending(head: str) -> int | None:
        """The longest prompt `head` ends with."""
        candidates = [i for end in {head[-n:] for n in (*short, SUFFIX) if n <= len(head)}
                      for i in by_end.get(end, ()) if head.endswith(prompts[i])]
        return max(candidates, key=lambda i: len(prompts[i])) if candidates else None

    out = []
    for record in logged.itertuples():
        text = record.prompt.strip()
        at = exact.get(text)
        for cut in range(min(TAIL, len(text))) if at is None else ():  # few-shot before; a template after
            if cut == 0 or not text[len(text) - cut].isspace():
                at = ending(text[:len(text) - cut].rstrip())
                if at is not None:
                    break
        if at is None:
            raise DataError(f"{record.where}: its prompt {text[-120:]!r} is no upstream item's prompt (nor ends "
                            f"with one, before at most {TAIL} characters of a chat template)")
        out.append(at)
    return np.asarray(out, dtype=np.int64)


def import_logs(settings: dict, shards: list[str], out: str) -> dict:
    """`forgetmap eval-log`: one row's logs (every seed) aligned with the upstream items, as one table:
    example_id, correct (seed 0), k, predicted (seed 0), correct_seeds. An error names the row's config
    key (`settings["key"]`), then the file and the item."""
    try:
        return _import_logs(settings, shards, out)
    except DataError as exc:
        if settings.get("key"):
            raise DataError(f"config key {settings['key']}: {exc}") from None
        raise


def _import_logs(settings: dict, shards: list[str], out: str) -> dict:
    from ..io import write_table
    from ..data.upstream import scorable

    import pyarrow as pa

    upstream = pd.concat([pd.read_parquet(s) for s in shards], ignore_index=True)
    items = upstream.iloc[scorable(upstream)].reset_index(drop=True)
    read = READERS[settings["format"]]
    metric = settings["metric"] or DEFAULT_METRIC[settings["format"]]
    per_seed = []
    for seed, files in enumerate(settings["files"]):
        if not files:
            raise DataError(f"seed {seed}: no log file")
        logged = pd.concat([read(f, metric) for f in files], ignore_index=True)
        at = align(logged, items, settings["align"], settings["id"])
        twice = pd.Series(at).duplicated(keep=False).to_numpy()
        if twice.any():
            first = logged["where"][np.flatnonzero(twice)[0]]
            raise DataError(f"{first}: seed {seed} logs upstream item {items['example_id'][at[twice][0]]!r} twice")
        missing = np.setdiff1d(np.arange(len(items)), at)
        if len(missing):
            names = ", ".join(repr(items["example_id"][i]) for i in missing[:5])
            raise DataError(f"seed {seed} ({Path(files[0]).parent}): no log holds {len(missing)} upstream item(s): "
                            f"{names}{' ...' if len(missing) > 5 else ''}")
        per_seed.append(logged.iloc[np.argsort(at)].reset_index(drop=True))
    correct = np.stack([s["correct"].to_numpy(np.int8) for s in per_seed], axis=1)
    k = per_seed[0]["k"].to_numpy()
    if not all(np.array_equal(s["k"].to_numpy(), k) for s in per_seed):
        raise DataError("the seeds' logs give items different numbers of options: they are not the same benchmark")
    table = pa.table({"example_id": pa.array(items["example_id"].astype(str)),
                      "correct": pa.array(correct[:, 0], pa.int8()), "k": pa.array(k, pa.int16()),
                      "predicted": pa.array(per_seed[0]["predicted"].astype(str)),
                      "correct_seeds": pa.array([row.tolist() for row in correct], pa.list_(pa.int8()))})
    write_table(table, out, {"format": settings["format"], "metric": metric, "seeds": len(per_seed)})
    return {"items": len(items), "seeds": len(per_seed), "accuracy": [float(c) for c in correct.mean(axis=0)],
            "metric": metric}


def logged_scores(table: str, shard: str, out: str) -> dict:
    """`forgetmap logged-scores`: a logged row's items of one upstream shard in the scores contract (no NLL:
    NaN, no scored tokens; the correctness columns, one verdict per seed where there are several)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ..io import read_metadata, write_table

    ids = pq.read_table(shard, columns=["example_id"]).column(0).to_numpy().astype(str)
    logged = pd.read_parquet(table).set_index("example_id")
    present = np.isin(ids, logged.index.to_numpy())
    rows = logged.reindex(ids)
    n = len(ids)
    several = read_metadata(table)["seeds"] > 1

    def column(name, kind):
        return pa.array([v if ok else None for v, ok in zip(rows[name].tolist(), present)], kind)

    columns = {"example_id": pa.array(ids), "nll": pa.array(np.full(n, np.nan, np.float32)),
               "n_tokens": pa.array(np.zeros(n, np.int32)), "n_bytes": pa.array(np.zeros(n, np.int32)),
               "predicted": column("predicted", pa.string()), "correct": column("correct", pa.int8()),
               "margin": pa.array(np.full(n, np.nan, np.float32)), "k": column("k", pa.int16())}
    if several:
        columns["correct_seeds"] = column("correct_seeds", pa.list_(pa.int8()))
    write_table(pa.table(columns), out, {"logged": table})
    return {"examples": n, "items": int(present.sum())}
