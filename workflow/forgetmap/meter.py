"""The probes' NLL under the weights being trained: scored on the training device, in training's precision,
in eval mode (dropout off) and put back as it was, whatever holds the weights. The probes' length batches are
dealt to the ranks in turn and the values gathered, so every rank holds every probe's value:

- **local** (one process, or data parallelism: each rank holds the whole model and a forward runs no
  collective): each rank scores its batches;
- **sharded** (FSDP, as `fully_shard` or the `FullyShardedDataParallel` wrapper, or DeepSpeed ZeRO-3): a
  forward all-gathers each block's weights across the ranks, so every rank runs the same number of forwards
  in the same order: a rank dealt fewer batches scores one of its batches again and drops the values (a rank
  one forward short would wait in an all-gather forever). The transformer body and the output head are called
  apart from the model (only the scored positions reach the head), so the root's own weights (embeddings,
  final norm, head) are gathered around them: FSDP2's `unshard`/`reshard`, FSDP1's `summon_full_params`
  of the root alone; ZeRO-3 gathers each module's weights in its own hooks. No rank ever holds the whole model.
  ZeRO-3 also records the order in which modules ran to prefetch the next step's weights; forwards outside its
  engine leave that record stale (TRL's fused head then fails its first backward), so a trainer's monitor hands
  the meter `settle=zero3_retrace(optimizer)`, which has the next training step record it afresh.

Scoring runs under `no_grad`, not `inference_mode`: the weights train on afterwards, and a sharded model's
gathered buffers made inside inference mode would be refused by the next training step.

A benchmark's items (`OptionMeter`) are dealt and gathered alike where their options are scored; a generated
answer runs a decode loop, which every rank runs in step on the same items (forgetmap.generation.InStep).

Both forgetmap's own fine-tunes (online replay, `finetune.monitor`) and the trainer callback
(forgetmap.monitor.callback) measure through it.
"""

from __future__ import annotations

import time
from contextlib import contextmanager, nullcontext

import numpy as np


SHARDED_PADDING = 0.5  # the share of a sharded model's batch that may be padding (TorchScorer's max_padding)


def _ranks() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def parallelism(model) -> tuple[str, object]:
    """('fsdp2', root) for a model sharded with `fully_shard`, ('fsdp1', root) for the FullyShardedDataParallel
    wrapper, ('zero3', None) for DeepSpeed ZeRO-3's partitioned parameters, ('local', None) otherwise (one
    process or DDP: each rank holds the whole model). The root is the outermost sharded module."""
    try:
        from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel
    except ImportError:  # a torch built without distributed support
        FSDPModule = FullyShardedDataParallel = ()
    for module in model.modules():  # pre-order: the first found is the outermost
        if FSDPModule and isinstance(module, FSDPModule):
            return "fsdp2", module
        if FullyShardedDataParallel and isinstance(module, FullyShardedDataParallel):
            return "fsdp1", module
    if any(hasattr(p, "ds_id") for p in model.parameters()):  # DeepSpeed's partitioned (ZeRO-3) parameters
        return "zero3", None
    return "local", None


def root_gathered(kind: str, root):
    """A context inside which the transformer body and the output head can be called apart from the model."""
    if kind == "fsdp2":
        @contextmanager
        def gathered():
            root.unshard()
            try:
                yield
            finally:
                root.reshard()
        return gathered
    if kind == "fsdp1":
        from torch.distributed.fsdp import FullyShardedDataParallel

        return lambda: FullyShardedDataParallel.summon_full_params(root, recurse=False, writeback=False)
    return nullcontext


def zero3_retrace(optimizer):
    """What to do after scoring outside DeepSpeed's engine under ZeRO-3: drop the module order its parameter
    coordinator recorded (the next training forward records it again). `optimizer`: the trainer's (accelerate's
    wrapper of DeepSpeed's stage-3 optimizer); None where it holds no ZeRO-3 coordinator."""
    found, depth = optimizer, 0
    while found is not None and not hasattr(found, "parameter_offload") and depth < 4:
        found, depth = getattr(found, "optimizer", None), depth + 1
    if found is None or not hasattr(found, "parameter_offload"):
        return None

    def retrace():
        coordinator = found.parameter_offload.get_param_coordinator()
        if not coordinator.is_invalid_trace():
            coordinator._invalidate_trace()
    return retrace


def _same_on_every_rank(ids: list[str], lengths: list[int], world: int) -> None:
    """Every rank was given the same probes, encoded alike (a rank with other probes would gather into the wrong
    places, or, sharded, wait in an all-gather forever): refused, naming what differs, before any is scored."""
    import hashlib
    import json

    import torch.distributed as dist

    from .errors import DataError

    mine = (len(ids), ids[:3], hashlib.sha1(json.dumps([ids, lengths]).encode()).hexdigest())
    every: list = [None] * world
    dist.all_gather_object(every, mine)
    if any(other[2] != every[0][2] for other in every):
        shown = "; ".join(f"rank {r}: {n} probes {first}..." for r, (n, first, _) in enumerate(every))
        raise DataError(f"the {world} ranks disagree on the probes they score or on their encoding ({shown}): give "
                        f"every rank the same map (or probes), tokenizer, chat template and max_length")


def deal(batches: list[np.ndarray], rank: int, world: int, in_step: bool) -> tuple[list[np.ndarray], int]:
    """Rank `rank`'s batches (every `world`-th, from its own), and how many of them are repeats run only to keep
    the ranks in step (`in_step`: a sharded model; its last batch again, or the plan's last where it was dealt
    none)."""
    mine = batches[rank::world]
    if not in_step or not batches:
        return mine, 0
    rounds = -(-len(batches) // world)
    filler = mine[-1] if mine else batches[-1]
    return mine + [filler] * (rounds - len(mine)), rounds - len(mine)


class ProbeMeter:
    """`measure()`: each example's NLL under the live weights (float64, one per example, in the given order; NaN
    where an example has nothing to score: `empty` names those), the mean per scored token, or with `total` the
    sum over its scored span. `kind`: the parallelism found (`parallelism`). `for_rows` encodes upstream rows as
    scoring does; `OptionMeter` scores a benchmark's items."""

    @classmethod
    def for_rows(cls, model, tokenizer, rows, chat_template: str, max_length: int, token_budget: int = 4096,
                 autocast=None, settle=None) -> "ProbeMeter":
        """The upstream `rows` (example_id and the upstream columns) encoded as the scoring job encodes them."""
        from .data.chat import encode_examples

        encoded = encode_examples(tokenizer, rows, chat_template, max_length)
        return cls(model, tokenizer, encoded, rows["example_id"].astype(str).tolist(), token_budget, autocast, settle)

    def __init__(self, model, tokenizer, encoded: list, ids: list[str], token_budget: int = 4096, autocast=None,
                 settle=None, total: bool = False, max_padding: float | None = None):
        """`encoded`: the examples (forgetmap.data.chat.Encoded), `ids` naming them; `settle`: called after each
        measure (zero3_retrace); `max_padding`: the share of a batch that may be padding where each rank holds the
        whole model (None: the scorer's default, equal lengths on a CPU; a sharded model's batches take up to
        SHARDED_PADDING)."""
        self.empty = [ids[i] for i, e in enumerate(encoded) if e.n_scored == 0]
        scored = [i for i, e in enumerate(encoded) if e.n_scored]  # an empty example is refused by the caller
        self._deal(model, tokenizer, ids, [len(e.ids) for e in encoded], scored, token_budget, autocast, settle,
                   max_padding)
        self.encoded = encoded
        self.tokens = int(sum(e.n_scored for e in encoded))  # over every rank's share
        self.total = total

    def _deal(self, model, tokenizer, ids, lengths: list[int], scored: list[int], token_budget: int, autocast, settle,
              max_padding) -> None:
        """The scorer on the model as it is wrapped, the length batches of the `scored` units (their `lengths`), and
        this rank's share of them (`deal`)."""
        from .data.batches import length_batches
        from .nll import TorchScorer

        self.kind, root = parallelism(model)
        self.rank, self.world = _ranks()
        if self.world > 1:
            _same_on_every_rank(list(ids), list(lengths), self.world)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        local = self.kind == "local"
        sizes = np.array([lengths[i] for i in scored], dtype=np.int64)
        if not local:  # every forward gathers the weights: fewer, fuller batches, yet at least one per rank
            token_budget = min(token_budget, max(int(sizes.max(initial=1)), -(-int(sizes.sum()) // self.world)))
        self.scorer = TorchScorer(model, pad, token_budget, max_padding=max_padding if local else SHARDED_PADDING,
                                  gathered=root_gathered(self.kind, root), inference=False)
        plan = [np.asarray(scored, dtype=np.int64)[b] for b in length_batches(sizes, token_budget,
                                                                              self.scorer.max_padding)]
        self.batches, self.repeats = deal(plan, self.rank, self.world, not local)
        own = self.batches[:len(self.batches) - self.repeats]
        self.share = np.sort(np.concatenate([np.zeros(0, dtype=np.int64), *own]))
        self.count = len(lengths)
        self.model = model
        self.autocast = autocast or nullcontext
        self.settle = settle
        self.seconds = 0.0  # the last measure's wall time

    def _run(self) -> list:
        """Every unit's value from this rank's batches (the others' are filled by the gather)."""
        sums = self.scorer.sums(self.encoded, self.batches)
        if self.total:
            return list(sums)
        return list(sums / np.maximum([e.n_scored for e in self.encoded], 1))

    @contextmanager
    def _scoring(self):
        """Forwards in eval mode and training's precision; the mode put back and `settle` called after."""
        training = self.model.training
        self.model.eval()
        try:
            with self.autocast():
                yield
        finally:
            self.model.train(training)
            if self.settle is not None:
                self.settle()

    def _gathered(self) -> list:
        """Each unit's value on every rank: this rank's share run, the others' gathered."""
        started = time.perf_counter()
        with self._scoring():
            found = self._run()
        values: list = [None] * self.count
        mine = [_plain(found[i]) for i in self.share]
        if self.world == 1:
            for i, value in zip(self.share, mine):
                values[i] = value
        else:
            import torch.distributed as dist

            shares: list = [None] * self.world
            dist.all_gather_object(shares, (self.share.tolist(), mine))
            for positions, share_values in shares:
                for i, value in zip(positions, share_values):
                    values[i] = value
        self.seconds = time.perf_counter() - started
        return values

    def measure(self) -> np.ndarray:
        return np.array([np.nan if v is None else v for v in self._gathered()], dtype=np.float64)


class OptionMeter(ProbeMeter):
    """A benchmark's items under the live weights. Multiple choice: options packed (forgetmap.correctness.items:
    each item's context once, then every option behind a block-causal mask, as the score jobs score them; separate
    sequences where the attention takes no such mask or packing does not reproduce them), dealt to the ranks like
    the probes. Free form (`generated`: an item's position -> forgetmap.correctness.benchmark.Generated): greedy
    decoding to its budget, ended at its stop strings (forgetmap.generation); with several ranks every rank
    generates every such item in step (`InStep`) and keeps rank 0's texts. `measure()`: each item's options'
    summed log-likelihoods (a float64 array) or its generated text, in the items' order."""

    @classmethod
    def for_items(cls, model, tokenizer, benchmark, which=None, **options) -> "OptionMeter":
        """The items of a `Benchmark` (forgetmap.correctness.benchmark) at `which` (default: all)."""
        which = np.arange(len(benchmark.items)) if which is None else np.asarray(which)
        generated = {n: benchmark.generated[int(i)] for n, i in enumerate(which) if int(i) in benchmark.generated}
        return cls(model, tokenizer, [benchmark.items[i] for i in which], benchmark.ids[which].tolist(),
                   generated=generated, **options)

    def __init__(self, model, tokenizer, items: list, ids: list[str], token_budget: int = 4096, autocast=None,
                 settle=None, max_padding: float = 0.1, generated: dict | None = None):
        from .correctness.items import OptionScorer, packed_length

        choice = [i for i, it in enumerate(items) if not it.free_form]
        self._deal(model, tokenizer, ids, [packed_length(it) for it in items], choice, token_budget, autocast,
                   settle, max_padding)
        self.items, self.tokenizer, self.token_budget = items, tokenizer, token_budget
        self.tokens = int(sum(packed_length(it) for it in items))
        self.options = OptionScorer(self.scorer)
        if self.options.packed is None and choice:  # decided once, on the same item on every rank (in step)
            with self._scoring():
                self.options.decide(max((items[i] for i in choice), key=lambda it: len(it.options)))
        self.generated = dict(generated or {})
        self.limits = self._limits(ids)

    def _limits(self, ids: list[str]) -> dict[int, int]:
        """Each generated item's answer budget: its own, less where its context leaves fewer of the model's
        positions; an item whose context leaves none is refused (a question is never cut)."""
        from .errors import DataError
        from .generation import budgets
        from .nll import positions_of

        config = getattr(self.model, "config", None)  # FSDP1's wrapper forwards it
        positions = positions_of(config.get_text_config().to_dict()) if config is not None else None
        limits = {}
        for i, how in self.generated.items():
            limits[i] = int(budgets([len(self.items[i].context)], how.max_new_tokens, positions)[0])
            if limits[i] < 1:
                raise DataError(f"item {ids[i]!r}: its prompt takes {len(self.items[i].context)} tokens and the model "
                                f"has {positions} positions: no room for an answer; the monitor never cuts a question")
        return limits

    def _run(self) -> list:
        return self.options.loglik(self.items, self.batches)

    def measure(self) -> list:
        values: list = [np.asarray(v, dtype=np.float64) for v in self._gathered()]
        if self.generated:
            started = time.perf_counter()
            for i, text in self._generate().items():
                values[i] = text
            self.seconds += time.perf_counter() - started
        return values

    def _generate(self) -> dict[int, str]:
        """The generated items' greedy texts, a decode loop per set of stop strings (every rank's the same)."""
        from .generation import InStep, Sampling, generate_torch

        in_step = InStep(next(self.model.parameters()).device) if self.world > 1 else None
        groups: dict[tuple, list[int]] = {}
        for i, how in sorted(self.generated.items()):
            groups.setdefault(how.stop, []).append(i)
        texts = {}
        with self._scoring():
            for stop, members in groups.items():
                answers = generate_torch(self.model, self.tokenizer, [self.items[i].context for i in members],
                                         np.array([self.limits[i] for i in members]), Sampling(stop=stop),
                                         token_budget=self.token_budget, in_step=in_step, inference=False)
                texts.update(zip(members, answers.texts))
        return texts


def _plain(value):
    """A value as all_gather_object carries it (floats and lists, no numpy scalars)."""
    return value.tolist() if isinstance(value, np.ndarray) else float(value)
