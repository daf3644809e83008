"""See what is forgotten: one self-contained HTML page per model, offline, that links the matrix to its texts.

The page answers a researcher's questions about examples: which examples a task makes the model forget
(their text: a plain text, or a prompt and response; NLL before and after, Z, the predicted or forecast
value with its interval, the item's 1→0 / 0→1 transition), which tasks forget an example most, what the leading low-rank
components are made of, and which held-out examples each mitigation arm protected.

Sizes stay bounded whatever the matrix: the overview aggregates Z into at most `columns` bins of
examples (per source, ordered by the leading component), and only a bounded set of examples is carried
in full (each task's most forgotten and most improved, each component's top examples, each arm's most
protected), with their Z under every task. Plotly (its JavaScript inlined from the `plotly` package)
draws the overview; the tables are plain DOM, filled with `textContent` (texts are never parsed as HTML).
"""

from __future__ import annotations

import json
import logging
import warnings
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)
TEXT_CHARS = 2000  # characters carried of each text field (an lm text, a prompt, a response); the page
# (assets/explorer.js) shows the first 300 of a long text and the rest on request
TRANSITIONS = {0: "0→0", 1: "0→1", 2: "1→0", 3: "1→1"}
SEED = 0  # the prediction seed a page shows


def components(z: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(task loadings (M, c), example loadings (N, c), share of variance) of the column-centred matrix's
    leading `count` components (NaN entries as the column mean), from the M × M Gram matrix."""
    with warnings.catch_warnings():  # a column without any finite entry (an empty span) stays 0
        warnings.simplefilter("ignore", RuntimeWarning)
        filled = np.where(np.isfinite(z), z, np.nanmean(z, axis=0, keepdims=True)).astype(np.float64)
    filled = np.nan_to_num(filled - filled.mean(axis=0, keepdims=True))
    values, vectors = np.linalg.eigh(filled @ filled.T)
    order = np.argsort(values)[::-1][:count]
    values, vectors = np.maximum(values[order], 0.0), vectors[:, order]
    examples = (filled.T @ vectors) / np.sqrt(np.maximum(values, 1e-12))
    for c in range(len(order)):  # a sign convention: the task side's largest loading positive
        if vectors[np.argmax(np.abs(vectors[:, c])), c] < 0:
            vectors[:, c], examples[:, c] = -vectors[:, c], -examples[:, c]
    return vectors, examples, values / max(float((filled ** 2).sum()), 1e-12)


def overview(z: np.ndarray, sources: np.ndarray, order_key: np.ndarray, columns: int) -> dict:
    """Z averaged into bins of examples: per source (in first-seen order), examples sorted by `order_key`
    and cut into bins in proportion to the source's size (at most `columns` bins in all). `sources`: each
    source's name with its first and last bin, for the axis labels."""
    names = list(dict.fromkeys(sources.tolist()))
    n = len(sources)
    labels, blocks, spans = [], [], []
    for name in names:
        members = np.flatnonzero(sources == name)
        members = members[np.argsort(order_key[members], kind="stable")]
        bins = max(1, min(len(members), int(round(columns * len(members) / n))))
        for b, part in enumerate(np.array_split(members, bins)):
            labels.append(f"{name} {b + 1}/{bins}")
            with warnings.catch_warnings():  # a bin without a finite entry is NaN (drawn blank)
                warnings.simplefilter("ignore", RuntimeWarning)
                blocks.append(np.nanmean(z[:, part], axis=1))
        spans.append([name, len(labels) - bins, len(labels) - 1])
    values = np.stack(blocks, axis=1) if blocks else np.zeros((len(z), 0))
    rounded = np.round(values, 4)
    return {"columns": labels, "sources": spans,
            "values": [[None if not np.isfinite(v) else float(v) for v in row] for row in rounded]}


def _text(value, limit: int | None = TEXT_CHARS) -> str:
    text = "" if value is None or (isinstance(value, float) and np.isnan(value)) else str(value)
    return text if limit is None or len(text) <= limit else text[:limit] + "…"


def _texts(record) -> dict:
    """An example's texts as the page shows them: `text` for a plain-text (`lm`) example, `prompt` and
    `response` for a `chat` one; `length`, the whole text's characters, where the page carries less."""
    fields = ("text",) if record.get("kind") == "lm" else ("prompt", "response")
    whole = [_text(record.get(field), limit=None) for field in fields]
    texts = {field: _text(value) for field, value in zip(fields, whole)}
    if any(len(value) > TEXT_CHARS for value in whole):
        texts["length"] = sum(len(value) for value in whole)
    return texts


def _float(value) -> float | None:
    return None if value is None or not np.isfinite(value) else round(float(value), 4)


class Carried:
    """The examples carried in full: their corpus indices, in the order first asked for."""

    def __init__(self):
        self.index: dict[int, None] = {}

    def add(self, indices) -> None:
        for i in np.asarray(indices, dtype=np.int64).tolist():
            self.index.setdefault(i, None)

    def array(self) -> np.ndarray:
        return np.fromiter(self.index, dtype=np.int64)


def build(matrix, shards: list[str] | None, settings: dict, predictions: dict | None = None,
          forecast: str | None = None, transitions: str | None = None, arms: dict | None = None) -> dict:
    """The page's data. `predictions`: {task: (predicted row, half-width row or None, what predicted it)}
    over the matrix's columns; `forecast`: the forecast file (its rows replace a split's prediction of a
    `check` task, and are the rows shown of a task that is only forecast); `transitions`: the items'
    transitions; `arms`: {task: {arm: path of its held-out scores}}, `none` among the arms. Without
    `shards` (an imported matrix: the authors released no texts) examples are shown by id and source."""
    from .data.upstream import read_ids, read_rows

    z = matrix.values
    ids = matrix.example_ids
    if shards is not None and not np.array_equal(read_ids(shards), ids):
        raise ValueError("the matrix's examples are not the upstream shards': rebuild it")
    top, improved = settings["top_forgotten"], settings["top_improved"]
    modes = settings.get("modes", {})
    carried = Carried()
    task_rows = {t: z[i] for i, t in enumerate(matrix.tasks)}
    completed = {t: _float(matrix.cells["halfwidth"][t]) for t in matrix.tasks} if matrix.completed else {}
    predicted = dict(predictions or {})
    if forecast:
        predicted.update(_forecast_rows(forecast, ids))
    for task, (row, _, _) in predicted.items():
        task_rows.setdefault(task, row)  # a forecast-only task: its forecast is the row shown
    tasks = list(task_rows)
    task_top = {}
    for task, row in task_rows.items():
        finite = np.flatnonzero(np.isfinite(row))
        order = finite[np.argsort(-row[finite], kind="stable")]
        task_top[task] = {"forgotten": order[:top], "improved": order[::-1][:improved]}
        carried.add(task_top[task]["forgotten"])
        carried.add(task_top[task]["improved"])
    count = min(settings["components"], max(1, len(matrix.tasks) - 1))
    task_load, example_load, share = components(z, count)
    comps = []
    for c in range(count):
        best_tasks = np.argsort(-np.abs(task_load[:, c]))[: settings["component_tasks"]]
        best_examples = np.argsort(-example_load[:, c])[: settings["component_examples"]]
        carried.add(best_examples)
        comps.append({"index": c + 1, "share": round(float(share[c]), 4),
                      "tasks": [[matrix.tasks[i], round(float(task_load[i, c]), 4)] for i in best_tasks],
                      "examples": [[str(ids[i]), round(float(example_load[i, c]), 4)] for i in best_examples]})
    protected = _protected(arms or {}, ids, settings["top_protected"], carried)
    items = _transitions(transitions) if transitions else None

    chosen = carried.array()
    rows = read_rows(shards, chosen) if len(chosen) and shards is not None else None
    examples = {}
    for k, i in enumerate(chosen):
        record = rows.iloc[k] if rows is not None else {}
        example = {"source": str(matrix.sources[i]), "kind": _text(record.get("kind")),
                   **(_texts(record) if rows is not None else {}), "base_nll": _float(matrix.base_nll[i]),
                   "z": [_float(task_rows[t][i]) for t in tasks],
                   "loadings": [round(float(example_load[i, c]), 4) for c in range(count)]}
        if items is not None and ids[i] in items["index"]:
            column = items["index"][ids[i]]
            example["transitions"] = [TRANSITIONS.get(items["values"][r][column]) for r in range(len(items["tasks"]))]
        examples[str(ids[i])] = example

    def entries(task, which):
        row = task_rows[task]
        pred = predicted.get(task)
        out = []
        for i in task_top[task][which]:
            entry = {"id": str(ids[i]), "z": _float(row[i]), "base_nll": _float(matrix.base_nll[i]),
                     "after_nll": _float(matrix.base_nll[i] + row[i])}
            if task in completed and not matrix.measured[matrix.tasks.index(task), i]:
                entry["completed"] = completed[task]  # a fractional map's completed cell: its half-width
            if pred is not None:
                entry["predicted"] = _float(pred[0][i])
                entry["halfwidth"] = _float(pred[1][i]) if pred[1] is not None else None
            if items is not None and task in items["tasks"] and ids[i] in items["index"]:
                code = items["values"][items["tasks"].index(task)][items["index"][ids[i]]]
                entry["transition"] = TRANSITIONS.get(code)
            out.append(entry)
        return out

    order_key = example_load[:, 0] if count else np.zeros(len(ids))
    checkpoints = settings.get("checkpoints", {})  # rows that are checkpoints forgetmap did not train
    return {
        "model": settings["model"], "n_examples": int(len(ids)), "texts": shards is not None, "tasks": [
            {"name": t, "category": settings["categories"].get(t) or matrix.categories.get(t, ""),
             "kind": "checkpoint" if t in checkpoints else modes.get(t, settings.get("kind", "measured")),
             "checkpoint": checkpoints.get(t),
             "predicted_by": predicted[t][2] if t in predicted else None,
             "mean": _float(np.nanmean(task_rows[t])), "forgotten": _float(np.nanmean(task_rows[t] > 0)),
             **({"measured_share": _float(np.mean(matrix.measured[matrix.tasks.index(t)])),
                 "completed_halfwidth": completed[t], "level": matrix.cells["level"]} if t in completed else {})}
            for t in tasks],
        "overview": {"tasks": tasks, **overview(np.stack([task_rows[t] for t in tasks]), matrix.sources, order_key,
                                                 settings["columns"])},
        "task_top": {t: {"forgotten": entries(t, "forgotten"), "improved": entries(t, "improved")} for t in tasks},
        "examples": examples, "components": comps, "protected": protected,
        "transition_tasks": items["tasks"] if items is not None else [],
        "carried": int(len(chosen)),
    }


def _row(path, column: str, ids: np.ndarray) -> np.ndarray:
    """One column of a parquet keyed by `example_id`, aligned with the matrix's examples (float32)."""
    import pandas as pd

    frame = pd.read_parquet(path, columns=["example_id", column]).set_index("example_id")
    return frame[column].reindex(ids).to_numpy(np.float32)


def _widest_halfwidths(path, ids: np.ndarray, task: str | None = None) -> np.ndarray | None:
    """The half-widths of the widest interval level a file records (`levels` in its metadata: a forecast
    or a prediction's intervals file), aligned with the matrix's examples; `task`'s own where the file has them (a
    fractional map's prediction); None without intervals."""
    from .io import read_metadata
    from .predict.protocol import interval_column, interval_column_of

    levels = read_metadata(path).get("levels") or []
    if not levels:
        return None
    column = interval_column(max(levels)) if task is None else interval_column_of(path, max(levels), task)
    return _row(path, column, ids)


def _forecast_rows(path: str, ids: np.ndarray) -> dict:
    """Each forecast task's row and the widest interval's half-widths, aligned with the matrix's examples."""
    from .io import read_metadata

    meta = read_metadata(path)
    width = _widest_halfwidths(path, ids)
    return {t: (_row(path, t, ids), width, f"forecast ({meta['method']}, k = {meta['k']})") for t in meta["tasks"]}


def _transitions(path: str) -> dict:
    from .matrix import ForgettingMatrix

    t = ForgettingMatrix.read(path)
    values = np.where(np.isfinite(t.values), t.values, -1).astype(np.int8)
    return {"tasks": t.tasks, "index": {str(i): k for k, i in enumerate(t.example_ids)}, "values": values}


def _protected(arms: dict, ids: np.ndarray, count: int, carried: Carried) -> dict:
    """Per task and arm, the held-out examples whose NLL rose least against plain fine-tuning's
    (`none`): ΔNLL_none − ΔNLL_arm, largest first (the base NLL cancels); each run's first fine-tune as
    trained (not its interpolations)."""
    from .mitigation.evaluate import read_primary

    position = {str(e): k for k, e in enumerate(ids)}
    out = {}
    for task, paths in arms.items():
        if "none" not in paths:
            continue
        plain = read_primary(paths["none"]).set_index("example_id")["nll"]
        out[task] = {}
        for arm, path in paths.items():
            if arm == "none":
                continue
            scores = read_primary(path).set_index("example_id")["nll"]
            gain = (plain - scores.reindex(plain.index)).dropna().sort_values(ascending=False)[:count]
            out[task][arm] = [[str(e), round(float(v), 4)] for e, v in gain.items()]
            carried.add([position[str(e)] for e in gain.index if str(e) in position])
    return out


def render(data: dict) -> str:
    """The page: the template (assets/explorer.html) with Plotly's JavaScript, the app (assets/explorer.js)
    and the data as JSON put in at its markers, each once and in order (so no inserted text is searched)."""
    from plotly.offline import get_plotlyjs

    assets = Path(__file__).parent / "assets"
    payload = json.dumps(data, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
    pieces = {"{{MODEL}}": _html_escape(data["model"]), "/*PLOTLY*/": get_plotlyjs(), "{{DATA}}": payload,
              "/*APP*/": (assets / "explorer.js").read_text()}
    out, rest = [], (assets / "explorer.html").read_text()
    while True:
        found = [(rest.find(marker), marker) for marker in pieces if rest.find(marker) >= 0]
        if not found:
            return "".join(out) + rest
        at, marker = min(found)
        out += [rest[:at], pieces[marker]]
        rest = rest[at + len(marker):]


def _html_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def run_page(checks: str, shards: list[str] | None = None, top: int = 20) -> dict:
    """The data of a trainer run's page: its monitor's checks as a timeline (forgetmap.monitor.timeline), with
    the texts of the examples it carries."""
    from .monitor.timeline import run_timeline

    data, records = run_timeline(checks, shards, top)
    for record in records:
        if str(record["example_id"]) in data["examples"]:
            data["examples"][str(record["example_id"])].update(kind=_text(record.get("kind")), **_texts(record))
    return data


def explorer_command(out: str, settings: dict | None = None, matrix: str | None = None,
                     shards: list[str] | None = None, forecast: str | None = None, transitions: str | None = None,
                     predictions: list[str] | None = None, arm_scores: list[str] | None = None,
                     trajectory: str | None = None, checks: str | None = None) -> dict:
    """`forgetmap explorer`: the page for one model (`settings`, `matrix`), or for one trainer run's forgetting
    monitor (`checks`: its output_dir/forgetmap-monitor; `shards`: the upstream, for the texts). `predictions`:
    TASK=prediction-directory pairs (the seed `SEED`, and its intervals where written); `arm_scores`:
    TASK:ARM=held-out-scores pairs; `trajectory`: the monitored fine-tunes' checks."""
    from .errors import UsageError
    from .io import atomic_path, read_metadata
    from .matrix import ForgettingMatrix
    from .predict.protocol import intervals_file, seed_file

    if checks is not None:
        if matrix is not None:
            raise UsageError("forgetmap explorer: --checks opens a trainer run's checks, --matrix a model's matrix; "
                              "give one")
        data = run_page(checks, shards)
        page = render(data)
        with atomic_path(out) as tmp:
            tmp.write_text(page, encoding="utf-8")
        return {"checks": len(data["timeline"]["steps"]), "examples_carried": data["carried"],
                "bytes": len(page.encode())}
    if matrix is None or settings is None:
        raise UsageError("forgetmap explorer: give --settings and --matrix (a model's page) or --checks (a trainer "
                          "run's)")
    forgetting = ForgettingMatrix.read(matrix)
    ids = forgetting.example_ids
    rows = {}
    for pair in predictions or []:
        task, directory = pair.split("=", 1)
        path, intervals = seed_file(directory, SEED), intervals_file(directory, SEED)
        meta = read_metadata(path)
        rows[task] = (_row(path, task, ids), _widest_halfwidths(intervals, ids, task) if intervals.exists() else None,
                      f"{meta['method']} (split {meta['split']}, k = {np.shape(meta['known_columns'])[-1]})")
    arms: dict = {}
    for pair in arm_scores or []:
        key, path = pair.split("=", 1)
        task, arm = key.split(":", 1)
        arms.setdefault(task, {})[arm] = path
    data = build(forgetting, shards, settings, rows, forecast, transitions, arms)
    if trajectory:
        from .monitor.timeline import task_timelines

        data["timelines"] = task_timelines(trajectory)
    page = render(data)
    with atomic_path(out) as tmp:
        tmp.write_text(page, encoding="utf-8")
    return {"tasks": len(data["tasks"]), "examples_carried": data["carried"], "bytes": len(page.encode())}
