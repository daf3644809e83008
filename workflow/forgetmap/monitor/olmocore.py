"""The forgetting monitor inside OLMo-core's `Trainer` (`pip install ai2-olmo-core`): a `Callback` and the config
class OLMo-core's config system takes, so a run built from a `TrainerConfig` adds it as it adds its own callbacks.

    from forgetmap.monitor.olmocore import ForgettingMonitorConfig
    trainer_config.with_callback("forgetmap", ForgettingMonitorConfig(
        map="results/olmo/forecast/map.parquet", tokenizer="allenai/OLMo-2-0425-1B", every=100, budget=0.15))

It is the transformers callback's monitor (forgetmap.monitor.callback.ForgettingMonitor), driven by OLMo-core's
events instead of transformers': the baseline at `pre_train`, a check after every `every` optimizer steps
(`post_train_batch`, before the checkpointer saves that step), its state in OLMo-core's checkpoints
(`state_dict`/`load_state_dict`: a resume keeps the baseline), its scalars recorded as OLMo-core metrics
(`forget/mean`, `forget/upper`, ...: what the transformers callback logs as `eval_forget_*`), its files under the
trainer's `work_dir`/forgetmap-monitor, and a budget exceeded cancels the run from every rank at once (each rank
holds the same values), which OLMo-core's checkpointer saves as it saves any canceled run.

The probes, the audit examples and the items are scored through OLMo-core's own model as the train module holds
it (`OlmoCoreLM`: its embeddings, blocks and head, in training's autocast precision), under its data parallelism
(FSDP2's `fully_shard`: each block gathered by its own hooks, the root's embeddings and head around the scored
positions, as forgetmap.meter does for any FSDP2 model; DDP or one process: each rank scores its share). Examples
are right-padded, which causal attention needs no mask for; options of multiple-choice items are scored as separate
sequences (OLMo-core's attention takes no block-causal mask); free-form items, which need a key-value cache, are
refused. The text is encoded with the Hugging Face tokenizer named by `tokenizer` (the one the run's token files
were made with): the map's probes and the items are text.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, ClassVar

import torch
from olmo_core.train.callbacks import Callback, CallbackConfig

from .callback import BASE_TOLERANCE, ForgettingMonitor

NAMESPACE = "forget"


class OlmoCoreLM(torch.nn.Module):
    """An OLMo-core `Transformer` seen as forgetmap's scorers see a Hugging Face causal LM: `model(input_ids=...)`
    returns its `.logits`, `base_model` is the body (embeddings and blocks: `.last_hidden_state`) and
    `get_output_embeddings()` the head (its final norm and output projection, which take the body's hidden states
    at any positions). Only right-padded batches are taken: causal attention keeps every real position from the
    padding after it, so the mask adds nothing; a mask with padding before a token, or position ids, is refused."""

    takes_block_mask = False  # forgetmap.correctness.items: options scored as separate sequences

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.base_model = _Body(model)
        self.config = _Config(_model_type(model), model.vocab_size)

    def get_output_embeddings(self):
        return _Head(self.model.lm_head)

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False, **_):
        if use_cache:
            raise ValueError("OlmoCoreLM: no key-value cache is kept through OLMo-core's model, and generating an "
                             "answer needs one: the monitor in OLMo-core watches multiple-choice items, not free-form")
        _right_padded(attention_mask, position_ids)
        return SimpleNamespace(logits=self.model(input_ids))


class _Config:
    """What the monitor reads of a model's config: its architecture and vocabulary (a map of another is refused);
    no fixed positions (OLMo-core's rotary embeddings take any length the run's sequences have)."""

    def __init__(self, model_type: str | None, vocab_size: int):
        self.model_type, self.vocab_size = model_type, vocab_size

    def get_text_config(self):
        return self

    def to_dict(self) -> dict:
        return {"model_type": self.model_type, "vocab_size": self.vocab_size}


class _Head:
    """OLMo-core's head (final norm, output projection) on hidden states at any positions; `out_features` is its
    vocabulary, as a Linear head's."""

    def __init__(self, lm_head):
        self.lm_head = lm_head
        self.out_features = lm_head.w_out.out_features

    def __call__(self, hidden):
        return self.lm_head(hidden)


class _Body(torch.nn.Module):
    """The transformer's body: OLMo-core's forward up to its head (`Transformer.forward` without `lm_head`)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False, **_):
        _right_padded(attention_mask, position_ids)
        model = self.model
        input_ids, _, every_block, per_block, _ = model._prepare_inputs(input_ids, None)
        h = model.embeddings(input_ids)
        if model.embed_scale is not None:
            h = h * model.embed_scale
        if model.embedding_norm is not None:
            h = model.embedding_norm(h)
        for key, block in model.blocks.items():
            h = block(h, **every_block, **per_block.get(int(key), {}))
        return SimpleNamespace(last_hidden_state=h)


def _right_padded(attention_mask, position_ids) -> None:
    if position_ids is not None:
        raise ValueError("OlmoCoreLM: position ids (packed examples) are not taken: OLMo-core's attention on this "
                         "path keeps no examples apart within a row")
    if attention_mask is None:
        return
    if attention_mask.dim() != 2:
        raise ValueError("OlmoCoreLM: a block-causal (4-D) mask is not taken: OLMo-core's attention is causal only")
    kept = attention_mask.bool()
    if bool((kept[:, 1:] & ~kept[:, :-1]).any()):  # a real token after padding
        raise ValueError("OlmoCoreLM: only right-padded batches are taken (padding before a token needs a mask "
                         "OLMo-core's attention does not take)")


def _model_type(model) -> str | None:
    """The Hugging Face architecture OLMo-core converts the model to (`olmo2` for OLMo 2's blocks), where it can:
    the map records its base's, and a map of another architecture is refused."""
    try:
        from olmo_core.nn.hf.config import get_hf_config

        return get_hf_config(model).model_type
    except Exception:  # an architecture OLMo-core cannot convert: not compared
        return None


class _Metrics:
    """The monitor's `trainer.log`: each scalar recorded as an OLMo-core metric of the current step."""

    def __init__(self, trainer):
        self.trainer = trainer

    def log(self, scalars: dict) -> None:
        from .callback import PREFIX

        for name, value in scalars.items():
            if value is not None:
                self.trainer.record_metric(name.removeprefix(PREFIX), float(value), namespace=NAMESPACE)


@dataclass
class ForgettingMonitorConfig(CallbackConfig):
    """The monitor as OLMo-core's config system holds a callback (plain fields; `build` makes the callback).
    `map`, `probes`, `budget`, `patience`, `level`, `token_budget`, `base_tolerance`, `write_rows`: as
    `ForgettingMonitor` takes them; `items`: the keyword arguments of an `ItemWatch` (forgetmap.monitor.items:
    `items`, `map`, `k`, `budget`, ...); `every`: a check after every N optimizer steps; `tokenizer`: a Hugging Face
    tokenizer (its id or directory) that encodes the probes' and items' text as the run's tokens were encoded;
    `enabled`: False builds nothing."""

    tokenizer: str = ""
    map: str | None = None
    probes: str | None = None
    items: dict | None = None
    every: int = 100
    budget: float | None = None
    patience: int = 1
    level: float | None = None
    token_budget: int = 4096
    base_tolerance: float | None = BASE_TOLERANCE
    write_rows: bool = True
    enabled: bool = True

    def build(self, trainer) -> "ForgettingMonitorCallback | None":
        return ForgettingMonitorCallback(self) if self.enabled else None


class ForgettingMonitorCallback(Callback):
    """The monitor in OLMo-core's trainer, as its `ForgettingMonitorConfig` sets it up."""

    priority: ClassVar[int] = 2  # OLMo-core's checkpointer is 1: its save at a step comes after that step's check

    def __init__(self, config: ForgettingMonitorConfig):
        if not config.tokenizer:
            raise ValueError("ForgettingMonitorCallback: give the Hugging Face tokenizer (tokenizer=, an id or a "
                             "directory) that encodes the probes' text as the run's token files were encoded")
        if config.every < 1:
            raise ValueError(f"ForgettingMonitorCallback: every must be at least 1 step, not {config.every}")
        self.config = config
        self.monitor = self._build(config)

    @staticmethod
    def _build(config: ForgettingMonitorConfig):
        items = None
        if config.items is not None:
            from .items import ItemWatch

            items = ItemWatch(**config.items)
        return ForgettingMonitor.from_settings(config, items)

    # --- OLMo-core's events ------------------------------------------------------------------------------

    def pre_train(self):
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(self.config.tokenizer)
        self.monitor.trainer = _Metrics(self.trainer)
        self.monitor.on_train_begin(self._args(), self._run_state(), SimpleNamespace(),
                                    model=OlmoCoreLM(self.trainer.train_module.model), processing_class=tokenizer,
                                    optimizer=None)

    def post_train_batch(self):  # before the checkpointer's (priority): a checkpoint holds its step's check
        if self.step % self.config.every:
            return
        control = SimpleNamespace(should_save=False, should_training_stop=False)
        self.monitor._check(self._args(), self._run_state(), control, None)
        if control.should_training_stop:  # every rank decides alike: canceled from all of them at once
            self.trainer.cancel_run(f"forgetting monitor: over its budget at step {self.step}", no_sync=True)

    def state_dict(self) -> dict[str, Any]:
        return dict(self.monitor.state()["attributes"])

    def load_state_dict(self, state_dict: dict[str, Any]):
        self.monitor.restore(state_dict)

    # --- what the monitor reads of a trainer -------------------------------------------------------------

    def _args(self) -> SimpleNamespace:
        precision = getattr(self.trainer.train_module, "autocast_precision", None)
        return SimpleNamespace(output_dir=str(self.trainer.work_dir), bf16=precision == torch.bfloat16,
                               fp16=precision == torch.float16, deepspeed=None)

    def _run_state(self) -> SimpleNamespace:
        from olmo_core.distributed.utils import get_rank

        return SimpleNamespace(global_step=self.trainer.global_step, epoch=self.trainer.epoch,
                               is_world_process_zero=get_rank() == 0, stateful_callbacks=None)

