"""Sample-wise correctness of the upstream items that carry an `answer` (related-methods §2, §3.2).

- Multiple choice (`choices`): each option is a continuation of the item's context, scored by its
  log-likelihood as lm-evaluation-harness scores it; `acc` takes the argmax of the summed
  log-likelihoods, `acc_norm` the argmax per character of the option; ties go to the first option.
  Deterministic: no sampling, so no spurious flips between runs.
- Free form (no `choices`): greedy decoding (`forgetmap.generation`) up to the answer's budget
  (`max_new_tokens`, less where the context leaves fewer of the model's positions), ended at the first
  stop string, and SQuAD-normalised exact match (lowercase, no punctuation, no articles, single spaces).
  An item whose scored example (context, answer, EOS) the NLL pass found to be all argmax tokens is its
  own greedy continuation: it is not decoded again (`greedy_from_scores`).

Contexts are asked as the run asks (`forgetmap.correctness.prompts`): plain text (the prompt, then the
target delimiter and the option; few-shot where the run has `shots`) or through the chat template (the
prompt as the user turn up to the assistant marker, the option the reply, tokenised on its own as
scoring tokenises responses). A context is never cut: one that leaves no room in the model's positions
stops the job naming the item (`check_room`).

All options of an item share one forward pass: the context, then every option, each option attending
to the context and to itself (a block-causal mask; positions restart after the context). The first
packed batch is checked against separate sequences, and a model that does not reproduce them (an
attention kernel without arbitrary masks) scores separate sequences instead.

Per item: `predicted` (the chosen option or the generated text), `correct` (0/1), `margin` (the gold
option's score minus the best other option's, in nats, or nats per character for `acc_norm`; NaN for
free form) and `k` (options; 0 for free form).
"""

from __future__ import annotations

import logging
import re
import string
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from ..data.chat import Encoded
from ..data.upstream import present, scorable
from ..errors import DataError
from ..generation import Sampling, budgets, generate_torch, until_stop
from ..data.batches import length_batches
from ..nll import TorchScorer

log = logging.getLogger(__name__)

METRICS = ("acc", "acc_norm")
ITEM_COLUMNS = ("predicted", "correct", "margin", "k")
SAMPLED_COLUMNS = ("generations", "answers", "correct_seeds", "n_generated", "n_capped")  # answers sampled over seeds (sampled)


@dataclass(frozen=True)
class Item:
    """One scorable item, tokenised: its context and each option's continuation tokens."""

    context: np.ndarray              # token ids
    options: list[np.ndarray]        # continuation ids per option (empty for free form)
    texts: list[str]                 # option texts (free form: [answer])
    gold: int                        # index of the answer among the options
    free_form: bool

    @property
    def k(self) -> int:
        return 0 if self.free_form else len(self.options)


# --- answers -----------------------------------------------------------------------------------------

def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lowercase, drop punctuation and the articles a/an/the, collapse spaces."""
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def exact_match(prediction: str, answer: str) -> bool:
    return normalize_answer(prediction) == normalize_answer(answer)


def cut_at_stop(text: str, stop) -> str:
    """The generation up to the first stop string, stripped (the paper cuts at the first blank line)."""
    return until_stop(text, stop).strip()


@dataclass(frozen=True)
class ExactMatch:
    """The greedy measurement's rule for a free-form item: the generation cut at the first stop string, then
    SQuAD-normalised exact match with the answer."""

    answer: str
    stop: tuple[str, ...] = ()

    def __call__(self, text: str) -> bool:
        return exact_match(cut_at_stop(text, self.stop), self.answer)


def choose(scores: np.ndarray, gold: int) -> tuple[int, bool, float]:
    """(argmax with ties to the first, whether it is the gold option, gold minus best other)."""
    predicted = int(np.argmax(scores))
    others = np.delete(scores, gold)
    return predicted, predicted == gold, float(scores[gold] - others.max())


def option_scores(loglik: np.ndarray, texts: list[str], metric: str) -> np.ndarray:
    """acc: summed log-likelihood; acc_norm: per character of the option text (lm-eval's acc_norm)."""
    if metric == "acc":
        return loglik
    return loglik / np.array([max(1, len(t)) for t in texts], dtype=np.float64)


# --- tokenising ----------------------------------------------------------------------------------------

def encode_items(tokenizer, frame: pd.DataFrame, settings: dict) -> tuple[np.ndarray, list[Item]]:
    """The row positions of the frame's scorable items and each item's tokens, asked as the run asks
    (`forgetmap.correctness.prompts`). A context is never cut: one that does not fit the model's positions
    is refused by `check_room`."""
    from .prompts import contexts, continuation

    rows = scorable(frame)
    if not len(rows):
        return rows, []
    delimiter = settings["target_delimiter"]
    records = frame.iloc[rows]
    forms, ids = contexts(tokenizer, frame, rows, records["prompt"].tolist(), records["answer"].tolist(), settings)
    items = []
    for (_, record), form, context in zip(records.iterrows(), forms, ids):
        options = record.get("choices") if "choices" in frame else None
        free = not present(options)
        texts = [record["answer"]] if free else [str(o) for o in options]
        continuations = [] if free else [
            np.asarray(tokenizer(continuation(form, t, delimiter), add_special_tokens=False)["input_ids"], dtype=np.int64)
            for t in texts]
        items.append(Item(context, continuations, texts, 0 if free else texts.index(record["answer"]), free))
    return rows, items


def answer_budgets(contexts: list[np.ndarray], settings: dict) -> np.ndarray:
    """Each generated answer's budget (free-form greedy items, sampled questions): `max_new_tokens`, less
    where its context leaves fewer positions."""
    return budgets([len(c) for c in contexts], settings["max_new_tokens"], settings.get("positions"))


def greedy(settings: dict) -> Sampling:
    """Greedy decoding that ends at the configured stop strings."""
    return Sampling(stop=tuple(settings["stop"]))


def needed_tokens(item) -> int:
    """The positions an item (an `Item`, or a sampled `Question`) takes whole: its context and one answer
    token, or its context and its longest option and one token more (vLLM generates one token after a
    scored prompt)."""
    options = item.options if isinstance(item, Item) else ()
    return len(item.context) + 1 + max((len(o) for o in options), default=0)


def check_room(frame: pd.DataFrame, rows: np.ndarray, items: list, positions: int | None, settings: dict) -> None:
    """A prompt is never cut: an item that does not fit the model's `positions` whole stops the job, naming
    the item, the tokens it needs and the keys that make prompts long."""
    needed = np.array([needed_tokens(it) for it in items], dtype=np.int64)
    bad = np.zeros(0, dtype=np.int64) if positions is None else np.flatnonzero(needed > positions)
    if len(bad):
        i, row = int(bad[0]), settings.get("row", "models.NAME")
        shots = f"config key {row}.shots ({settings['shots']} solved items before each question), or " \
            if settings.get("shots") else ""  # few-shot prompts are the long ones
        raise DataError(f"item {frame['example_id'].iloc[rows[i]]!r} (source {frame['source'].iloc[rows[i]]!r}) needs "
                        f"{needed[i]} tokens whole (its prompt and one answer token) and the model has {positions} "
                        f"positions: {len(bad)} of {len(items)} items of this shard cannot be asked without cutting "
                        f"the question; {'lower ' + shots if shots else ''}shorten those items' prompts")


# --- option log-likelihoods -------------------------------------------------------------------------------

def _packed(item: Item) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One sequence: context then every option. Returns ids, positions, the block-causal mask, and for
    every option token (option index, position predicting it)."""
    n_ctx = len(item.context)
    ids = np.concatenate([item.context, *item.options])
    length = len(ids)
    positions = np.arange(length)
    mask = np.tril(np.ones((length, length), dtype=bool))
    option_of, predict_at = [], []
    start = n_ctx
    for j, option in enumerate(item.options):
        n = len(option)
        block = slice(start, start + n)
        mask[block, n_ctx:start] = False  # an option never sees the options before it
        positions[block] = n_ctx + np.arange(n)
        option_of += [j] * n
        predict_at += [n_ctx - 1] + list(range(start, start + n - 1))
        start += n
    return ids, positions, mask, np.asarray(option_of), np.asarray(predict_at)


def packed_length(item: Item) -> int:
    """The tokens of an item packed: its context once, then every option."""
    return len(item.context) + sum(len(o) for o in item.options)


def packing_agrees(packed: np.ndarray, separate: np.ndarray, item: Item, dtype) -> bool:
    """Do packed options reproduce separate sequences' summed log-likelihoods? Each option's sum runs over
    its own tokens, so the tolerance grows with the option's length (a per-token bound), never with the
    context's: a long context must not let a wrong mask through."""
    tol = 1e-3 if dtype == torch.float32 else 5e-2
    lengths = np.array([max(1, len(option)) for option in item.options], dtype=np.float64)
    return bool(np.all(np.abs(np.asarray(packed) - np.asarray(separate)) <= tol * lengths + tol * np.abs(separate)))


class OptionScorer:
    """Summed log-likelihood of every option of every multiple-choice item, batched under a token budget."""

    def __init__(self, scorer: TorchScorer, packed: bool | None = None, max_padding: float = 0.1):
        from ..models import is_flash

        self.scorer = scorer
        self.max_padding = max_padding  # a masked batch gains nothing from equal lengths: a little padding
        self.packed = packed  # None: decided on the first batch (does packing reproduce separate sequences?)
        if packed is None and is_flash(scorer.model):  # its kernels take no 4D mask: checking would crash
            log.info("%s attention takes no block-causal mask: options are scored as separate sequences",
                     scorer.model.config._attn_implementation)
            self.packed = False
        if packed is None and not getattr(scorer.model, "takes_block_mask", True):  # an adapter that says so
            self.packed = False

    def loglik(self, items: list[Item], batches: list | None = None) -> list[np.ndarray]:
        """Each item's options' summed log-likelihoods; `batches`: the items to run, as lists of indices in packed
        length batches (default: all, batched here); an item in none of them gets zeros."""
        out = [np.zeros(len(item.options)) for item in items]
        if not any(item.options for item in items):  # none (or free form only): nothing to score
            return out
        if self.packed is None:
            self.decide(max(items, key=lambda it: len(it.options)))
        return self._packed_loglik(items, batches) if self.packed else self._separate_loglik(items, batches)

    def decide(self, probe: Item) -> None:
        """Pack the options where packing reproduces separate sequences on `probe`."""
        packed = self._packed_loglik([probe])[0]
        separate = self._separate_loglik([probe])[0]
        self.packed = packing_agrees(packed, separate, probe, self.scorer.dtype)
        if not self.packed:
            log.warning("packed option scoring does not reproduce separate sequences (%s vs %s): "
                        "scoring options as separate sequences", packed, separate)

    def _separate_loglik(self, items: list[Item], batches: list | None = None) -> list[np.ndarray]:
        encoded, owner = [], []
        chosen = range(len(items)) if batches is None else sorted({int(i) for b in batches for i in b})
        for i in chosen:
            item = items[i]
            for j, option in enumerate(item.options):
                ids = np.concatenate([item.context, option])
                encoded.append(Encoded(ids, len(item.context), len(ids)))
                owner.append((i, j))
        sums = self.scorer.sum_nll(encoded)
        out = [np.zeros(len(item.options)) for item in items]
        for (i, j), value in zip(owner, sums):
            out[i][j] = -value
        return out

    def _packed_loglik(self, items: list[Item], batches: list | None = None) -> list[np.ndarray]:
        with self.scorer.grad_off():  # inference mode for a scoring job; no_grad for weights that train on
            return self._packed(items, batches)

    def _packed(self, items: list[Item], batches: list | None) -> list[np.ndarray]:
        packs = [_packed(item) for item in items]
        lengths = np.array([len(p[0]) for p in packs])
        out = [np.zeros(len(item.options)) for item in items]
        device = self.scorer.device
        for batch in length_batches(lengths, self.scorer.token_budget, self.max_padding) if batches is None else batches:
            width = int(lengths[batch].max())
            ids = torch.full((len(batch), width), self.scorer.pad_id, dtype=torch.long)
            positions = torch.zeros((len(batch), width), dtype=torch.long)
            mask = torch.eye(width, dtype=torch.bool).repeat(len(batch), 1, 1)  # padding sees itself
            rows, predict_at, targets, owners = [], [], [], []
            for r, i in enumerate(batch):
                seq, pos, block, option_of, at = packs[i]
                n = len(seq)
                ids[r, :n] = torch.from_numpy(seq)
                positions[r, :n] = torch.from_numpy(pos)
                mask[r, :n, :n] = torch.from_numpy(block)
                rows.append(np.full(len(at), r))
                predict_at.append(at)
                targets.append(seq[len(items[i].context):])
                owners.append((i, option_of))
            rows_t = torch.from_numpy(np.concatenate(rows)).to(device)
            at_t = torch.from_numpy(np.concatenate(predict_at)).to(device)
            targets_t = torch.from_numpy(np.concatenate(targets)).to(device)
            nll = self.scorer.token_nll(ids.to(device), rows_t, at_t, targets_t,
                                        attention_mask=mask[:, None].to(device), position_ids=positions.to(device))
            nll = nll.double().cpu().numpy()
            start = 0
            for i, option_of in owners:
                part = nll[start:start + len(option_of)]
                out[i] = -np.bincount(option_of, weights=part, minlength=len(items[i].options))
                start += len(option_of)
        return out


@torch.inference_mode()
def loglik_naive(model, items: list[Item]) -> list[np.ndarray]:
    """The reference: one (context, option) at a time, full logits, log-softmax, gather. For checks."""
    device = next(model.parameters()).device
    out = []
    for item in items:
        values = []
        for option in item.options:
            ids = torch.from_numpy(np.concatenate([item.context, option])[None]).to(device)
            logp = torch.log_softmax(model(input_ids=ids).logits[0].float(), dim=-1)
            t = torch.arange(len(item.context), ids.shape[1], device=device)
            values.append(float(logp[t - 1, ids[0, t]].sum()))
        out.append(np.asarray(values))
    return out


# --- one shard --------------------------------------------------------------------------------------------------

def decide(items: list[Item], logliks: list[np.ndarray], generations: dict[int, str], metric: str) -> pd.DataFrame:
    """The per-item record from option log-likelihoods (multiple choice) and generated texts (free form)."""
    predicted, correct, margin = [], [], []
    for i, item in enumerate(items):
        if item.free_form:
            text = generations[i]
            predicted.append(text)
            correct.append(exact_match(text, item.texts[0]))
            margin.append(np.nan)
        else:
            choice, right, gap = choose(option_scores(logliks[i], item.texts, metric), item.gold)
            predicted.append(item.texts[choice])
            correct.append(right)
            margin.append(gap)
    return pd.DataFrame({"predicted": predicted, "correct": np.asarray(correct, dtype=np.int8),
                         "margin": np.asarray(margin, dtype=np.float32),
                         "k": np.asarray([it.k for it in items], dtype=np.int16)})


def greedy_from_scores(items: list[Item], examples: list, is_greedy: np.ndarray, eos_id: int | None,
                       limits: np.ndarray) -> dict[int, np.ndarray]:
    """Free-form items whose greedy continuation the NLL pass already wrote: item index -> tokens.

    Greedy decoding from an item's context produces its scored answer exactly when the scored example
    is that context, the answer and then EOS, and each answer token and the EOS were the model's argmax
    under teacher forcing (each step then sees the prefix decoding would see), within its budget (`limits`,
    per item: `answer_budgets`). A stop string inside the answer cuts both readings alike.
    `is_greedy` (TorchScorer.score) says the latter. Such items need no decoding; the rest are decoded."""
    known = {}
    for i, (item, example, argmax, limit) in enumerate(zip(items, examples, is_greedy, limits)):
        span = example.ids[example.target_start:example.score_end]
        if (item.free_form and argmax and eos_id is not None and len(span) and len(span) < limit
                and example.score_end < len(example.ids) and example.ids[example.score_end] == eos_id
                and np.array_equal(example.ids[:example.target_start], item.context)):
            known[i] = span
    return known


def evaluate_torch(model, tokenizer, items: list[Item], settings: dict, scorer: TorchScorer,
                   known: dict[int, np.ndarray] | None = None) -> pd.DataFrame:
    """Options by packed log-likelihoods; free form by greedy decoding, except the items in `known`
    (item index -> their greedy tokens, from `greedy_from_scores`)."""
    known = known or {}
    choice_items = [it for it in items if not it.free_form]
    logliks = iter(OptionScorer(scorer).loglik(choice_items))
    all_logliks = [np.zeros(0) if it.free_form else next(logliks) for it in items]
    free = [i for i, it in enumerate(items) if it.free_form and i not in known]
    contexts = [items[i].context for i in free]
    answers = generate_torch(model, tokenizer, contexts, answer_budgets(contexts, settings), greedy(settings),
                             token_budget=settings["token_budget"])
    texts = {**{i: tokenizer.decode(t, skip_special_tokens=True) for i, t in known.items()},
             **dict(zip(free, answers.texts))}
    return decide(items, all_logliks, {i: cut_at_stop(t, settings["stop"]) for i, t in texts.items()},
                  settings["metric"])


def evaluate_vllm(llm, tokenizer, items: list[Item], settings: dict) -> pd.DataFrame:  # pragma: no cover - GPU
    """The same decisions through vLLM: options by `prompt_logprobs`, free form by greedy sampling."""
    from vllm.inputs import TokensPrompt

    from ..generation import generate_vllm
    from ..nll import nll_from_prompt_logprobs, prompt_logprob_params

    requests, owner = [], []
    for i, item in enumerate(items):
        for j, option in enumerate(item.options):
            requests.append(np.concatenate([item.context, option]))
            owner.append((i, j, len(item.context)))
    logliks = [np.zeros(len(it.options)) for it in items]
    if requests:
        outputs = llm.generate([TokensPrompt(prompt_token_ids=r.tolist()) for r in requests], prompt_logprob_params())
        for (i, j, start), ids, o in zip(owner, requests, outputs):
            n = len(ids) - start
            logliks[i][j] = -n * nll_from_prompt_logprobs(ids.tolist(), o.prompt_logprobs, start, len(ids))
    free = [i for i, it in enumerate(items) if it.free_form]
    contexts = [items[i].context for i in free]
    answers = generate_vllm(llm, contexts, answer_budgets(contexts, settings), greedy(settings), [0])[0]
    texts = {i: cut_at_stop(t, settings["stop"]) for i, t in zip(free, answers.texts)}
    return decide(items, logliks, texts, settings["metric"])


def item_columns(n_rows: int, rows: np.ndarray, record: pd.DataFrame | None) -> dict:
    """The scores file's correctness columns: values at the scorable rows, null elsewhere."""
    import pyarrow as pa

    valid = np.zeros(n_rows, dtype=bool)
    valid[rows] = True
    columns = {}
    types = {"predicted": pa.string(), "correct": pa.int8(), "margin": pa.float32(), "k": pa.int16(),
             "generations": pa.list_(pa.string()), "answers": pa.list_(pa.string()),
             "correct_seeds": pa.list_(pa.int8()), "n_generated": pa.int32(), "n_capped": pa.int8()}
    names = [*ITEM_COLUMNS, *(c for c in SAMPLED_COLUMNS if record is not None and c in record)]
    for name in names:
        values = [None] * n_rows
        if record is not None:
            for r, v in zip(rows, record[name].tolist()):
                values[r] = v
        columns[name] = pa.array(values, types[name])
    return columns
