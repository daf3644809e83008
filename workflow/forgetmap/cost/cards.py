"""The GPUs researchers use, in one table: each card's memory in every size it is sold in, its dense bf16 peak and
its memory bandwidth, as its maker publishes them, with the source; and what a cluster's name for a card says.

Memory (nvidia-smi's memory.total, MiB) sizes a job's GPU where a SLURM profile names its model (`gpu_model`:
sbatch --gpus=<model>:N). Clusters name cards their own way: `a100`, `a100_80gb`, `nvidia_a100-sxm4-80gb`
(gres.conf's NVML names), `rtx_a6000`, `h100_nvl`, a MIG slice `a100_3g.40gb`. A name gives a range of memory, not
always one figure: `a100` is sold with 40 and 80 GB, `v100` with 16 and 32. `memory` reads what a name says and no
more: the card's sizes from the table, or a size written in the name (`80gb`, `40g`), which picks the card's size
nearest to it, or, where the card is unknown or sold in no such size (a MIG slice), stands alone: between that many
GB and GiB. A name the table does not know and that carries no size gives None.

The peak and bandwidth let a card the rates file has not measured borrow the nearest measured card's figures
(forgetmap.cost.figures), its compute-bound work (training, scoring) scaled by the peaks' ratio, decoding (one
token per step, every weight read each step) by the bandwidths'. Peaks are dense (without 2:4 sparsity) bf16
tensor-core TFLOP/s, fp16 with fp32 accumulation where a card has no bf16 (V100, T4, P100 at its fp16 rate);
bandwidth in GB/s. Where a name covers several products (`h100`: SXM and PCIe, `a100`: 40 and 80 GB), the figures
are those said in the source.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

MIB = 2**20


@dataclass(frozen=True)
class Card:
    sizes: tuple  # nvidia-smi's memory.total (MiB) of each size the card is sold in
    bf16_tflops: float | None  # None where no data sheet is in the table (the card's memory is still known)
    bandwidth_gbs: float | None
    source: str | None


# the key is the card's name without its vendor's words (nvidia, tesla, geforce, quadro, rtx)
CARDS = {
    "h200": Card((143771,), 989, 4800, "NVIDIA H200 Tensor Core GPU datasheet (SXM)"),
    "h100": Card((81559,), 989, 3350, "NVIDIA H100 Tensor Core GPU datasheet, SXM5 (PCIe: 756 TFLOP/s, 2,000 GB/s)"),
    "h100nvl": Card((95830,), 835, 3900, "NVIDIA H100 NVL datasheet, per GPU"),
    "b200": Card((183359,), 2250, 8000, "NVIDIA DGX B200 / HGX B200 datasheet, per GPU"),
    "a100": Card((40960, 81920), 312, 1555, "NVIDIA A100 Tensor Core GPU datasheet, 40 GB (80 GB SXM: 2,039 GB/s)"),
    "a30": Card((24576,), 165, 933, "NVIDIA A30 Tensor Core GPU datasheet"),
    "a10": Card((23028,), 125, 600, "NVIDIA A10 Tensor Core GPU datasheet"),
    "a10g": Card((23028,), 70, 600, "AWS EC2 G5 instances (A10G): NVIDIA's A10G product brief"),
    "a40": Card((46068,), 150, 696, "NVIDIA A40 datasheet"),
    "l40": Card((46068,), 181, 864, "NVIDIA L40 datasheet"),
    "l40s": Card((46068,), 362, 864, "NVIDIA L40S datasheet"),
    "l4": Card((23034,), 121, 300, "NVIDIA L4 Tensor Core GPU datasheet"),
    "a6000": Card((49140,), 155, 768, "NVIDIA RTX A6000 datasheet"),
    "6000ada": Card((49140,), 364, 960, "NVIDIA RTX 6000 Ada Generation datasheet"),
    "6000": Card((24576, 49140), None, None, None),  # Quadro RTX 6000 or RTX 6000 Ada: the memory only
    "a5000": Card((24564,), 111, 768, "NVIDIA RTX A5000 datasheet"),
    "a4000": Card((16376,), 77, 448, "NVIDIA RTX A4000 datasheet"),
    "v100": Card((16384, 32768), 125, 900, "NVIDIA V100 Tensor Core GPU datasheet, SXM2 (fp16 tensor: no bf16)"),
    "t4": Card((15360,), 65, 320, "NVIDIA T4 Tensor Core GPU datasheet (fp16 tensor: no bf16)"),
    "p100": Card((12288, 16384), 19, 732, "NVIDIA Tesla P100 datasheet, SXM2 (fp16: no tensor cores)"),
    "3090": Card((24576,), 71, 936,
                 "NVIDIA Ampere GA102 architecture whitepaper, RTX 3090 (fp16 tensor, fp32 accumulate)"),
    "4090": Card((24564,), 165, 1008,
                 "NVIDIA Ada Lovelace architecture whitepaper, RTX 4090 (fp16 tensor, fp32 accumulate)"),
}
VENDOR_WORDS = {"nvidia", "tesla", "geforce", "quadro", "rtx"}


def specified(name: str | None) -> Card | None:
    """The card's entry where the table has its peak and bandwidth, else None."""
    card = CARDS.get(name) if name else None
    return card if card is not None and card.bf16_tflops else None


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
    sizes = CARDS[key].sizes if key else None
    written = _written_size(tokens)
    if written is not None:
        near = [mib for mib in sizes or () if abs(mib * MIB / 2**30 - written) <= 0.1 * written]
        if near:
            return GpuMemory(near[0] * MIB, near[0] * MIB, where)
        return GpuMemory(written * 1e9, written * 2**30, where)
    if sizes is None:
        return None
    return GpuMemory(min(sizes) * MIB, max(sizes) * MIB, where)


def nearest(name: str | None, measured: list[str]) -> str:
    """Of the `measured` cards, the one nearest `name` by bf16 peak (the first listed where either has no peak in
    the table)."""
    mine = specified(name)
    peers = [m for m in measured if specified(m)]
    if mine is None or not peers:
        return measured[0]
    return min(peers, key=lambda m: abs(math.log(CARDS[m].bf16_tflops / mine.bf16_tflops)))


def slowest(memory_bytes: float) -> str:
    """The card of least bf16 peak among those with at least `memory_bytes`: what a GPU no profile names is
    estimated as, so that a time limit from the estimate holds on whichever card the job gets."""
    peaked = [name for name in CARDS if specified(name)]
    fits = [name for name in peaked if max(CARDS[name].sizes) * MIB >= memory_bytes * 0.99]
    return min(fits or peaked, key=lambda name: CARDS[name].bf16_tflops)
