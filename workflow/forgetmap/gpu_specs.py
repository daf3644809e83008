"""What a GPU can do, as its maker publishes it: the dense bf16 tensor peak and the memory bandwidth of the cards
researchers use, each with its source. A card the rates file has not measured borrows the nearest measured
card's figures (forgetmap.cost), scaled by these: the compute-bound kinds of work (training, scoring) by the
peaks' ratio, decoding (one token per step, every weight read each step) by the bandwidths'.

Peaks are dense (without 2:4 sparsity) bf16 tensor-core TFLOP/s, fp16 with fp32 accumulation where a card has no
bf16 (V100, T4, P100 at its fp16 rate); bandwidth in GB/s. Where a name covers several products (`h100`: SXM and
PCIe, `a100`: 40 and 80 GB), the figures are the one forgetmap.gpu_models sizes the name by, said in its source.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Spec:
    bf16_tflops: float
    bandwidth_gbs: float
    source: str


SPECS = {
    "h200": Spec(989, 4800, "NVIDIA H200 Tensor Core GPU datasheet (SXM)"),
    "h100": Spec(989, 3350, "NVIDIA H100 Tensor Core GPU datasheet, SXM5 (PCIe: 756 TFLOP/s, 2,000 GB/s)"),
    "h100nvl": Spec(835, 3900, "NVIDIA H100 NVL datasheet, per GPU"),
    "b200": Spec(2250, 8000, "NVIDIA DGX B200 / HGX B200 datasheet, per GPU"),
    "a100": Spec(312, 1555, "NVIDIA A100 Tensor Core GPU datasheet, 40 GB (80 GB SXM: 2,039 GB/s)"),
    "a30": Spec(165, 933, "NVIDIA A30 Tensor Core GPU datasheet"),
    "a10": Spec(125, 600, "NVIDIA A10 Tensor Core GPU datasheet"),
    "a10g": Spec(70, 600, "AWS EC2 G5 instances (A10G): NVIDIA's A10G product brief"),
    "a40": Spec(150, 696, "NVIDIA A40 datasheet"),
    "l40": Spec(181, 864, "NVIDIA L40 datasheet"),
    "l40s": Spec(362, 864, "NVIDIA L40S datasheet"),
    "l4": Spec(121, 300, "NVIDIA L4 Tensor Core GPU datasheet"),
    "a6000": Spec(155, 768, "NVIDIA RTX A6000 datasheet"),
    "6000ada": Spec(364, 960, "NVIDIA RTX 6000 Ada Generation datasheet"),
    "a5000": Spec(111, 768, "NVIDIA RTX A5000 datasheet"),
    "a4000": Spec(77, 448, "NVIDIA RTX A4000 datasheet"),
    "v100": Spec(125, 900, "NVIDIA V100 Tensor Core GPU datasheet, SXM2 (fp16 tensor: no bf16)"),
    "t4": Spec(65, 320, "NVIDIA T4 Tensor Core GPU datasheet (fp16 tensor: no bf16)"),
    "p100": Spec(19, 732, "NVIDIA Tesla P100 datasheet, SXM2 (fp16: no tensor cores)"),
    "3090": Spec(71, 936, "NVIDIA Ampere GA102 architecture whitepaper, RTX 3090 (fp16 tensor, fp32 accumulate)"),
    "4090": Spec(165, 1008, "NVIDIA Ada Lovelace architecture whitepaper, RTX 4090 (fp16 tensor, fp32 accumulate)"),
}


def nearest(card: str | None, measured: list[str]) -> str:
    """Of the `measured` cards, the one nearest `card` by bf16 peak (the first listed where either is not in the
    table)."""
    import math

    if card not in SPECS or not any(m in SPECS for m in measured):
        return measured[0]
    return min((m for m in measured if m in SPECS),
               key=lambda m: abs(math.log(SPECS[m].bf16_tflops / SPECS[card].bf16_tflops)))
