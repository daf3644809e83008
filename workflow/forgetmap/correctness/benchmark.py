"""A benchmark's items, tokenised as the harness that defines them tokenises them, for scoring on live weights
(the forgetting monitor's items: forgetmap.monitor.items).

Two sources:

- **an lm-eval task** (`from_lm_eval`: `mmlu`, `arc_easy`, `gsm8k`, a group, or a task YAML of one's own under
  `include_path`): its documents, prompts, options, gold answers and few-shot contexts come from
  lm-evaluation-harness's own task API (`build_all_requests`), and each (context, option) pair is tokenised as its
  `HFLM` does (`_encode_pair`: the context's trailing spaces moved to the option, the whole encoded and split at
  the context's length; an empty context conditioned on the BOS token, or EOS), so an option's log-likelihood is
  lm-eval's. With `chat_template`, the question is asked through the tokenizer's chat template as
  `lm_eval --apply_chat_template` asks it.
- **a forgetmap correctness stage** (`from_frame`): upstream rows with an `answer` (and `choices` for multiple
  choice), asked as the workflow's score jobs ask them (forgetmap.correctness.prompts: plain few-shot or the chat
  template).

A multiple-choice item is right when its gold option has the highest summed log-likelihood (`acc`) or per
character (`acc_norm`), ties to the first, as lm-eval decides. A generated answer is watched only where the user
asks (`generate=True`: it costs a decode loop per check): greedy decoding up to the item's budget, ended at its
stop strings (forgetmap.generation), then judged as its harness judges it (`Generated.judge`): an lm-eval
`generate_until` task's own filters (its first filter pipeline, or the one named) and its first metric through its
`process_results` (exact match for GSM8K's and most; a metric that is not 0 or 1 per item is refused); a
forgetmap corpus's free-form item by the greedy measurement's rule (cut at the first stop string, SQuAD-normalised
exact match). Sampled answers are not watched: a task that asks for sampling is refused.
"""

from __future__ import annotations

import difflib
import functools
import logging
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..errors import DataError
from .items import METRICS, Item, choose, option_scores

log = logging.getLogger(__name__)
LM_EVAL_MAX_GEN_TOKS = 256  # lm-eval's HFLM's answer budget where a task names none


@dataclass(frozen=True)
class Generated:
    """How a generated item is answered and judged: greedy decoding up to `max_new_tokens` (less where the
    context leaves fewer of the model's positions), ended at `stop`; `judge(text)`: is the answer right."""

    stop: tuple[str, ...]
    max_new_tokens: int
    judge: Callable[[str], bool]


@dataclass
class Benchmark:
    ids: np.ndarray            # (N,) str: lm-eval "task/doc_id", or the upstream example_id
    sources: np.ndarray        # (N,) str: the benchmark each item belongs to (lm-eval task, upstream source)
    items: list[Item]          # tokenised, in `ids` order: multiple choice, or free form (generated)
    metric: str = "acc"
    origin: dict = field(default_factory=dict)  # where the items came from, recorded with each check
    generated: dict[int, Generated] = field(default_factory=dict)  # a free-form item's answering, by position

    def __post_init__(self):
        if self.metric not in METRICS:
            raise DataError(f"metric {self.metric!r}: the monitor decides options by {' or '.join(METRICS)}")
        if not self.items:
            raise DataError(f"{self.describe()}: no item to watch")
        for i, (item_id, item) in enumerate(zip(self.ids, self.items)):
            if item.free_form:
                if i not in self.generated:
                    raise DataError(f"{self.describe()}: item {item_id!r} is free form, and nothing says how its "
                                    f"answer is generated and judged (Benchmark.generated)")
                continue
            if not 0 <= item.gold < len(item.options):
                raise DataError(f"{self.describe()}: item {item_id!r} has answer index {item.gold} and "
                                f"{len(item.options)} options ({item.texts[:4]})")
            if len(item.options) < 2:
                raise DataError(f"{self.describe()}: item {item_id!r} has {len(item.options)} option(s): a "
                                f"multiple-choice item needs at least two")

    def __len__(self) -> int:
        return len(self.items)

    def describe(self) -> str:
        if "lm_eval" in self.origin:
            return f"lm-eval task(s) {', '.join(self.origin['lm_eval'])}"
        return self.origin.get("where", "the benchmark's items")

    @property
    def options(self) -> np.ndarray:
        """(N,) each item's number of options (k: the chance of a guess is 1/k; 0 for a generated answer)."""
        return np.array([it.k for it in self.items], dtype=np.int16)

    def decide(self, values: list, which: np.ndarray | None = None) -> np.ndarray:
        """(len(which),) int8: whether each item is right, from its options' summed log-likelihoods (multiple
        choice) or its generated text (free form), in `which` order."""
        which = np.arange(len(self.items)) if which is None else np.asarray(which)
        out = np.zeros(len(which), dtype=np.int8)
        for n, (i, value) in enumerate(zip(which, values)):
            item = self.items[i]
            if item.free_form:
                out[n] = bool(self.generated[i].judge(value))
            else:
                out[n] = choose(option_scores(np.asarray(value, dtype=np.float64), item.texts, self.metric),
                                item.gold)[1]
        return out

    def margins(self, values: list, which: np.ndarray | None = None) -> np.ndarray:
        """(len(which),) float64: each item's gold option's score less the best other's (right where above 0;
        forgetmap.correctness.margins), NaN for a free-form item, in `which` order."""
        which = np.arange(len(self.items)) if which is None else np.asarray(which)
        out = np.full(len(which), np.nan)
        for n, (i, value) in enumerate(zip(which, values)):
            item = self.items[i]
            if not item.free_form:
                out[n] = choose(option_scores(np.asarray(value, dtype=np.float64), item.texts, self.metric), item.gold)[2]
        return out

    def record(self) -> dict:
        """What a map or a check file records of the items (their count, metric and origin)."""
        return {"items": len(self.items), "metric": self.metric, "generated": len(self.generated), **self.origin}


# --- lm-evaluation-harness --------------------------------------------------------------------------------------

class LmEvalEncoding:
    """lm-eval's `HFLM` tokenisation of a (context, continuation) request (lm_eval.api.model._encode_pair and
    HFLM.tok_encode with its default `add_bos_token`)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.prefix = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
        self.prefix_text = tokenizer.decode(self.prefix) if self.prefix is not None else None

    def encode(self, text: str) -> list[int]:
        starts_with_bos = bool(self.prefix_text) and text.startswith(self.prefix_text)
        return self.tokenizer.encode(text, **({"add_special_tokens": False} if starts_with_bos else {}))

    def pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        if context == "":
            options = self.tokenizer.encode(continuation, add_special_tokens=False)
            return ([self.prefix], options) if self.prefix != options[0] else (options[:1], options[1:])
        spaces = len(context) - len(context.rstrip())
        if spaces:
            continuation, context = context[-spaces:] + continuation, context[:-spaces]
        whole, head = self.encode(context + continuation), self.encode(context)
        return head, whole[len(head):]


def chat_template_of(tokenizer):
    """lm-eval's `HFLM.apply_chat_template`: the conversation through the tokenizer's template, as text."""
    def apply(history, add_generation_prompt: bool = True) -> str:
        return tokenizer.apply_chat_template(history, tokenize=False, add_generation_prompt=add_generation_prompt,
                                             continue_final_message=not add_generation_prompt)
    return apply


@functools.lru_cache(maxsize=8)
def task_manager(include_path: tuple[str, ...] | None):
    """lm-eval's index of its tasks and those under `include_path` (reading every task YAML it ships takes
    seconds), built once per include path in a process; each `load` reads the tasks' YAMLs afresh."""
    try:
        from lm_eval.tasks import TaskManager
    except ImportError as exc:  # pragma: no cover - the evals extra
        raise DataError("watching an lm-eval task needs lm-evaluation-harness: pip install 'forgetmap[evals]'") from exc
    return TaskManager(include_path=list(include_path) if include_path else None)


def from_lm_eval(tasks, tokenizer, *, include_path=None, num_fewshot: int | None = None, limit: int | None = None,
                 metric: str = "acc", chat_template: bool = False, fewshot_seed: int = 1234, generate: bool = False,
                 max_gen_toks: int | None = None, filter: str | None = None) -> Benchmark:
    """The items of lm-eval task(s) (`tasks`: a name or a list; groups such as `mmlu` are opened into their tasks;
    `include_path`: a directory of task YAMLs of one's own), tokenised for `tokenizer` as lm-eval's HF model
    tokenises them. `num_fewshot`: solved examples before each question (default: the task's); `limit`: the first
    items of each task; `fewshot_seed`: lm-eval's default (1234). Multiple-choice tasks always; `generate_until`
    tasks with `generate` (their stop strings `until`, their answer budget or `max_gen_toks`, greedy; judged by
    the filter pipeline named `filter`, default the task's first, and the task's first metric)."""
    names = [tasks] if isinstance(tasks, str) else list(tasks)
    paths = tuple(str(p) for p in np.atleast_1d(include_path)) if include_path else None
    manager = task_manager(paths)
    if not set(names) <= set(manager.all_tasks):  # a task YAML written since the index was built: indexed again
        task_manager.cache_clear()
        manager = task_manager(paths)
    known = set(manager.all_tasks)
    for name in names:
        if name not in known:
            near = difflib.get_close_matches(name, sorted(known), n=3)
            raise DataError(f"lm-eval task {name!r} does not exist{' (did you mean ' + ', '.join(near) + '?)' if near else ''}"
                            f"{'' if include_path else '; a task YAML of your own needs its directory (include_path)'}")
    try:
        leaves = _leaf_tasks(manager, names)  # groups (mmlu) opened into their tasks
    except (IndexError, KeyError, TypeError, ValueError) as exc:  # a task whose first document lm-eval cannot read
        raise DataError(f"lm-eval could not load task(s) {', '.join(names)}: {type(exc).__name__}: {exc}") from None
    encoding = LmEvalEncoding(tokenizer)
    ids, sources, items, generated, skipped = [], [], [], {}, []
    template = chat_template_of(tokenizer) if chat_template else None
    watched = ("multiple_choice", "generate_until") if generate else ("multiple_choice",)
    for name, task in leaves:
        if task.OUTPUT_TYPE not in watched:
            skipped.append(f"{name} ({task.OUTPUT_TYPE})")
            continue
        answering = _answering(task, name, tokenizer, max_gen_toks, filter) \
            if task.OUTPUT_TYPE == "generate_until" else None
        if num_fewshot is not None:
            task.set_config(key="num_fewshot", value=num_fewshot)
        task.set_fewshot_seed(seed=fewshot_seed)
        task.build_all_requests(limit=limit, rank=0, world_size=1, apply_chat_template=chat_template,
                                chat_template=template, tokenizer_name=getattr(tokenizer, "name_or_path", ""))
        by_doc: dict[int, list] = {}
        for instance in task.instances:
            by_doc.setdefault(instance.doc_id, []).append(instance)
        for doc_id, requests in sorted(by_doc.items()):
            requests.sort(key=lambda r: r.idx)
            where = f"lm-eval task {name!r}, document {doc_id}"
            if answering is None:
                items.append(_option_item(task, requests, encoding, where))
            else:
                context, kwargs = requests[0].arguments
                stop, budget = answering(kwargs, where)
                generated[len(items)] = Generated(stop, budget, LmEvalJudge(task, requests[0].doc, filter, where))
                items.append(Item(np.asarray(encoding.encode(context), dtype=np.int64), [],
                                  [str(task.doc_to_target(requests[0].doc))], 0, True))
            ids.append(f"{name}/{doc_id}")
            sources.append(name)
        task._instances = None  # lm-eval keeps every request: freed
    if not items:
        raise DataError(f"lm-eval task(s) {', '.join(names)}: no items to watch ({'; '.join(skipped) or 'no documents'}"
                        f"); the monitor watches options scored by log-likelihood (output_type multiple_choice), and "
                        f"generated answers (generate_until) where asked (generate=True)")
    if skipped:
        log.info("lm-eval tasks left out (%s): %s", "neither multiple choice nor generated" if generate else
                 "not multiple choice; generate=True watches generated answers too", ", ".join(skipped))
    origin = {"lm_eval": names, "num_fewshot": num_fewshot, "limit": limit, "chat_template": chat_template,
              "include_path": None if include_path is None else [str(p) for p in np.atleast_1d(include_path)],
              **({"generate": True, "max_gen_toks": max_gen_toks, "filter": filter} if generated else {})}
    return Benchmark(np.asarray(ids), np.asarray(sources), items, metric, origin, generated)


def _leaf_tasks(manager, names: list[str]) -> list[tuple[str, object]]:
    """(name, Task) of every task the names hold, groups opened: `TaskManager.load` (lm-eval 0.4.13), or without it
    (0.4.11, which Axolotl 0.19 pins) the nested dictionary of `get_task_dict`, whose leaves are keyed by name."""
    if hasattr(manager, "load"):
        return list(manager.load(names)["tasks"].items())
    from lm_eval.tasks import get_task_dict

    leaves = []

    def walk(tasks: dict) -> None:
        for key, value in tasks.items():
            if isinstance(value, dict):
                walk(value)
            elif value is not None:
                leaves.append((key, value))
    walk(get_task_dict(names, manager))
    return leaves


def _option_item(task, requests, encoding: LmEvalEncoding, where: str) -> Item:
    """A multiple-choice document's item: its context and each option tokenised as HFLM tokenises the pair."""
    doc = requests[0].doc
    choices = [str(c) for c in task.doc_to_choice(doc)]
    gold = task.doc_to_target(doc)
    if isinstance(gold, (list, tuple)):
        raise DataError(f"{where}: {len(gold)} gold answers; the monitor watches items with one")
    if isinstance(gold, str) and not gold.lstrip("-").isdigit():
        if gold not in choices:
            raise DataError(f"{where}: its answer {gold!r} is not one of its options {choices[:4]}")
        gold = choices.index(gold)
    gold = int(gold)
    context = requests[0].arguments[0]
    pairs = [encoding.pair(context, r.arguments[1]) for r in requests]
    if not 0 <= gold < len(pairs):
        raise DataError(f"{where}: its answer index {gold} is outside its {len(pairs)} options {choices[:4]}")
    return Item(np.asarray(pairs[0][0], dtype=np.int64), [np.asarray(p[1], dtype=np.int64) for p in pairs], choices,
                gold, False)


def _answering(task, name: str, tokenizer, max_gen_toks: int | None, filter: str | None):
    """A generate_until task's answering, checked before its requests are built: the filter pipeline exists; per
    document, (its stop strings with EOS's text added, its answer budget) as HFLM.generate_until reads them from
    the request's generation kwargs, refusing sampling."""
    from lm_eval.models.utils import handle_stop_sequences, normalize_gen_kwargs

    names = [f.name for f in getattr(task, "_filters", [])]
    if filter is not None and filter not in names:
        raise DataError(f"lm-eval task {name!r} has no filter pipeline {filter!r} (it has {', '.join(names) or 'none'})")
    if not getattr(task, "_metric_fn_list", None) and not callable(getattr(task.config, "process_results", None)):
        raise DataError(f"lm-eval task {name!r} names no metric: its generated answers cannot be judged")
    eos = tokenizer.decode(tokenizer.eos_token_id) if tokenizer.eos_token_id is not None else None

    def read(kwargs: dict, where: str) -> tuple[tuple[str, ...], int]:
        kwargs = normalize_gen_kwargs(dict(kwargs or {}), LM_EVAL_MAX_GEN_TOKS)
        if kwargs.get("do_sample") or float(kwargs.get("temperature") or 0) > 0:
            raise DataError(f"{where}: the task asks for sampled answers (do_sample {kwargs.get('do_sample')}, "
                            f"temperature {kwargs.get('temperature')}); the monitor generates greedily: set "
                            f"do_sample: false in its generation_kwargs, or watch another task")
        stop = tuple(s for s in handle_stop_sequences(kwargs.get("until"), eos=eos) if s)
        return stop, int(max_gen_toks or kwargs["max_gen_toks"])
    return read


class LmEvalJudge:
    """Is a generated answer right, as lm-eval judges it: the text through the task's filter pipeline (named, or
    its first), then the task's `process_results` on the document, its first metric (0 or 1 per item)."""

    def __init__(self, task, doc: dict, filter: str | None, where: str):
        self.task, self.doc, self.where = task, doc, where
        ensembles = list(getattr(task, "_filters", []))
        self.ensemble = next((f for f in ensembles if f.name == filter), None) if filter else \
            (ensembles[0] if ensembles else None)

    def __call__(self, text: str) -> bool:
        from types import SimpleNamespace

        response = text
        if self.ensemble is not None:
            instance = SimpleNamespace(resps=[text], doc=self.doc, filtered_resps={})
            self.ensemble.apply([instance])
            response = instance.filtered_resps[self.ensemble.name]
        results = self.task.process_results(self.doc, [response])
        metric = next(iter(getattr(self.task, "_metric_fn_list", None) or {}), None) or next(iter(results))
        value = results[metric]
        if value not in (0, 1):
            raise DataError(f"{self.where}: its metric {metric!r} gave {value!r} for a generated answer; the monitor "
                            f"watches items right or wrong (a metric of 0 or 1 per item, such as exact_match)")
        return bool(value)


# --- a forgetmap correctness stage --------------------------------------------------------------------------------

def from_frame(frame, tokenizer, settings: dict, where: str = "the items", generate: bool = False) -> Benchmark:
    """The items of upstream rows (`answer`, and `choices` for multiple choice), asked as the workflow's correctness
    stage asks them (`settings`: its prompt settings: chat template or plain, shots, target delimiter, metric; with
    `generate`, its `stop` strings and `max_new_tokens` too). Free-form items are watched with `generate`, judged
    as the greedy measurement judges them; otherwise left out, and the count logged."""
    from .items import ExactMatch, encode_items

    missing = [c for c in ("example_id", "source", "prompt", "answer", "choices") if c not in frame.columns]
    if missing:
        raise DataError(f"{where}: missing column(s) {', '.join(missing)}: items need a prompt, an answer and "
                        f"their options (choices: empty for a free-form item)")
    for row in frame.itertuples():
        options = row.choices
        if options is not None and len(options) and row.answer is not None and str(row.answer) not in map(str, options):
            raise DataError(f"{where}: item {row.example_id!r}: its answer {row.answer!r} is not one of its "
                            f"options {list(options)[:4]}")
    rows, items = encode_items(tokenizer, frame, settings)
    chosen = [j for j, it in enumerate(items) if generate or not it.free_form]
    if len(items) > len(chosen):
        log.info("%s: %d free-form item(s) left out: generate=True watches generated answers too", where,
                 len(items) - len(chosen))
    generated = {}
    if any(items[j].free_form for j in chosen):
        stop = tuple(settings["stop"])
        generated = {n: Generated(stop, int(settings["max_new_tokens"]), ExactMatch(items[j].texts[0], stop))
                     for n, j in enumerate(chosen) if items[j].free_form}
    picked = rows[chosen]
    return Benchmark(frame["example_id"].to_numpy().astype(str)[picked], frame["source"].to_numpy().astype(str)[picked],
                     [items[j] for j in chosen], settings.get("metric", "acc"), {"where": where}, generated)
