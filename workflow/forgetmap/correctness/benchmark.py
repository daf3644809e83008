"""A benchmark's multiple-choice items, tokenised as the harness that defines them tokenises them, for scoring
on live weights (the forgetting monitor's items: forgetmap.monitor.items).

Two sources:

- **an lm-eval task** (`from_lm_eval`: `mmlu`, `arc_easy`, a group, or a task YAML of one's own under
  `include_path`): its documents, prompts, options, gold answers and few-shot contexts come from
  lm-evaluation-harness's own task API (`build_all_requests`), and each (context, option) pair is tokenised as its
  `HFLM` does (`_encode_pair`: the context's trailing spaces moved to the option, the whole encoded and split at
  the context's length; an empty context conditioned on the BOS token, or EOS), so an option's log-likelihood is
  lm-eval's. With `chat_template`, the question is asked through the tokenizer's chat template as
  `lm_eval --apply_chat_template` asks it.
- **a forgetmap correctness stage** (`from_frame`): upstream rows with `choices` and `answer`, asked as the
  workflow's score jobs ask them (forgetmap.correctness.prompts: plain few-shot or the chat template).

Only multiple-choice items are watched: each is right when its gold option has the highest summed
log-likelihood (`acc`) or per character (`acc_norm`), ties to the first, as lm-eval decides. Free-form items
(generated answers) are left out, and the count is logged.
"""

from __future__ import annotations

import difflib
import logging
from dataclasses import dataclass, field

import numpy as np

from ..errors import DataError
from .items import METRICS, Item, choose, option_scores

log = logging.getLogger(__name__)


@dataclass
class Benchmark:
    ids: np.ndarray            # (N,) str: lm-eval "task/doc_id", or the upstream example_id
    sources: np.ndarray        # (N,) str: the benchmark each item belongs to (lm-eval task, upstream source)
    items: list[Item]          # tokenised, in `ids` order; every one multiple choice
    metric: str = "acc"
    origin: dict = field(default_factory=dict)  # where the items came from, recorded with each check

    def __post_init__(self):
        if self.metric not in METRICS:
            raise DataError(f"metric {self.metric!r}: the monitor decides items by {' or '.join(METRICS)}")
        if not self.items:
            raise DataError(f"{self.describe()}: no multiple-choice item to watch")
        for item_id, item in zip(self.ids, self.items):
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
        """(N,) each item's number of options (k: the chance of a guess is 1/k)."""
        return np.array([len(it.options) for it in self.items], dtype=np.int16)

    def decide(self, logliks: list[np.ndarray], which: np.ndarray | None = None) -> np.ndarray:
        """(len(which),) int8: whether each item's gold option wins, from its options' summed log-likelihoods."""
        which = np.arange(len(self.items)) if which is None else np.asarray(which)
        return np.array([choose(option_scores(np.asarray(values, dtype=np.float64), self.items[i].texts, self.metric),
                                self.items[i].gold)[1] for i, values in zip(which, logliks)], dtype=np.int8)

    def record(self) -> dict:
        """What a map or a check file records of the items (their count, metric and origin)."""
        return {"items": len(self.items), "metric": self.metric, **self.origin}


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


def from_lm_eval(tasks, tokenizer, *, include_path=None, num_fewshot: int | None = None, limit: int | None = None,
                 metric: str = "acc", chat_template: bool = False, fewshot_seed: int = 1234) -> Benchmark:
    """The multiple-choice items of lm-eval task(s) (`tasks`: a name or a list; groups such as `mmlu` are opened
    into their tasks; `include_path`: a directory of task YAMLs of one's own), tokenised for `tokenizer` as
    lm-eval's HF model tokenises them. `num_fewshot`: solved examples before each question (default: the task's);
    `limit`: the first items of each task; `fewshot_seed`: lm-eval's default (1234)."""
    try:
        from lm_eval.tasks import TaskManager
    except ImportError as exc:  # pragma: no cover - the evals extra
        raise DataError("watching an lm-eval task needs lm-evaluation-harness: pip install 'forgetmap[evals]'") from exc

    names = [tasks] if isinstance(tasks, str) else list(tasks)
    manager = TaskManager(include_path=[str(p) for p in np.atleast_1d(include_path)] if include_path else None)
    known = set(manager.all_tasks)
    for name in names:
        if name not in known:
            near = difflib.get_close_matches(name, sorted(known), n=3)
            raise DataError(f"lm-eval task {name!r} does not exist{' (did you mean ' + ', '.join(near) + '?)' if near else ''}"
                            f"{'' if include_path else '; a task YAML of your own needs its directory (include_path)'}")
    try:
        leaves = list(manager.load(names)["tasks"].items())  # groups (mmlu) opened into their tasks
    except (IndexError, KeyError, TypeError, ValueError) as exc:  # a task whose first document lm-eval cannot read
        raise DataError(f"lm-eval could not load task(s) {', '.join(names)}: {type(exc).__name__}: {exc}") from None
    encoding = LmEvalEncoding(tokenizer)
    ids, sources, items, skipped = [], [], [], []
    template = chat_template_of(tokenizer) if chat_template else None
    for name, task in leaves:
        if task.OUTPUT_TYPE != "multiple_choice":
            skipped.append(f"{name} ({task.OUTPUT_TYPE})")
            continue
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
            doc = requests[0].doc
            choices = [str(c) for c in task.doc_to_choice(doc)]
            gold = task.doc_to_target(doc)
            where = f"lm-eval task {name!r}, document {doc_id}"
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
            items.append(Item(np.asarray(pairs[0][0], dtype=np.int64),
                              [np.asarray(p[1], dtype=np.int64) for p in pairs], choices, gold, False))
            ids.append(f"{name}/{doc_id}")
            sources.append(name)
        task._instances = None  # lm-eval keeps every request: freed
    if not items:
        raise DataError(f"lm-eval task(s) {', '.join(names)}: no multiple-choice items "
                        f"({'; '.join(skipped) or 'no documents'}); the monitor watches options scored by "
                        f"log-likelihood (output_type multiple_choice)")
    if skipped:
        log.info("lm-eval tasks left out (not multiple choice): %s", ", ".join(skipped))
    origin = {"lm_eval": names, "num_fewshot": num_fewshot, "limit": limit, "chat_template": chat_template,
              "include_path": None if include_path is None else [str(p) for p in np.atleast_1d(include_path)]}
    return Benchmark(np.asarray(ids), np.asarray(sources), items, metric, origin)


# --- a forgetmap correctness stage --------------------------------------------------------------------------------

def from_frame(frame, tokenizer, settings: dict, where: str = "the items") -> Benchmark:
    """The multiple-choice items of upstream rows (`choices`, `answer`), asked as the workflow's correctness stage
    asks them (`settings`: its prompt settings: chat template or plain, shots, target delimiter, metric)."""
    from .items import encode_items

    missing = [c for c in ("example_id", "source", "prompt", "answer", "choices") if c not in frame.columns]
    if missing:
        raise DataError(f"{where}: missing column(s) {', '.join(missing)}: items need a prompt, choices and an answer")
    for row in frame.itertuples():
        options = row.choices
        if options is not None and len(options) and row.answer is not None and str(row.answer) not in map(str, options):
            raise DataError(f"{where}: item {row.example_id!r}: its answer {row.answer!r} is not one of its "
                            f"options {list(options)[:4]}")
    rows, items = encode_items(tokenizer, frame, settings)
    choice = [j for j, it in enumerate(items) if not it.free_form]
    if len(items) > len(choice):
        log.info("%s: %d free-form item(s) left out: the monitor watches multiple-choice items", where,
                 len(items) - len(choice))
    picked = rows[choice]
    return Benchmark(frame["example_id"].to_numpy().astype(str)[picked], frame["source"].to_numpy().astype(str)[picked],
                     [items[j] for j in choice], settings.get("metric", "acc"), {"where": where})
