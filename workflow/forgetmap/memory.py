"""What a job needs of a device's memory, read from the model's config: the weights are never loaded.

The parameters are counted as `accelerate estimate-memory` counts them, on a model built on the meta
device (tied embeddings counted once, every architecture transformers knows, no hand-kept formula). Past
that anchor (weights, gradients and Adam states, no activations, no sharding) each term of a job is sized
here:

- activations: what autograd keeps for the backward pass, per token and layer, *measured* on the model's
  own architecture at a tiny width (saved-tensor hooks count the bytes each operation keeps) and scaled
  linearly to the real hidden, key-value and MLP widths, in fp32 and under bf16 autocast; the output
  head's logits per labelled token; gradient checkpointing keeps each layer's input and one layer's
  activations while it is recomputed;
- in one process, the terms held at the fine-tune's peak: the largest of the forward's end, the backward's
  start, a checkpointed layer's recomputation and the optimizer's step (`_phases`: the gradients are
  written as the backward pass frees the activations);
- mixed precision: in one process bf16 autocast casts every weight once per forward and keeps the copy for
  the backward pass (2 bytes per parameter); FSDP gathers each block in bf16 and frees it after (its
  mixed-precision policy over fp32 shards), holding two blocks and the root's embeddings and head, and one
  block's unsharded gradients until they are reduce-scattered in fp32;
- FSDP: weights, gradients and Adam states sharded over the processes; the host holds one checkpoint file
  while rank 0 writes it;
- LoRA: only the adapters train (their gradients and Adam states); the frozen base is held whole;
- the arena's copies: KL's frozen reference model, L2-SP's initial weights, EMA's slow weights;
- a monitored fine-tune's checks (`finetune.monitor`): between optimizer steps, with the gradients freed, the
  probes scored as a score job scores them, in training's compute dtype (under FSDP with the root gathered);
- scoring with vLLM: its share of the weights and one max-length sequence's key-value cache (sized and
  checked where the engine starts: forgetmap.engine);
- scoring with torch, the gradient-similarity and the semantic-similarity jobs: their weights and the most
  their largest batch holds at once, traced at the model's real widths on the meta device
  (forgetmap.meta_peak).

Each figure is what the job's tensors hold at their peak (`torch.cuda.max_memory_allocated`); what the
caching allocator reserves beyond it and CUDA's context come on top (`on_card`: the margin every check adds).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from .anatomy import Shape
from .kept import kept

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "half": 2}
GIB = 2**30
HOST_MARGIN = 1.1  # a host memory request over what the terms count (Python's and the libraries' own)
# What a GPU job takes of its card beyond the bytes its tensors hold at their peak: torch's caching allocator
# reserves more than it has allocated (measured on an H200 at the peak of every job kind, gpu-run.md: 1.03-1.15x
# for jobs of 5 GiB and more, gradient checkpointing's the most; 1.12 GiB more at 3.7 GiB), and CUDA's own
# context (kernels, cuBLAS workspaces) is in no torch figure.
RESERVED_RATIO = 1.16
RESERVED_FIXED = 0.75 * 2**30
CUDA_CONTEXT = 0.5 * 2**30
MAX_FILE_BYTES = 5 * GIB  # a checkpoint file, as save_pretrained's default max_shard_size (forgetmap.sharded)
PROCESS_HOST = 3 * GIB  # one training process's host memory beside any weights: Python, torch, CUDA's context


def on_card(device_bytes: float) -> float:
    """The memory of the card a job takes whose tensors hold `device_bytes` at their peak: what the allocator
    reserves for them, and CUDA's context."""
    return device_bytes * RESERVED_RATIO + RESERVED_FIXED + CUDA_CONTEXT


def card_margin() -> str:
    """The margin `on_card` adds, in words (for messages)."""
    return f"x{RESERVED_RATIO:g} + {(RESERVED_FIXED + CUDA_CONTEXT) / 2**30:g} GiB for the allocator and CUDA"


@functools.lru_cache(maxsize=None)
def activation_coefficients(config: str, autocast: bool, frozen: bool = False) -> tuple[float, float, float, float]:
    """Bytes autograd keeps per token and layer, as (per hidden unit, per key-value unit, per MLP unit,
    constant): measured by running the architecture's own forward at tiny widths (four variants, one and two
    layers, two lengths, so that what scales with the weights, such as autocast's copies, drops out) with
    saved-tensor hooks counting each kept storage once, and solved for the linear coefficients. `frozen`:
    the weights need no gradient (LoRA's base), so only what the inputs' gradients need is kept. `config`: a
    directory or a config as JSON (a Shape's: read once per architecture and kept, forgetmap.kept)."""
    from .anatomy import is_json

    measure = _activation_coefficients if is_json(config) else _activation_coefficients.made
    return tuple(measure(config, autocast, frozen))


@kept
def _activation_coefficients(config, autocast: bool, frozen: bool) -> tuple[float, float, float, float]:
    import numpy as np

    from .anatomy import config_of

    base = config_of(config)
    from .models import widths

    intermediate = widths(base)[4]
    grouped = getattr(base.get_text_config(), "num_key_value_heads", None) is not None
    rows, bytes_per = [], []
    for h, i, ratio in ((128, 256, 1), (256, 256, 1), (128, 512, 1), (128, 256, 4)):
        per_layer = []
        for tokens in (32, 64):
            saved = [_saved_bytes(base, h, i, ratio, layers, tokens, autocast, frozen) for layers in (1, 2)]
            per_layer.append(saved[1] - saved[0])
        rows.append([h, h // ratio if grouped else h, i if intermediate else 0, 1])
        bytes_per.append((per_layer[1] - per_layer[0]) / 32)
    solution = np.linalg.lstsq(np.array(rows, dtype=float), np.array(bytes_per), rcond=None)[0]
    return tuple(float(x) for x in solution)  # without grouped heads the key-value width is the hidden one


def _saved_bytes(base, hidden: int, intermediate: int, kv_ratio: int, layers: int, tokens: int,
                 autocast: bool, frozen: bool = False) -> int:
    """Bytes of the tensors autograd keeps in one forward of a tiny variant of `base`'s architecture."""
    import copy

    import torch
    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(base)
    text = config.get_text_config()
    heads = 4
    values = {"hidden_size": hidden, "num_attention_heads": heads, "num_hidden_layers": layers, "vocab_size": 64,
              "intermediate_size": intermediate if getattr(text, "intermediate_size", None) else None,
              "num_key_value_heads": heads // kv_ratio if getattr(text, "num_key_value_heads", None) else None,
              "head_dim": hidden // heads if getattr(text, "head_dim", None) else None}
    for key, value in values.items():
        if value is not None:
            setattr(text, key, value)
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if isinstance(getattr(text, key, None), int):
            setattr(text, key, 0)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    weights = {p.untyped_storage()._cdata for p in model.parameters()}
    seen: set = set()
    total = 0

    def pack(tensor):
        nonlocal total
        storage = tensor.untyped_storage()
        if storage._cdata not in weights and storage._cdata not in seen:
            seen.add(storage._cdata)
            total += storage.nbytes()
        return tensor

    ids = torch.randint(1, 60, (1, tokens))
    inputs = {"input_ids": ids}
    if frozen:  # the gradient flows to the inputs only, as under LoRA toward the first adapter
        model.requires_grad_(False)
        inputs = {"inputs_embeds": model.get_input_embeddings()(ids).requires_grad_()}
    cast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), cast:
        model(**inputs, attention_mask=torch.ones_like(ids))
    return total


@dataclass(frozen=True)
class Need:
    """A job's memory by term: bytes on each GPU (or, on a CPU, the process's) and on the host; a fine-tune's
    `phases`: its device bytes at each moment that can be its peak (`_phases`, what it holds throughout included)."""

    terms: dict
    host: dict
    phases: dict = field(default_factory=dict)

    @property
    def device(self) -> float:
        return float(sum(self.terms.values()))

    @property
    def host_total(self) -> float:
        return float(sum(self.host.values()))


def finetune_need(model: Shape, settings: dict, cuda: bool, lora: int = 0, arm: dict | None = None) -> Need:
    """A fine-tune's memory per process at its peak: `settings` the job's fine-tuning settings (batch_size,
    max_length, grad_accum, processes, method, bf16, gradient_checkpointing; `monitor` with its token_budget
    and max_length where the fine-tune scores probes as it trains), `lora` the adapters' parameters
    (method lora), `arm` the mitigation arm whose copies it holds (kl_base, l2_sp, ema). The terms are those
    held at the peak (`_phases`): in one process the gradients are created as the backward pass frees the
    activations (set to None after each step), so the two are not summed unless micro-batches accumulate."""
    arm = arm or {}
    processes = settings.get("processes", 1)
    full = settings.get("method", "full") == "full"
    shards = processes if full and processes > 1 else 1
    trained = model.parameters if full else lora
    fsdp = shards > 1
    terms = {"weights": 4 * model.parameters / shards + 4 * lora,
             "adam": 8 * trained / shards}
    if arm.get("kl_base") is not None and full:  # a frozen copy (LoRA: the adapter switched off instead)
        terms["kl_reference"] = 4 * model.parameters
    if arm.get("l2_sp") is not None:
        terms["l2_sp_anchor"] = 4 * trained / shards
    if arm.get("ema") is not None:
        terms["ema_weights"] = 4 * trained / shards
    held = float(sum(terms.values()))
    phases = _phases(model, settings, cuda, lora, arm, shards)
    terms.update(max(phases.values(), key=lambda phase: sum(phase.values())))
    # the host: each process's own (Python, torch, the CUDA context); each loads one tensor (one slice under
    # FSDP) at a time, and under FSDP rank 0 writes the checkpoint a file at a time (forgetmap.sharded)
    host = {"processes": PROCESS_HOST * processes,
            "checkpoint_file": min(MAX_FILE_BYTES, 4 * model.parameters) if fsdp else 0}
    return Need({k: float(v) for k, v in terms.items() if v}, {k: float(v) for k, v in host.items()},
                {name: held + float(sum(phase.values())) for name, phase in phases.items()})


def _phases(model: Shape, settings: dict, cuda: bool, lora: int, arm: dict, shards: int) -> dict[str, dict]:
    """What a fine-tune holds beside its weights, Adam states and arm copies, at each moment that can be its
    peak: the end of the forward pass, the start of the backward pass, the recomputation of checkpointed
    layers, the optimizer's step. Checked against an H200 (gpu-run.md: 8 x 1,024 tokens at OLMo-2 1B,
    measured / these 0.99-1.01 for full, checkpointing, LoRA and KL) and the CPU (tests)."""
    full = settings.get("method", "full") == "full"
    mixed = cuda and settings.get("bf16", True)
    compute = 2 if mixed else 4
    tokens = settings["batch_size"] * settings["max_length"]
    a, d, b, e = activation_coefficients(model.config, mixed, frozen=not full)
    per_layer = a * model.hidden + d * model.kv_heads * model.head_dim + b * model.intermediate + e
    checkpointed = settings.get("gradient_checkpointing") is True
    inputs = tokens * model.layers * 4 * model.hidden  # each layer's input, what checkpointing keeps
    kept = inputs if checkpointed else tokens * model.layers * per_layer
    if not full:  # each adapter keeps its input (one hidden-width tensor per adapted projection's input)
        kept += tokens * model.layers * 4 * model.hidden
    gradients = 4 * (model.parameters if full else lora) / shards
    kl = arm.get("kl_base") is not None
    monitor = settings.get("monitor") or {}
    if shards > 1:  # FSDP: the gathered blocks and root in the compute dtype, a block's unsharded gradients
        # until they are reduce-scattered (cast to fp32 for the reduction), every position's logits
        root = model.parameters - model.layers * model.block
        head = tokens * model.vocab * (compute + 12)
        gathered = (2 * model.block + root) * compute
        sharded = {"gradients": gradients, "fsdp_gathered": gathered,
                   "fsdp_block_gradients": model.block * (4 + (compute if mixed else 0)),
                   "activations": kept + (tokens * per_layer if checkpointed else 0), "output_head": head}
        phases = {"backward": sharded}
        if monitor.get("token_budget"):  # between steps: the root gathered around the body and head, a block at a time
            phases["check"] = {"fsdp_gathered": gathered, "monitor_check": check_scoring(model, mixed, monitor)}
        return phases
    # in one process on a GPU only the positions that carry a label go through the head (train.kept_loss),
    # unless an arm needs every position's logits (the KL anchor); elsewhere the loop holds the logits too
    logits = 0 if cuda and not kl else compute
    # autocast casts each weight once per forward and caches the copy until the forward ends; the backward
    # pass keeps those its matrix products saved: all of them, or under checkpointing the output head's only
    cast = 2 * model.parameters if mixed else 0
    saved = (2 * model.vocab * model.hidden if checkpointed else cast) if mixed else 0
    accumulated = gradients if settings.get("grad_accum", 1) > 1 else 0  # earlier micro-batches' gradients
    # the reference's logits, both log-softmaxes, the reference's probabilities and their difference
    reference = {"kl_logits": tokens * model.vocab * (compute + 16)} if kl else {}
    phases = {
        # the fp32 logits and their log-softmax (the compute-dtype logits freed once cast, unless held)
        "forward": {"autocast_copies": cast, "activations": kept, "output_head": tokens * model.vocab * (8 + logits),
                    "gradients": accumulated, **reference},
        # the log-softmax kept, its gradient and the logits' gradient, in fp32
        "backward": {"autocast_copies": saved, "activations": kept, "output_head": tokens * model.vocab * (12 + logits),
                     "gradients": accumulated, **reference},
        # AdamW's step: fused on a GPU; on a CPU one parameter at a time, the largest's square root and its
        # quotient as temporaries
        "step": {"gradients": gradients, "optimizer_temporaries": 0 if cuda else 8 * model.largest},
    }
    if checkpointed:  # a layer recomputed, the gradients written so far (at most all)
        phases["recompute"] = {"autocast_copies": saved, "activations": kept + tokens * per_layer,
                               "gradients": gradients}
    if monitor.get("token_budget"):  # between steps (gradients freed): the probes scored under autocast
        phases["check"] = {"autocast_copies": cast, "monitor_check": check_scoring(model, mixed, monitor)}
    return phases


def check_scoring(model: Shape, mixed: bool, monitor: dict) -> float:
    """What a monitored fine-tune's check holds beyond the weights it trains: the probes scored as a score job
    scores (forgetmap.meter: `token_budget` padded tokens in rows of up to `max_length`, every position
    through the output head in its chunks; the head check on its first batch), traced at the model's widths in
    training's compute dtype."""
    need = traced(score_need, model, "bfloat16" if mixed else "float32", monitor["token_budget"], monitor["max_length"])
    return float(sum(v for k, v in need.terms.items() if k != "weights"))


def traced(estimate, model: Shape, *args) -> Need:
    """A traced estimate of a model's job (`score_need`, `generation_need`, `gradient_need`), read once per
    architecture and settings and kept (forgetmap.kept): its figures are the architecture's and the arguments'.
    Another estimate (a stand-in) is called as it is."""
    import dataclasses

    if TRACED.get(estimate.__name__) is not estimate:
        return estimate(model, *args)
    return Need(**_traced(estimate.__name__, dataclasses.asdict(model), *args))


@kept
def _traced(estimate: str, model: dict, *args) -> dict:
    import dataclasses

    return dataclasses.asdict(TRACED[estimate](Shape(**model), *args))


def arm_lora(settings: dict, arm: dict | None) -> tuple[str, int, list[str]]:
    """(method, rank, target modules) a fine-tune trains with: its own, or an arm's LoRA (a swept rank: the
    largest)."""
    lora = dict(settings.get("lora") or {})
    if arm and arm.get("lora"):
        ranks = arm["lora"].get("r", lora.get("r"))
        lora.update({k: v for k, v in arm["lora"].items() if v is not None},
                    r=max(ranks) if isinstance(ranks, list) else ranks)
        return "lora", lora["r"], list(lora["target_modules"])
    return settings.get("method", "full"), lora.get("r", 0), list(lora.get("target_modules") or [])


def fitted(model: Shape, settings: dict, cuda: bool, gpu_bytes: float | None,
           arm: dict | None = None) -> tuple[dict, Need]:
    """The fine-tune's settings with `gradient_checkpointing: auto` decided, and its memory: off on a CPU or
    where the GPU's memory is unknown (None) or holds the fine-tune without it (`on_card`), else on."""
    method, rank, targets = arm_lora(settings, arm)
    from .anatomy import lora_parameters

    lora = lora_parameters(model.config, rank, targets) if method == "lora" else 0
    settings = {**settings, "method": method}
    if settings.get("gradient_checkpointing") == "auto":
        without = finetune_need(model, {**settings, "gradient_checkpointing": False}, cuda, lora, arm)
        on = cuda and gpu_bytes is not None and on_card(without.device) > gpu_bytes
        settings["gradient_checkpointing"] = on
        if not on:
            return settings, without
    return settings, finetune_need(model, settings, cuda, lora, arm)


@functools.lru_cache(maxsize=None)  # planning asks once per model and settings
def score_need(model: Shape, dtype: str, token_budget: int, max_length: int, new_tokens: int = 0,
               gpu_bytes: float | None = None) -> Need:
    """A torch score job's memory on its device: the weights in `dtype`, and the largest of its phases, each
    traced on its largest batch: the first batch's check that body and head reproduce the logits
    (forgetmap.nll.head_reproduces_logits, on a short prefix); scoring (forgetmap.nll.TorchScorer:
    `token_budget` padded tokens in rows of `max_length`, padded so the attention mask is built, every position
    through the output head in its bounded chunks); and, where the shard has items to answer (`new_tokens` >
    0), generation (`generation_need`) of answers of `new_tokens` after contexts of `max_length`, its batch
    as the job sizes it on a GPU of `gpu_bytes` (None: unknown, or a CPU: by the token budget)."""
    import torch

    from .anatomy import config_of
    from .meta_peak import meta_model, peak_bytes
    from .nll import HEAD_CHECK_TOKENS, TorchScorer, head_check_logits

    net = meta_model(config_of(model.config), dtype)
    length = max(2, max_length)
    rows = max(1, token_budget // length)
    ids = torch.zeros((rows, length), dtype=torch.long, device="meta")
    mask = torch.ones_like(ids)
    scorer = TorchScorer(net, 0, token_budget)
    scorer.use_hidden = True  # body and head apart: what every causal LM forgetmap has met takes
    at = torch.arange(length - 1, device="meta")
    scored = torch.arange(rows, device="meta").repeat_interleave(length - 1)
    predict = at.repeat(rows)

    def scoring():
        with torch.no_grad():
            scorer.token_nll(ids, scored, predict, ids[scored, predict + 1], attention_mask=mask, argmax=[])

    weights = float(model.parameters * DTYPE_BYTES[dtype])
    # the check's two sets of logits, compared in fp32
    phases = {"head_check": peak_bytes(lambda: [t.float() for t in head_check_logits(net, ids[0, :HEAD_CHECK_TOKENS])]),
              "scoring": peak_bytes(scoring)}
    if new_tokens:
        cache = generation_cache_tokens(model, dtype, token_budget, gpu_bytes)
        phases["generation"] = generation_need(model, dtype, max(1, cache // (length + new_tokens)), length,
                                               new_tokens, token_budget).terms["generation"]
    largest = max(phases, key=phases.get)
    return Need({"weights": weights, largest: float(phases[largest])}, {})


def generation_cache_tokens(model: Shape, dtype: str, token_budget: int, gpu_bytes: float | None) -> int:
    """The tokens of key-value cache a generation batch may hold (forgetmap.generation.cache_budget): on a GPU
    its share of the memory the weights leave; on a CPU, or where the GPU is unknown, the token budget."""
    from .generation import cache_tokens

    if gpu_bytes is None:
        return token_budget
    free = gpu_bytes - on_card(model.parameters * DTYPE_BYTES[dtype])  # what the job finds free beside its weights
    return cache_tokens(free, model.kv_bytes_per_token(DTYPE_BYTES[dtype]))


@functools.lru_cache(maxsize=None)
def generation_need(model: Shape, dtype: str, rows: int, width: int, new_tokens: int, token_budget: int) -> Need:
    """One generation batch's memory beyond the weights, traced with forgetmap.generation's own prefill and
    decode step: the larger of the prefill (`rows` prompts of `width` tokens, read in chunks of the token
    budget) and the decode step that writes the last answer token (the key-value cache then holds every
    prompt and answer token before it, the most it holds: it only grows; a CUDA job's static cache holds it all
    from the prefill on, beside the prefill's activations)."""
    import torch

    from .generation import DynamicDecoding
    from .anatomy import config_of
    from .meta_peak import meta_model, peak_bytes
    from .models import cache_keyword

    net = meta_model(config_of(model.config), dtype)
    keyword = cache_keyword(net)
    chunk = max(1, token_budget // rows)
    total = width + max(1, new_tokens)
    attention = torch.ones((rows, total), dtype=torch.long, device="meta")

    def prefill(length):
        ids = torch.zeros((rows, length), dtype=torch.long, device="meta")
        cache = DynamicDecoding(net, keyword, length, total - length)
        with torch.no_grad():
            return cache, cache.prefill(ids, attention, chunk)

    reading = peak_bytes(lambda: prefill(width))

    def last_step(before):  # the cache before the last step, grown as the job grows it: one token a layer
        cache, logits = before
        token = logits.argmax(-1)
        with torch.no_grad():
            cache.step(token, attention, token.new_zeros(rows), total - cache.width)

    writing = peak_bytes(last_step, setup=lambda: prefill(total - 1))
    return Need({"generation": float(max(reading, writing))}, {})


@functools.lru_cache(maxsize=None)  # planning asks once per model and settings
def gradient_need(model: Shape, max_length: int, dim: int = 1024, fused_attention: bool = True) -> Need:
    """A gradient-similarity job's memory (forgetmap.gradients): the fp32 weights and one example's projected
    gradient, traced: its forward and backward at `max_length` tokens (activations, the fp32 logits), each
    parameter's gradient projected and freed as the backward pass writes it. `fused_attention`: a GPU's
    (forgetmap.meta_peak); False: the math path's scores, as a CPU's fp32 backward keeps them. A model small enough
    to differentiate several examples at once (forgetmap.gradients.together) holds each further one's activations,
    every one's float32 gradient (within GRADIENT_BYTES) and its largest weight's in float64 as it is projected (not
    traced)."""
    import torch

    from .gradients import CountSketch, example_projection, together
    from .anatomy import config_of
    from .meta_peak import meta_model, peak_bytes

    net = meta_model(config_of(model.config), "float32")
    sketch = CountSketch(net, dim)
    ids = torch.zeros((1, max(2, max_length)), dtype=torch.long, device="meta")
    example = peak_bytes(lambda: example_projection(net, sketch, ids, 1), flash=fused_attention)
    batch = together(model.parameters, max_length)  # a small model's examples differentiated together
    extra = {} if batch == 1 else {  # the others' activations, every example's fp32 gradient, a weight's in fp64
        "examples_together": (batch - 1) * float(example) + batch * (4.0 * model.parameters + 8.0 * model.largest)}
    return Need({"weights": 4.0 * model.parameters, "one_example": float(example), **extra}, {})


@functools.lru_cache(maxsize=None)  # planning asks once per model and settings
def embedding_need(config, batch_size: int, max_length: int) -> Need:
    """A semantic-similarity job's memory (forgetmap.embed): the encoder's fp32 weights and its forward over one
    batch of `batch_size` texts of `max_length` tokens, traced."""
    import torch

    from .anatomy import config_of
    from .meta_peak import meta_model, peak_bytes

    net = meta_model(config_of(config), "float32", causal=False)
    ids = torch.zeros((batch_size, max_length), dtype=torch.long, device="meta")

    def forward():
        with torch.no_grad():
            net(input_ids=ids, attention_mask=torch.ones_like(ids))

    weights = sum(p.numel() for p in net.parameters()) * 4
    return Need({"weights": float(weights), "forward": float(peak_bytes(forward))}, {})


TRACED = {estimate.__name__: estimate for estimate in (score_need, generation_need, gradient_need)}  # kept by name
