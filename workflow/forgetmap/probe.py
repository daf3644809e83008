"""A CPU the rates file has not measured: a few seconds of probing at planning, and the nearest measured CPU's
figures scaled by what they show.

`forgetmap calibrate` measures a CPU's figures in half a minute; a machine nobody calibrated used to borrow the
first CPU listed, as measured (a 2-core Xeon's jobs ran at 0.36x their estimates that way). The probe runs the
calibration's own work in miniature, as a local run runs its jobs (`jobs` processes at once, `threads` each): a
process started cold that imports what a model job imports and loads a model (`start_s`, as the calibration
measures it), a client started beside a warm server (`warm_start_s`), a checkpoint written and read back (the load
rate), and the training loop, the scorer and the decode loop on the demo's random model, each the larger of the
calibration's two runs of it. A measured CPU's FLOP rate and seconds per pass were split from those very runs, so
its figures predict what the probe takes there exactly, and elsewhere what it should have taken: the nearest CPU
is the one whose predictions miss least (in log ratio, over the three),
and each kind's FLOP rate and seconds per pass are its, scaled by predicted / measured. What the probe measures
directly (start-up, warm start, load rate) is taken as measured; a job's setup and tokenizing, Python's work as a
warm client's start is, are scaled by the warm start-ups' ratio.

A CPU model's own figures are checked the same way: a machine of the same name that runs the probe more than 1.5x
off them (cloud machines share names like "AMD EPYC": one ran the calibration's work 2.5x slower than another)
takes the nearest figures scaled, as an unmeasured one does. The probe is kept per machine and boot
(forgetmap.kept: CPU model, boot id, threads, processes, and the installation), so a machine probes once, not at
every dry run; except where other work held more than BUSY of the CPUs while it ran (Linux's CPU time, less the
probe's own): its figures read the machine slow (9x beside a running test suite), so they serve that plan alone,
its time table says so, and the next plan probes again.
"""

from __future__ import annotations

import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from . import cost
from .kept import kept

COMPUTE = ("train", "score", "generate")


def worker(threads: int, spawned: float) -> dict:
    """Every figure of the probe, measured in this process (started at wall time `spawned`, one of the processes
    probing at once): the larger of each of `forgetmap calibrate`'s pairs of runs (forgetmap.calibrate.runs), which
    a calibrated CPU's figures predict exactly (its FLOP rate and seconds per pass were split from that pair)."""
    from forgetmap import nll, train  # noqa: F401  (with the CLI, which the process imported first: what a model
    import torch  # job imports, and a Llama's modelling: its start-up, as the calibration's `start_seconds` has it)
    from transformers import LlamaForCausalLM  # noqa: F401

    from .anatomy import shape
    from .calibrate import DEMO, load_rate, random_model, runs, timed
    from .models import load_model, save_model, set_threads

    imported = time.time() - spawned
    set_threads(threads)
    model = random_model(DEMO)
    with tempfile.TemporaryDirectory() as tmp:
        save_model(model, tmp)
        load_s = timed(lambda: load_model(tmp, torch.device("cpu"), torch.float32), repeats=1)
        client = timed(lambda: subprocess.run([sys.executable, "-c", "import forgetmap.cli"], check=True,
                                               capture_output=True), repeats=1)
        load_bytes_per_s = load_rate(Path(tmp))
    seconds, work = {}, {}
    for kind, (_, large) in runs(model).items():
        seconds[kind] = timed(large.run, repeats=3)  # the median of three: a probe moved by 10-25 % with one
        work[kind] = {"flops": large.flops, "passes": large.passes}
    return {"seconds": seconds, "work": work, "start_s": imported + load_s, "warm_start_s": client + load_s,
            "load_bytes_per_s": load_bytes_per_s, "parameters": cost.multiplying_parameters(shape(model.config))}


def boot() -> str:
    """This boot of this machine (Linux's boot id; else the host's name): a machine is probed once per boot, as a
    cloud's machines of one CPU model name differ (an "AMD EPYC" ran the calibration's work 2.5x slower on one
    day than on another)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        import platform

        return platform.node()


# the share of the CPUs other work may hold while the probe runs for its figures to be kept for the boot: a probe
# beside a running test suite (other work on both of 2 cores) read the CPU 9x slower than it is; one other
# single-threaded process on 2 cores holds half, which stays below (a test process beside the suite's other one)
BUSY = 0.75


_UNKEPT: dict = {}  # probes not kept (the CPUs were busy), each made once in this process: a plan's jobs all ask


def undisturbed(probe: dict) -> bool:
    """Whether other work held at most BUSY of the CPUs while `probe` ran: its figures are kept for the boot."""
    return probe.get("others", 0.0) <= BUSY


def measured(machine: str, threads: int, jobs: int) -> dict:
    """The probe's figures on this machine (`machine`: its CPU model), kept for this boot: `jobs` processes of
    `threads` threads probing at once, each figure their median, and `others` the share of the CPUs other work held
    meanwhile. A probe while other work held more than BUSY of them is this process's alone, not kept: the next
    plan probes again."""
    key = (machine, threads, jobs)
    if key not in _UNKEPT:
        value = _measured(machine, boot(), threads, jobs)
        if undisturbed(value):
            return value
        _UNKEPT[key] = value
    return _UNKEPT[key]


def busy_seconds() -> float | None:
    """The CPU seconds every process of the machine has run since its boot (Linux's /proc/stat: all but idle and
    I/O wait), None where it cannot be read."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return None
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def children_seconds() -> float:
    """The CPU seconds this process's finished children have run."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


@kept(keep=undisturbed)
def _measured(machine: str, boot: str, threads: int, jobs: int) -> dict:
    """The probe's figures, or {"failed": why} where it could not run (no fork, no prctl, an import that fails):
    kept for the boot as the figures are, so a machine that cannot probe says so once, not at every plan."""
    from .calibrate import together

    code = (f"import json; import forgetmap.cli; from forgetmap.probe import worker; "
            f"print(json.dumps(worker({threads}, {time.time()!r})))")
    started, machine_before, ours_before = time.monotonic(), busy_seconds(), children_seconds()
    try:
        results = together(code, threads, jobs, "the CPU probe")
    except Exception as exc:  # whatever stops it, the plan goes on with borrowed figures, saying why
        text = str(exc).strip()
        return {"failed": text.splitlines()[-1] if text else repr(exc), "machine": machine, "threads": threads,
                "processes": jobs}
    wall, machine_after = time.monotonic() - started, busy_seconds()
    others = 0.0 if machine_before is None or machine_after is None else \
        max(0.0, machine_after - machine_before - (children_seconds() - ours_before)) / (wall * (os.cpu_count() or 1))
    first = results[0]
    med = statistics.median
    return {"seconds": {k: med([r["seconds"][k] for r in results]) for k in COMPUTE},
            **{k: med([r[k] for r in results]) for k in ("start_s", "warm_start_s", "load_bytes_per_s")},
            "work": first["work"], "parameters": first["parameters"],
            "machine": machine, "threads": threads, "processes": jobs, "others": round(others, 3)}


@dataclass(frozen=True)
class Scaled:
    """A measured CPU's figures as the probe scales them for this one: the entry's figures to use, and how."""

    entry: dict
    how: str  # which CPU's figures, scaled by what


def predicted(entry: dict, probe: dict) -> dict[str, float]:
    """What the probe's work would have taken on `entry`'s CPU, from its figures (at the probe's threads)."""
    fig = cost.entry_figures(entry, probe["threads"] / entry.get("threads", 1), None, probe["parameters"])
    return {k: w["flops"] / fig.rates[k].flops_per_s + w["passes"] * fig.rates[k].pass_s
            for k, w in probe["work"].items()}


def miss(entry: dict, probe: dict) -> float:
    """How far `entry`'s figures predict the probe: the summed |log(predicted / measured)| of its kinds of work."""
    guess = predicted(entry, probe)
    return sum(abs(math.log(guess[k] / probe["seconds"][k])) for k in COMPUTE)


# how far a CPU's own figures may miss its probe, in each kind of work, before they are taken for another
# machine's of the same name (calibrations of one machine differ by about 10 %, a probe's runs by as much)
OWN = 1.5


def fits(entry: dict, probe: dict) -> bool:
    """Whether `entry`'s figures predict the probe within OWN in each kind of work: this machine's own."""
    guess = predicted(entry, probe)
    return all(1 / OWN <= guess[k] / probe["seconds"][k] <= OWN for k in COMPUTE)


def scale(cpus: list[dict], probe: dict) -> Scaled:
    """The nearest measured CPU's figures scaled to the probe's: each kind's rates by its predicted / measured
    seconds, the start-ups and load rate as the probe measured them, the setups and tokenizing by the warm
    start-ups' ratio. The entry's threads become the probe's (its FLOP rates, scaled by the ratio of threads as
    forgetmap.cost does, are what the probe was predicted with)."""
    nearest = min(cpus, key=lambda entry: miss(entry, probe))
    guess = predicted(nearest, probe)
    speed = {k: guess[k] / probe["seconds"][k] for k in COMPUTE}
    threads = probe["threads"] / nearest.get("threads", 1)
    start = probe["warm_start_s"] / nearest.get("warm_start_s", nearest["start_s"])  # Python's own pace
    rates = {}
    for kind in cost.KINDS:
        measured_rates = nearest["rates"][kind]
        listed = measured_rates if isinstance(measured_rates, list) else [measured_rates]
        rates[kind] = [{**r, "flops_per_s": r["flops_per_s"] * threads * speed[kind],
                        "pass_s": r["pass_s"] / speed[kind]} for r in listed]
    entry = {**nearest, "threads": probe["threads"], "rates": rates, "start_s": probe["start_s"],
             "warm_start_s": probe["warm_start_s"], "load_bytes_per_s": probe["load_bytes_per_s"],
             "setup_s": {k: v * start for k, v in nearest.get("setup_s", {}).items()},
             "example_s": nearest.get("example_s", 0.0) * start}
    factors = ", ".join(f"x{speed[k]:.2f} {k}" for k in COMPUTE)
    busy = "" if undisturbed(probe) else \
        f"; probed while other work held {probe['others']:.0%} of the CPUs: not kept, the next plan probes again"
    how = (f"{nearest.get('machine')}'s scaled by the CPU probe ({factors}; start-up {probe['start_s']:.1f} s, "
           f"setups x{start:.2f}{busy})")
    return Scaled(entry, how)


def scaled_figures(device: cost.Device, rates: dict, parameters: float, probe: dict) -> cost.Figures | None:
    """A CPU job's figures where this machine's `probe` says the rates file does not describe it: its CPU model has
    no figures, or they miss the probe (`fits`: another machine of the same name); the nearest measured CPU's
    scaled, with how (`scale`). None where the CPU's own figures fit (or there are none to scale)."""
    cpus = [d for d in rates.get("devices", {}).values() if d.get("kind") == "cpu"]
    own = [d for d in cpus if d.get("machine") == device.name]
    if device.kind != "cpu" or not cpus or (own and fits(own[0], probe)):
        return None
    scaled = scale(cpus, probe)
    why = "" if not own else "its CPU model's own figures miss this machine's probe by over 1.5x: "
    return cost.entry_figures(scaled.entry, device.count / probe["threads"], why + scaled.how, parameters)

