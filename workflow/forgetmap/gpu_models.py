"""The memory of a GPU named by its model, as a SLURM profile names it (`gpu_model`: sbatch --gpus=<model>:N).

Clusters name cards their own way: `a100`, `a100_80gb`, `nvidia_a100-sxm4-80gb` (gres.conf's NVML names),
`rtx_a6000`, `h100_nvl`, a MIG slice `a100_3g.40gb`. A name gives a range of memory, not always one figure:
`a100` is sold with 40 and 80 GB, `v100` with 16 and 32. `memory` reads what a name says and no more:
- the card from the table below, each size it is sold in (nvidia-smi's memory.total, in MiB);
- a size written in the name (`80gb`, `40g`) picks the card's size nearest to it, or, where the card is
  unknown or sold in no such size (a MIG slice), stands alone: between that many GB and GiB.
A name the table does not know and that carries no size gives None: the memory is not known before the job.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MIB = 2**20
# nvidia-smi's memory.total (MiB) of each size a card is sold in; the key is the card's name without its
# vendor's words (nvidia, tesla, geforce, quadro, rtx)
CARDS = {
    "h100": (81559,), "h100nvl": (95830,), "h200": (143771,), "b200": (183359,),
    "a100": (40960, 81920), "a30": (24576,), "a10": (23028,), "a10g": (23028,),
    "a40": (46068,), "l40": (46068,), "l40s": (46068,), "l4": (23034,),
    "a6000": (49140,), "6000ada": (49140,), "6000": (24576, 49140), "a5000": (24564,), "a4000": (16376,),
    "v100": (16384, 32768), "t4": (15360,), "p100": (12288, 16384),
    "3090": (24576,), "4090": (24564,),
}
VENDOR_WORDS = {"nvidia", "tesla", "geforce", "quadro", "rtx"}


@dataclass(frozen=True)
class GpuMemory:
    """One GPU's memory in bytes, between `low` and `high` (equal where it is known exactly), and where
    it was read (named in messages)."""

    low: float
    high: float
    where: str

    @property
    def exact(self) -> float | None:
        return self.low if self.low == self.high else None

    def describe(self) -> str:
        gib = 2**30
        size = f"{self.low / gib:g}" if self.exact else f"{self.low / gib:.1f} to {self.high / gib:.1f}"
        return f"{self.where} ({size} GiB)"


def _written_size(tokens: list[str]) -> float | None:
    """The size a name writes, in GB: `80gb`, `40gib`, `80g` (a bare `3g` is a MIG slice's compute share)."""
    sized = [float(m.group(1)) for t in tokens for m in [re.fullmatch(r"(\d+)gi?b", t)] if m]
    loose = [float(m.group(1)) for t in tokens for m in [re.fullmatch(r"(\d+)g", t)] if m and float(m.group(1)) >= 8]
    return (sized or loose or [None])[-1]


def _tokens(name: str) -> list[str]:
    return [t for t in re.split(r"[\s_.\-:]+", str(name).lower()) if t and t not in VENDOR_WORDS]


def _card_key(tokens: list[str]) -> str | None:
    for i in range(len(tokens)):  # a card's name may span two words (h100 nvl, 6000 ada): the longest first
        for candidate in (tokens[i] + "".join(tokens[i + 1:i + 2]), tokens[i]):
            if candidate in CARDS:
                return candidate
    return None


def card(name: str) -> str | None:
    """The card a name names, as the table keys it (`nvidia_h200` and `h200_141gb`: `h200`), None where unknown."""
    return _card_key(_tokens(name))


def memory(name: str, where: str) -> GpuMemory | None:
    """The memory of the card `name` names, or None where the name does not say (`where`: the setting named)."""
    tokens = _tokens(name)
    key = _card_key(tokens)
    sizes = CARDS[key] if key else None
    written = _written_size(tokens)
    if written is not None:
        near = [mib for mib in sizes or () if abs(mib * MIB / 2**30 - written) <= 0.1 * written]
        if near:
            return GpuMemory(near[0] * MIB, near[0] * MIB, where)
        return GpuMemory(written * 1e9, written * 2**30, where)
    if sizes is None:
        return None
    return GpuMemory(min(sizes) * MIB, max(sizes) * MIB, where)
