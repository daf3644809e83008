"""A GPU named by its model, as clusters name them: the memory the name says, and no more."""

import pytest

from forgetmap.cost.cards import memory

GIB = 2**30


@pytest.mark.parametrize("name, low, high", [
    ("h100", 79.6, 79.6),                      # nvidia-smi's 81,559 MiB
    ("nvidia_h100_80gb_hbm3", 79.6, 79.6),     # gres.conf's NVML name
    ("h100_nvl", 93.6, 93.6),                  # a card's name in two words: the longer first
    ("rtx_a6000", 48.0, 48.0),
    ("NVIDIA_RTX_6000_Ada_Generation", 48.0, 48.0),
    ("a100", 40.0, 80.0),                      # sold in two sizes: the range
    ("a100_80gb", 80.0, 80.0), ("A100-SXM4-40GB", 40.0, 40.0), ("a100_80g", 80.0, 80.0),
    ("a100_3g.40gb", 40.0, 40.0),              # a MIG slice of an 80 GB card: its own 40 GB
    ("a100_1g.10gb", 9.3, 10.0),               # a slice no card is sold as: between 10 GB and 10 GiB
    ("v100", 16.0, 32.0), ("tesla_v100-sxm2-32gb", 32.0, 32.0),
    ("mystery_48gb", 44.7, 48.0),              # an unknown card with its size written
])
def test_a_gpu_model_names_the_memory_it_says(name, low, high):
    found = memory(name, "profile setting x")
    assert (round(found.low / GIB, 1), round(found.high / GIB, 1)) == (low, high)
    assert (found.exact is not None) == (low == high)


def test_a_name_that_says_nothing_of_memory_gives_none():
    assert memory("gpu", "x") is None and memory("mi250x", "x") is None
