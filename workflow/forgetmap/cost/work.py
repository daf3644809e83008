"""What one job computes, counted rather than guessed: the tokens it trains on, scores and generates, the FLOPs
they take and how many passes (optimizer micro-steps, scoring batches, decode steps) carry them, the weights it
loads, the examples it tokenizes and the setups it makes.

A token's FLOPs are the model's per token: 2 x the parameters that multiply, and attention over the context; x 3
with a backward pass, x 4 with recomputation (forgetmap.cost.jobs counts each kind of job's tokens).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

KINDS = ("train", "score", "generate")
SETUPS = ("train", "score")  # what a job sets up before it computes: a fine-tune's, a scoring job's


@dataclass
class Work:
    """What one job (one of its processes) computes: FLOPs and passes per kind, the weights it loads, the
    examples it tokenizes, and the setups it makes (a fine-tune's or a scoring job's reading, checks and
    writing: what is neither start-up, loading nor arithmetic)."""

    flops: dict = field(default_factory=lambda: dict.fromkeys(KINDS, 0.0))
    passes: dict = field(default_factory=lambda: dict.fromkeys(KINDS, 0.0))
    load_bytes: float = 0.0
    tokens: dict = field(default_factory=lambda: dict.fromkeys(KINDS, 0.0))  # for the table: tokens per kind
    examples: float = 0.0
    setups: dict = field(default_factory=lambda: dict.fromkeys(SETUPS, 0))

    def add(self, kind: str, tokens: float, flops_per_token: float, passes: float) -> "Work":
        self.tokens[kind] += tokens
        self.flops[kind] += tokens * flops_per_token
        self.passes[kind] += passes
        return self

    def __add__(self, other: "Work") -> "Work":
        total = Work(load_bytes=self.load_bytes + other.load_bytes, examples=self.examples + other.examples)
        for kind in KINDS:
            total.flops[kind] = self.flops[kind] + other.flops[kind]
            total.passes[kind] = self.passes[kind] + other.passes[kind]
            total.tokens[kind] = self.tokens[kind] + other.tokens[kind]
        for kind in SETUPS:
            total.setups[kind] = self.setups[kind] + other.setups[kind]
        return total


def forward_flops(parameters: int, layers: int, hidden: int, context: float) -> float:
    """FLOPs of one token's forward pass: every multiplying weight once (2 x), and its attention over `context`
    earlier tokens (scores and values: 4 x layers x hidden x context)."""
    return 2.0 * parameters + 4.0 * layers * hidden * context


def multiplying_parameters(shape) -> int:
    """The parameters a token multiplies: all but an untied input embedding (a lookup, not a product)."""
    tied = json.loads(shape.config or "{}").get("tie_word_embeddings", True) if shape.config else True
    embedding = 0 if tied else shape.vocab * shape.hidden
    return max(1, shape.parameters - embedding)

