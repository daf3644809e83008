"""How long a job takes on the device it runs on, from the work it holds and rates measured on that device.

A job's work is counted, not guessed: the tokens it trains on, scores and generates, and how many passes
(optimizer micro-steps, scoring batches, decode steps) carry them. Its time is

    start + weights / load rate + setups x seconds per setup + examples x seconds to tokenize one
          + sum over its kinds of work (FLOPs / FLOP rate + passes x seconds per pass)

where FLOPs are the model's per token (2 x the parameters that multiply, and attention over the context; x 3
with a backward pass, x 4 with recomputation), and `start`, the rates and the seconds per pass are measured
per device kind and job kind (`assets/rates.json`: each figure with the device, date and commit it was
measured at). The seconds per pass are what a tiny model or a decode step spends in launches and Python,
where FLOPs say nothing; the FLOP rate is what a large model's matrix products sustain.

A device that has no figures of its own borrows another's and says so: a GPU the nearest measured card's, its
training and scoring scaled by the two cards' dense bf16 peaks and its decoding by their memory bandwidths
(forgetmap.gpu_specs, each figure with its source); a CPU the nearest measured CPU's, scaled by a few seconds of
probing (forgetmap.probe). Each CPU model measured has figures of its own (`cpu_key`), so one rates file serves every
machine it was calibrated on.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

RATES = Path(__file__).parent / "assets" / "rates.json"
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


@dataclass(frozen=True)
class Device:
    """Where a job runs: `cpu` with its threads, or a GPU card (`h200`, ...) with its count."""

    kind: str  # "cpu" or "gpu"
    name: str | None = None  # a GPU's card key (forgetmap.gpu_models), or the CPU's model name
    count: int = 1  # threads on a CPU, processes (one GPU each) on GPUs
    assumed: str | None = None  # why a GPU is taken to be `name` where no GPU model was named, or why a CPU is not known

    def label(self) -> str:
        if self.kind == "cpu":
            return f"cpu x{self.count}"
        return f"{self.name or 'GPU'}{'?' if self.assumed else ''} x{self.count}"


def slowest_card(memory_bytes: float) -> str:
    """The card of least bf16 peak among those with at least `memory_bytes`: what a GPU no profile names is
    estimated as, so that a time limit from the estimate holds on whichever card the job gets."""
    from .gpu_models import CARDS
    from .gpu_specs import SPECS

    fits = [name for name, sizes in CARDS.items() if name in SPECS and max(sizes) * 2**20 >= memory_bytes * 0.99]
    return min(fits or SPECS, key=lambda name: SPECS[name].bf16_tflops)


@dataclass(frozen=True)
class Rate:
    """The figures of one device kind for one kind of work: FLOP/s, seconds per pass; and where they come from."""

    flops_per_s: float
    pass_s: float
    source: str  # the device, date and commit measured


@dataclass(frozen=True)
class Figures:
    """A device's start-up and load rate, and its rate per kind of work."""

    start_s: float
    load_bytes_per_s: float
    rates: dict  # kind -> Rate
    source: str
    borrowed: str | None = None  # the device whose figures these are, where not this one's
    warm_start_s: float | None = None  # a job forked from a warm server (forgetmap.warm), where measured
    setup_s: dict = field(default_factory=dict)  # per setup kind (SETUPS), where measured
    example_s: float = 0.0  # tokenizing one example, where measured


def cpu_key(machine: str) -> str:
    """A CPU's entry in the rates file, named by its model (`forgetmap calibrate` writes one per model)."""
    return "cpu-" + (re.sub(r"[^a-z0-9]+", "-", machine.lower()).strip("-") or "unnamed")


def read_rates(path: str | Path | None = None) -> dict:
    """The rates file: `{"devices": {name: {...}}}`, each device's figures with their provenance."""
    path = Path(path) if path else RATES
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return {"devices": {}}


def figures(device: Device, rates: dict, parameters: float) -> Figures:
    """The figures a job of a model of `parameters` on `device` is estimated with: its device's own where
    measured, else another's (said in `borrowed`); of the sizes measured, the nearest. A CPU not measured takes
    the first listed as they are (where its probe can say more: forgetmap.probe.scaled_figures)."""
    devices = rates.get("devices", {})
    if device.kind == "cpu":
        cpus = [d for d in devices.values() if d.get("kind") == "cpu"]
        if not cpus:
            raise KeyError("the rates file has no CPU figures: run `forgetmap calibrate`")
        own = [d for d in cpus if d.get("machine") == device.name]
        entry = own[0] if own else cpus[0]  # a CPU not measured nor probed borrows the first listed
        borrowed = None if own or (device.name is None and not device.assumed) else \
            f"measured on {entry.get('machine')}, as they are" + (f": {device.assumed}" if device.assumed else "")
        scale_threads = device.count / entry.get("threads", 1)  # the FLOP rate taken as growing with the threads
        return entry_figures(entry, scale_threads, borrowed, parameters)
    gpus = {name: d for name, d in devices.items() if d.get("kind") == "gpu"}
    if not gpus:
        raise KeyError("the rates file has no GPU figures: `pytest -m gpu` on a GPU measures them")
    if device.name in gpus:
        return entry_figures(gpus[device.name], 1.0, None, parameters)
    from .gpu_specs import SPECS, nearest

    name = nearest(device.name, list(gpus))
    what = f"{device.name} ({device.assumed})" if device.assumed else device.name or "an unnamed GPU"
    if device.name in SPECS and name in SPECS:
        mine, theirs = SPECS[device.name], SPECS[name]
        peak, bandwidth = mine.bf16_tflops / theirs.bf16_tflops, mine.bandwidth_gbs / theirs.bandwidth_gbs
        how = (f"{name}'s for {what}, x{peak:.2f} by their bf16 peaks (training, scoring) and x{bandwidth:.2f} by "
               f"their memory bandwidths (decoding): forgetmap.gpu_specs")
        return entry_figures(gpus[name], {"train": peak, "score": peak, "generate": bandwidth}, how, parameters)
    why = f"{device.name!r} is not in forgetmap.gpu_specs" if device.name else "no GPU model named"
    return entry_figures(gpus[name], 1.0, f"{name}'s for {what}, as they are: {why}", parameters)


def entry_figures(entry: dict, scale: float | dict, borrowed: str | None, parameters: float) -> Figures:
    """An entry's figures, each kind's FLOP rate x `scale` (one factor, or one per kind of work)."""
    rates = {}
    for kind in KINDS:
        measured = entry["rates"][kind]
        measured = measured if isinstance(measured, list) else [measured]
        near = min(measured, key=lambda r: abs(math.log(max(r.get("parameters") or parameters, 1) / max(parameters, 1))))
        factor = scale[kind] if isinstance(scale, dict) else scale
        rates[kind] = Rate(near["flops_per_s"] * factor, near["pass_s"], entry["source"])
    return Figures(entry["start_s"], entry["load_bytes_per_s"], rates, entry["source"], borrowed,
                   entry.get("warm_start_s"), entry.get("setup_s", {}), entry.get("example_s", 0.0))


def seconds(work: Work, fig: Figures, warm: bool = False) -> float:
    """A job's wall time from the work of one of its processes (each on its own device, in parallel): start-up
    (forked from a warm server: `warm`), loading, and each kind of work at its rate."""
    compute = sum(work.flops[k] / fig.rates[k].flops_per_s + work.passes[k] * fig.rates[k].pass_s for k in KINDS)
    start = fig.warm_start_s if warm and fig.warm_start_s is not None else fig.start_s
    setup = sum(count * fig.setup_s.get(kind, 0.0) for kind, count in work.setups.items())
    return start + work.load_bytes / fig.load_bytes_per_s + setup + work.examples * fig.example_s + compute


def runtime_minutes(estimate_s: float, attempt: int = 1) -> int:
    """SLURM's --time for a job estimated at `estimate_s`: the estimate x MARGIN plus SLACK minutes, whole
    minutes, x the attempt (a retry of a job that ran out gets twice, then three times)."""
    return math.ceil((estimate_s * MARGIN / 60 + SLACK_MIN)) * attempt


MARGIN = 1.5  # what a job's time limit allows over its estimate (the rates' spread between runs and machines)
SLACK_MIN = 5  # and minutes on top: queue start, a node's cold file cache
