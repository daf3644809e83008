"""Claim GPUs for one job on a workstation (or inside one allocation of a cluster).

Snakemake's `--resources gpu=N` bounds how many GPUs the running jobs ask for together, but a local run
never sets CUDA_VISIBLE_DEVICES (snakemake issue #281), so four jobs on a four-GPU machine would all
land on device 0. Each GPU job therefore claims free devices itself: one lock file per device, taken
with `flock` (released by the kernel when the job exits, even if it crashes), and exports
CUDA_VISIBLE_DEVICES before anything touches CUDA.

The devices claimed from are those the job may see: CUDA_VISIBLE_DEVICES where it is already set (an
`srun --gpus=4` shell running Snakemake locally: four devices shared by its jobs), else every device of
the machine. Where the job sees exactly as many devices as it needs (SLURM's `--gpus` for a cluster job),
they are its own and nothing is locked. Locks are per user and, inside a SLURM allocation, per
allocation (device numbers restart in each). A job that needs no GPU sees none (`hide_gpus`), so its
`device: auto` is the CPU.

Environment:
- FORGETMAP_GPU_COUNT: the number of devices to share (default: `nvidia-smi -L`, else 0). Tests set
  it to claim fake devices on a CPU machine.
- FORGETMAP_GPU_LOCK_DIR: where the lock files live (default: a per-user directory under /tmp).
"""

from __future__ import annotations

import fcntl
import math
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from .errors import ForgetmapError


def device_count() -> int:
    """Devices this process may use: FORGETMAP_GPU_COUNT, else those CUDA_VISIBLE_DEVICES names where it is
    set (an allocation, or a user's choice), else the GPUs `nvidia-smi -L` lists (no CUDA init)."""
    if os.environ.get("FORGETMAP_GPU_COUNT"):
        return int(os.environ["FORGETMAP_GPU_COUNT"])
    visible = visible_devices()
    if visible is not None:
        return len(visible)
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=True).stdout
    except (subprocess.SubprocessError, OSError):
        return 0
    return sum(1 for line in listing.splitlines() if line.startswith("GPU "))


def lock_dir() -> Path:
    allocation = f"-slurm{os.environ['SLURM_JOB_ID']}" if os.environ.get("SLURM_JOB_ID") else ""
    default = Path(tempfile.gettempdir()) / f"forgetmap-gpu-locks-{os.getuid()}{allocation}"
    path = Path(os.environ.get("FORGETMAP_GPU_LOCK_DIR", default))
    path.mkdir(parents=True, exist_ok=True)
    return path


class GpuClaim:
    """The devices one job holds; `release()` (or process exit) frees them."""

    def __init__(self, devices: list[str], handles: list):
        self.devices = devices
        self._handles = handles

    def release(self) -> None:
        for handle in self._handles:
            fcntl.flock(handle, fcntl.LOCK_UN)
            handle.close()
        self._handles = []

    def __enter__(self) -> "GpuClaim":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _try_claim(count: int, devices: list[str], directory: Path) -> GpuClaim | None:
    claimed, handles = [], []
    for device in devices:
        handle = open(directory / f"gpu{device}.lock", "a")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        claimed.append(device)
        handles.append(handle)
        if len(claimed) == count:
            return GpuClaim(claimed, handles)
    GpuClaim(claimed, handles).release()  # not enough free devices: take none, try again later
    return None


def visible_devices() -> list[str] | None:
    """The devices CUDA_VISIBLE_DEVICES lets this process see (None where it is unset)."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None or not value.strip():
        return None if value is None else []
    return [d.strip() for d in value.split(",") if d.strip()]


def hide_gpus() -> None:
    """A job without a `gpu` resource sees no GPU: its `device: auto` is the CPU, never an unclaimed GPU."""
    os.environ["CUDA_VISIBLE_DEVICES"] = ""


def claim_gpus(count: int, timeout_s: float = 3600.0, poll_s: float = 1.0) -> GpuClaim:
    """Claim `count` free devices among those this job may see and export CUDA_VISIBLE_DEVICES; waits
    while they are all taken."""
    if count <= 0:
        hide_gpus()
        return GpuClaim([], [])
    visible = visible_devices()
    if visible is not None and len(visible) < count:
        raise ForgetmapError(f"the job needs {count} GPU(s) but CUDA_VISIBLE_DEVICES="
                             f"{os.environ['CUDA_VISIBLE_DEVICES']} names {len(visible)}")
    if visible is not None and len(visible) == count:  # exactly its own (a scheduler's choice): nothing to share
        return GpuClaim([], [])
    candidates = visible if visible is not None else [str(d) for d in range(device_count())]
    if len(candidates) < count:
        raise ForgetmapError(f"the job needs {count} GPU(s) but this machine has {len(candidates)} "
                             "(set the rule's `gpu` resource to 0 to run on the CPU)")
    directory = lock_dir()
    deadline = time.monotonic() + timeout_s
    while True:
        claim = _try_claim(count, candidates, directory)
        if claim is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(claim.devices)
            return claim
        if time.monotonic() > deadline:
            raise ForgetmapError(f"no {count} free GPU(s) among {len(candidates)} after {timeout_s:.0f} s "
                                 f"(lock files in {directory}); run with --resources gpu={len(candidates)}")
        time.sleep(poll_s)


def cpu_name() -> str:
    """This machine's CPU model (/proc/cpuinfo): what a CPU's figures are measured and kept under, and what a
    job's log names as its device."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity mask (taskset, a SLURM allocation's cpuset) and its cgroup's CPU
    quota (a container's --cpus), the smaller; os.cpu_count() counts the machine's, which a container of 2 CPUs on a
    64-core host would probe with 64 processes. (The share of the CPUs other work held is the machine's, as
    /proc/stat counts it: over all of them.)"""
    try:
        count = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        count = os.cpu_count() or 1
    quota = cgroup_quota()
    return max(1, min(count, math.ceil(quota)) if quota else count)


def cgroup_quota(root: Path = Path("/sys/fs/cgroup"), own: Path = Path("/proc/self/cgroup")) -> float | None:
    """The CPUs this process's cgroup and its parents may use at most (cgroup v2's cpu.max, v1's cfs quota over its
    period), the least of them; None where none is set or none can be read."""
    found = []
    try:
        lines = own.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":  # v2: one hierarchy, cpu.max in its folder and each parent's
            folder = root / path.lstrip("/")
            for place in [folder, *folder.parents]:
                if root not in [place, *place.parents]:
                    break
                try:
                    quota, period = (place / "cpu.max").read_text().split()[:2]
                except (OSError, ValueError):
                    continue
                if quota != "max":
                    found.append(int(quota) / int(period))
        elif "cpu" in controllers.split(","):  # v1
            for folder in (root / "cpu" / path.lstrip("/"), root / "cpu"):
                try:
                    quota = int((folder / "cpu.cfs_quota_us").read_text())
                    period = int((folder / "cpu.cfs_period_us").read_text())
                except (OSError, ValueError):
                    continue
                if quota > 0 and period > 0:
                    found.append(quota / period)
                break
    return min(found) if found else None
