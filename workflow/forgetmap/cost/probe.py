"""A CPU the rates file may not describe: a few seconds of probing, on the machine whose jobs it sizes.

`forgetmap calibrate` measures a CPU's figures in half a minute; a machine nobody calibrated used to borrow the
first CPU listed, as measured (a 2-core Xeon's jobs ran at 0.36x their estimates that way). The probe runs the
calibration's own work in miniature (forgetmap.cost.harness), as a local run runs its jobs (`jobs` processes at once,
`threads` each): a process started cold that imports what a model job imports and loads a model (`start_s`, as the
calibration measures it), a client started beside a warm server (`warm_start_s`), a checkpoint written and read back
(the load rate), and the training loop, the scorer and the decode loop on the demo's random model, each the larger of
the calibration's two runs of it. A measured CPU's FLOP rate and seconds per pass were split from those very runs, so
its figures predict what the probe takes there exactly, and elsewhere what it should have taken: forgetmap.cost.figures
scales the nearest measured CPU's figures by it, or keeps a CPU model's own where they predict it within 1.5x.

The probe is kept per machine and boot (forgetmap.kept: CPU model, boot id, threads, processes, and the installation),
so a machine probes once, not at every dry run; except where other work held more than BUSY of the CPUs while it ran
(Linux's CPU time, less the probe's own): its start-ups read the machine slow, so they serve that plan alone, its time
table says so, and the next plan probes again. Its kinds of work are timed in the probing processes' own CPU time, which
other work barely moves (a probe kept while it held a third of the CPUs had read the wall clock 1.6x slow). A probe that cannot run (no fork, no
prctl, an import that fails) is kept as its reason, for the boot: said once, not at every plan.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..kept import kept
from .work import KINDS, multiplying_parameters


def worker(threads: int, spawned: float) -> dict:
    """Every figure of the probe, measured in this process (started at wall time `spawned`, one of the processes
    probing at once): the larger of each of `forgetmap calibrate`'s pairs of runs (forgetmap.cost.harness.runs), which
    a calibrated CPU's figures predict exactly (its FLOP rate and seconds per pass were split from that pair)."""
    from forgetmap import nll, train  # noqa: F401  (with the CLI, which the process imported first: what a model
    import torch  # job imports, and a Llama's modelling: its start-up, as the calibration's `start_seconds` has it)
    from transformers import LlamaForCausalLM  # noqa: F401

    from ..anatomy import shape
    from .harness import DEMO, load_rate, random_model, runs, timed
    from ..models import load_model, save_model, set_threads

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
        # the median of three (a probe moved by 10-25 % with one), in this process's CPU time: the machine's pace, not
        # the share other work left it (beside a spinner on each CPU: train x1.08 by it, x1.62 by the wall clock)
        seconds[kind] = timed(large.run, repeats=3, clock=time.process_time)
        work[kind] = {"flops": large.flops, "passes": large.passes}
    return {"seconds": seconds, "work": work, "start_s": imported + load_s, "warm_start_s": client + load_s,
            "load_bytes_per_s": load_bytes_per_s, "parameters": multiplying_parameters(shape(model.config))}


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


def measured_here(machine: str, threads: int, jobs: int) -> dict:
    """The probe's figures on this machine now, not kept: a cluster partition's probe job's (its file keeps them)."""
    return _measured.made(machine, boot(), threads, jobs)


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
    from .harness import together

    code = (f"import json; import forgetmap.cli; from forgetmap.cost.probe import worker; "
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
    return {"seconds": {k: med([r["seconds"][k] for r in results]) for k in KINDS},
            **{k: med([r[k] for r in results]) for k in ("start_s", "warm_start_s", "load_bytes_per_s")},
            "work": first["work"], "parameters": first["parameters"],
            "machine": machine, "threads": threads, "processes": jobs, "others": round(others, 3)}
