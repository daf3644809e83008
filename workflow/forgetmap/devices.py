"""Claim GPUs for one job on a workstation.

Snakemake's `--resources gpu=N` bounds how many GPUs the running jobs ask for together, but a local run
never sets CUDA_VISIBLE_DEVICES (snakemake issue #281), so four jobs on a four-GPU machine would all
land on device 0. Each GPU job therefore claims free devices itself: one lock file per device, taken
with `flock` (released by the kernel when the job exits, even if it crashes), and exports
CUDA_VISIBLE_DEVICES before anything touches CUDA.

Where a scheduler has already chosen the devices (SLURM sets CUDA_VISIBLE_DEVICES for `--gpus`), or the
user has, that choice stands and nothing is locked.

Environment:
- FORGETMAP_GPU_COUNT: the number of devices to share (default: `nvidia-smi -L`, else 0). Tests set
  it to claim fake devices on a CPU machine.
- FORGETMAP_GPU_LOCK_DIR: where the lock files live (default: a per-user directory under /tmp).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from .errors import ForgetmapError


def device_count() -> int:
    """Devices on this machine: FORGETMAP_GPU_COUNT, else the GPUs `nvidia-smi -L` lists (no CUDA init)."""
    if os.environ.get("FORGETMAP_GPU_COUNT"):
        return int(os.environ["FORGETMAP_GPU_COUNT"])
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=True).stdout
    except (subprocess.SubprocessError, OSError):
        return 0
    return sum(1 for line in listing.splitlines() if line.startswith("GPU "))


def lock_dir() -> Path:
    default = Path(tempfile.gettempdir()) / f"forgetmap-gpu-locks-{os.getuid()}"
    path = Path(os.environ.get("FORGETMAP_GPU_LOCK_DIR", default))
    path.mkdir(parents=True, exist_ok=True)
    return path


class GpuClaim:
    """The devices one job holds; `release()` (or process exit) frees them."""

    def __init__(self, devices: list[int], handles: list):
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


def _try_claim(count: int, total: int, directory: Path) -> GpuClaim | None:
    devices, handles = [], []
    for device in range(total):
        handle = open(directory / f"gpu{device}.lock", "a")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        devices.append(device)
        handles.append(handle)
        if len(devices) == count:
            return GpuClaim(devices, handles)
    GpuClaim(devices, handles).release()  # not enough free devices: take none, try again later
    return None


def claim_gpus(count: int, timeout_s: float = 3600.0, poll_s: float = 1.0) -> GpuClaim:
    """Claim `count` free devices and export CUDA_VISIBLE_DEVICES; waits while they are all taken."""
    if count <= 0:
        return GpuClaim([], [])
    if os.environ.get("CUDA_VISIBLE_DEVICES"):  # chosen by the scheduler or the user: keep it
        visible = [d for d in os.environ["CUDA_VISIBLE_DEVICES"].split(",") if d.strip()]
        if len(visible) < count:
            raise ForgetmapError(f"the job needs {count} GPU(s) but CUDA_VISIBLE_DEVICES="
                                 f"{os.environ['CUDA_VISIBLE_DEVICES']} names {len(visible)}")
        return GpuClaim([], [])
    total = device_count()
    if total < count:
        raise ForgetmapError(f"the job needs {count} GPU(s) but this machine has {total} "
                             "(set the rule's `gpu` resource to 0 to run on the CPU)")
    directory = lock_dir()
    deadline = time.monotonic() + timeout_s
    while True:
        claim = _try_claim(count, total, directory)
        if claim is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, claim.devices))
            return claim
        if time.monotonic() > deadline:
            raise ForgetmapError(f"no {count} free GPU(s) among {total} after {timeout_s:.0f} s "
                                 f"(lock files in {directory}); run with --resources gpu={total}")
        time.sleep(poll_s)
