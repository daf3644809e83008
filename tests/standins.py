"""Tiny random-weight stand-ins of real Hugging Face architectures, each with its own BPE tokenizer
trained here, saved as `save_pretrained` directories or into a Hugging Face cache layout.

Nothing is downloaded: these are how a real model directory (Pythia's GPTNeoX without a chat template,
OLMo, OLMo2 with the Tulu template, Llama) is rehearsed on a machine without weights.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

# the Tulu / OLMo2-Instruct chat template, as its tokenizer_config.json carries it
TULU_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'system' %}"
    "{{ '<|system|>\n' + message['content'] + '\n' }}{% elif message['role'] == 'user' %}"
    "{{ '<|user|>\n' + message['content'] + '\n' }}{% elif message['role'] == 'assistant' %}"
    "{% if not loop.last %}{{ '<|assistant|>\n'  + message['content'] + eos_token + '\n' }}"
    "{% else %}{{ '<|assistant|>\n'  + message['content'] + eos_token }}{% endif %}{% endif %}"
    "{% if loop.last and add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}{% endfor %}")

WORDS = ("the river model token story number city garden winter yellow quiet seven answer question "
         "paper forgets learns remembers writes reads small large early late north south because while "
         "summary translate review sentiment positive negative premise hypothesis context choose option").split()

# architecture -> (config class, its special tokens: eos, pad (None: the tokenizer has none), bos)
ARCHITECTURES = {
    "gpt_neox": ("GPTNeoXConfig", "<|endoftext|>", None, "<|endoftext|>"),  # Pythia: no pad token
    "olmo": ("OlmoConfig", "<|endoftext|>", "<|padding|>", None),
    "olmo2": ("Olmo2Config", "<|endoftext|>", "<|pad|>", "<|endoftext|>"),
    "llama": ("LlamaConfig", "</s>", None, "<s>"),
}


def sentences(n: int, seed: int = 0) -> list[str]:
    """Plain English-looking sentences (not the demo's generator) to train tokenizers and fill corpora."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        words = rng.choice(WORDS, size=int(rng.integers(4, 14)))
        out.append(" ".join(words).capitalize() + rng.choice([".", "?", "!"]) + f" {int(rng.integers(0, 999))}")
    return out


def train_tokenizer(architecture: str, chat_template: str | None = None, vocab_size: int = 400):
    """A byte-level BPE tokenizer with the architecture's special tokens (GPTNeoX-style vocabulary:
    `<|endoftext|>` and `<|padding|>` are in the vocabulary even where no pad token is set)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    _, eos, pad, bos = ARCHITECTURES[architecture]
    specials = list(dict.fromkeys([eos, "<|padding|>", *(t for t in (pad, bos) if t), "<|user|>", "<|assistant|>"]))
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(sentences(400, seed=7), trainer=trainer)
    if architecture == "llama":  # Llama's tokenizer prepends BOS to every text
        tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, tok.token_to_id(bos))])
    kwargs = {"eos_token": eos, **({"pad_token": pad} if pad else {}), **({"bos_token": bos} if bos else {})}
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, **kwargs)
    if chat_template:
        tokenizer.chat_template = chat_template
    return tokenizer


def build_model(architecture: str, tokenizer, seed: int = 0, max_positions: int = 128, width: int = 32,
                vocab: int | None = None):
    """A 2-layer, `width`-wide model of the architecture (two heads) with seeded random weights. vLLM's CPU
    attention needs heads of 32 dimensions or more: width 64. `vocab`: larger than the tokenizer's."""
    import torch
    import transformers

    config_class = getattr(transformers, ARCHITECTURES[architecture][0])
    common = dict(vocab_size=vocab or len(tokenizer), hidden_size=width, intermediate_size=2 * width, num_hidden_layers=2,
                  num_attention_heads=2, max_position_embeddings=max_positions,
                  eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                  bos_token_id=tokenizer.bos_token_id)
    if architecture != "gpt_neox":
        common["num_key_value_heads"] = 2
    config = config_class(**common)
    torch.manual_seed(seed)
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def save_standin(directory: Path, architecture: str, chat_template: str | None = None, seed: int = 0,
                 tokenizer: bool = True, vocab_size: int = 400, max_positions: int = 128, width: int = 32,
                 model_vocab: int | None = None) -> Path:
    """A `save_pretrained` model directory (without a tokenizer when `tokenizer` is False); the same
    architecture and vocabulary size give the same tokenizer, `seed` other weights. `model_vocab`: the
    model's vocabulary where it is larger than its tokenizer's (a real model's 100,352 at a small width)."""
    directory = Path(directory)
    tok = train_tokenizer(architecture, chat_template, vocab_size)
    build_model(architecture, tok, seed, max_positions, width, model_vocab).save_pretrained(directory)
    if tokenizer:
        tok.save_pretrained(directory)
    return directory


def cache_standin(cache: Path, repo_id: str, architecture: str, chat_template: str | None = None, seed: int = 0,
                  vocab_size: int = 400, max_positions: int = 128, width: int = 32) -> Path:
    """The stand-in placed in a Hugging Face hub cache (HF_HUB_CACHE) as `repo_id` at its main revision,
    as `hf download` leaves it; returns the snapshot directory."""
    commit = hashlib.sha1(repo_id.encode()).hexdigest()
    repo = Path(cache) / f"models--{repo_id.replace('/', '--')}"
    snapshot = save_standin(repo / "snapshots" / commit, architecture, chat_template, seed, vocab_size=vocab_size,
                            max_positions=max_positions, width=width)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return snapshot
