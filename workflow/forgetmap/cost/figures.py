"""Which figures a job's device is estimated with, decided in this one place, and the job's time from them.

A job's time is

    start + weights / load rate + setups x seconds per setup + examples x seconds to tokenize one
          + sum over its kinds of work (FLOPs / FLOP rate + passes x seconds per pass)

with its work counted by forgetmap.cost.work and the figures, in this order of preference:
- the device's own, measured (forgetmap.cost.rates: a CPU model's entry, a card's);
- a CPU whose jobs run on this machine, where its probe (forgetmap.cost.probe) says the rates file does not describe
  it (its model has no entry, or the entry misses the probe by over OWN: a cloud's machines share names): the
  nearest measured CPU's, scaled kind by kind by what the probe shows;
- a GPU without figures of its own: the nearest measured card's, its training and scoring scaled by the two cards'
  dense bf16 peaks and its decoding by their memory bandwidths (forgetmap.cost.cards);
- otherwise another's as they are, saying so (a cluster's CPU never measured nor probed: the first listed).
The run's finished jobs then scale a kind's estimate (forgetmap.cost.learned).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

from . import cards
from .rates import Figures, cpu_entries, entry_figures
from .work import KINDS, Work


@dataclass(frozen=True)
class Device:
    """Where a job runs: `cpu` with its threads, or a GPU card (`h200`, ...) with its count."""

    kind: str  # "cpu" or "gpu"
    name: str | None = None  # a GPU's card key (forgetmap.cost.cards), or the CPU's model name
    count: int = 1  # threads on a CPU, processes (one GPU each) on GPUs
    assumed: str | None = None  # why a GPU is taken to be `name` where no GPU model was named, or why a CPU is not known

    def label(self) -> str:
        if self.kind == "cpu":
            return f"cpu x{self.count}"
        return f"{self.name or 'GPU'}{'?' if self.assumed else ''} x{self.count}"


def figures(device: Device, rates: dict, parameters: float, measured: dict | None = None) -> Figures:
    """The figures a job of a model of `parameters` on `device` is estimated with (the module's order of
    preference); of the model sizes measured, the nearest. `measured`: the probe of the machine its jobs run on
    (`probe_where`), where there is one. KeyError where the rates file has no figures for the device's kind at all."""
    if device.kind == "cpu":
        cpus = cpu_entries(rates)
        if not cpus:
            raise KeyError("the rates file has no CPU figures: run `forgetmap calibrate`")
        return cpu_figures(device, cpus, parameters, measured)
    return gpu_figures(device, rates, parameters)


def probe_where(device: Device, rates: dict, cluster: str | None, partition_probe: dict | None) -> dict | None:
    """The probe a CPU job's figures are checked against, measured only where its jobs run: this machine's (kept per
    boot) for a local run; for a cluster's jobs (`cluster`: its executor), their partition's probe job's
    (`partition_probe`, read from its file once it has run), never the submitting host's; else None (borrowed)."""
    if device.kind != "cpu" or not cpu_entries(rates):
        return None
    if not cluster:
        return cpu_probe(device)
    return partition_probe if partition_probe and "failed" not in partition_probe else None


def cpu_figures(device: Device, cpus: list[dict], parameters: float, measured: dict | None) -> Figures:
    """A CPU's figures from the rates file's CPU entries `cpus` and, where this machine was probed, its probe
    (`measured`)."""
    own = [d for d in cpus if d.get("machine") == device.name]
    if measured is not None and not (own and fits(own[0], measured)):
        scaled = scale(cpus, measured)
        why = "" if not own else "its CPU model's own figures miss this machine's probe by over 1.5x: "
        return entry_figures(scaled.entry, device.count / measured["threads"], why + scaled.how, parameters)
    entry = own[0] if own else cpus[0]  # a CPU neither measured nor probed borrows the first listed
    borrowed = None if own or (device.name is None and not device.assumed) else \
        f"measured on {entry.get('machine')}, as they are" + (f": {device.assumed}" if device.assumed else "")
    return entry_figures(entry, device.count / entry.get("threads", 1), borrowed, parameters)  # FLOPs x threads


def gpu_figures(device: Device, rates: dict, parameters: float) -> Figures:
    gpus = {name: d for name, d in rates.get("devices", {}).items() if d.get("kind") == "gpu"}
    if not gpus:
        raise KeyError("the rates file has no GPU figures: `pytest -m gpu` on a GPU measures them")
    if device.name in gpus:
        return entry_figures(gpus[device.name], 1.0, None, parameters)
    name = cards.nearest(device.name, list(gpus))
    what = f"{device.name} ({device.assumed})" if device.assumed else device.name or "an unnamed GPU"
    mine, theirs = cards.specified(device.name), cards.specified(name)
    if mine and theirs:
        peak, bandwidth = mine.bf16_tflops / theirs.bf16_tflops, mine.bandwidth_gbs / theirs.bandwidth_gbs
        how = (f"{name}'s for {what}, x{peak:.2f} by their bf16 peaks (training, scoring) and x{bandwidth:.2f} by "
               f"their memory bandwidths (decoding): forgetmap.cost.cards")
        return entry_figures(gpus[name], {"train": peak, "score": peak, "generate": bandwidth}, how, parameters)
    why = f"{device.name!r} has no peak in forgetmap.cost.cards" if device.name else "no GPU model named"
    return entry_figures(gpus[name], 1.0, f"{name}'s for {what}, as they are: {why}", parameters)


def seconds(work: Work, fig: Figures, warm: bool = False) -> float:
    """A job's wall time from the work of one of its processes (each on its own device, in parallel): start-up
    (forked from a warm server: `warm`), loading, setups, tokenizing, and each kind of work at its rate."""
    compute = sum(work.flops[k] / fig.rates[k].flops_per_s + work.passes[k] * fig.rates[k].pass_s for k in KINDS)
    start = fig.warm_start_s if warm and fig.warm_start_s is not None else fig.start_s
    setup = sum(count * fig.setup_s.get(kind, 0.0) for kind, count in work.setups.items())
    return start + work.load_bytes / fig.load_bytes_per_s + setup + work.examples * fig.example_s + compute


# --- a CPU's probe, against the measured CPUs' figures ------------------------------------------------------------

_SAID: set = set()  # the probe failures said in this process: once each, however many rows ask


def cpu_probe(device: Device) -> dict | None:
    """This machine's probe (forgetmap.cost.probe, kept per machine and boot): one thread in as many processes as
    this process may run on, what a run of one-thread jobs meets (a job of several threads is scaled from it as a
    calibrated CPU's figures are), probed once for every stage. None where it could not run: said once with its
    reason, and the figures are taken as they are."""
    from ..devices import usable_cpus
    from . import probe

    found = probe.measured(device.name, 1, usable_cpus())
    if "failed" not in found:
        return found
    if found["failed"] not in _SAID:
        _SAID.add(found["failed"])
        print(f"forgetmap: the CPU probe could not run on this machine this boot ({found['failed']}); this CPU's job "
              f"times are the rates file's as measured", file=sys.stderr)
    return None


@dataclass(frozen=True)
class Scaled:
    """A measured CPU's figures as the probe scales them for this one: the entry's figures to use, and how."""

    entry: dict
    how: str  # which CPU's figures, scaled by what


def predicted(entry: dict, probe: dict) -> dict[str, float]:
    """What the probe's work would have taken on `entry`'s CPU, from its figures (at the probe's threads)."""
    fig = entry_figures(entry, probe["threads"] / entry.get("threads", 1), None, probe["parameters"])
    return {k: w["flops"] / fig.rates[k].flops_per_s + w["passes"] * fig.rates[k].pass_s
            for k, w in probe["work"].items()}


def miss(entry: dict, probe: dict) -> float:
    """How far `entry`'s figures predict the probe: the summed |log(predicted / measured)| of its kinds of work."""
    guess = predicted(entry, probe)
    return sum(abs(math.log(guess[k] / probe["seconds"][k])) for k in KINDS)


# how far a CPU's own figures may miss its probe, in each kind of work, before they are taken for another
# machine's of the same name (calibrations of one machine differ by about 10 %, a probe's runs by as much)
OWN = 1.5


def fits(entry: dict, probe: dict) -> bool:
    """Whether `entry`'s figures predict the probe within OWN in each kind of work: this machine's own."""
    guess = predicted(entry, probe)
    return all(1 / OWN <= guess[k] / probe["seconds"][k] <= OWN for k in KINDS)


def scale(cpus: list[dict], probe: dict) -> Scaled:
    """The nearest measured CPU's figures scaled to the probe's: each kind's rates by its predicted / measured
    seconds, the start-ups and load rate as the probe measured them, the setups and tokenizing by the warm
    start-ups' ratio. The entry's threads become the probe's (its FLOP rates, scaled by the ratio of threads as
    `cpu_figures` does, are what the probe was predicted with)."""
    from .probe import undisturbed

    nearest = min(cpus, key=lambda entry: miss(entry, probe))
    guess = predicted(nearest, probe)
    speed = {k: guess[k] / probe["seconds"][k] for k in KINDS}
    threads = probe["threads"] / nearest.get("threads", 1)
    start = probe["warm_start_s"] / nearest.get("warm_start_s", nearest["start_s"])  # Python's own pace
    rates = {}
    for kind in KINDS:
        measured_rates = nearest["rates"][kind]
        listed = measured_rates if isinstance(measured_rates, list) else [measured_rates]
        rates[kind] = [{**r, "flops_per_s": r["flops_per_s"] * threads * speed[kind],
                        "pass_s": r["pass_s"] / speed[kind]} for r in listed]
    entry = {**nearest, "threads": probe["threads"], "rates": rates, "start_s": probe["start_s"],
             "warm_start_s": probe["warm_start_s"], "load_bytes_per_s": probe["load_bytes_per_s"],
             "setup_s": {k: v * start for k, v in nearest.get("setup_s", {}).items()},
             "example_s": nearest.get("example_s", 0.0) * start}
    factors = ", ".join(f"x{speed[k]:.2f} {k}" for k in KINDS)
    busy = "" if undisturbed(probe) else \
        f"; probed while other work held {probe['others']:.0%} of the CPUs: not kept, the next plan probes again"
    how = (f"{nearest.get('machine')}'s scaled by {probe.get('where', 'the CPU probe')} ({factors}; start-up "
           f"{probe['start_s']:.1f} s, setups x{start:.2f}{busy})")
    return Scaled(entry, how)
