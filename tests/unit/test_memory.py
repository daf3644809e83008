"""A model's memory read from its config: parameters as the loaded model has them, the key-value cache's
shape, and the vLLM engine refused where its weights and one sequence cannot fit the GPUs a job claims."""

import json

import pytest

from standins import ARCHITECTURES, save_standin

GIB = 2**30
# OLMo-2-1124-7B's and -13B's config.json, the fields that size them
OLMO2 = {"7b": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
                    num_key_value_heads=32),
         "13b": dict(hidden_size=5120, intermediate_size=13824, num_hidden_layers=40, num_attention_heads=40,
                     num_key_value_heads=40)}


def olmo2_config(tmp_path, size: str):
    directory = tmp_path / f"olmo2-{size}"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps({
        "architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", "vocab_size": 100352,
        "max_position_embeddings": 4096, "tie_word_embeddings": False, "rms_norm_eps": 1e-6, **OLMO2[size]}))
    return directory


@pytest.mark.parametrize("architecture", sorted(ARCHITECTURES))
def test_the_shape_counts_the_parameters_a_loaded_model_has(tmp_path, architecture):
    from transformers import AutoModelForCausalLM

    from forgetmap.memory import shape

    directory = save_standin(tmp_path / architecture, architecture, width=64)
    model = AutoModelForCausalLM.from_pretrained(directory)
    found = shape(directory)
    assert found.parameters == sum(p.numel() for p in model.parameters())
    assert (found.layers, found.kv_heads, found.head_dim) == (2, 2, 32)
    assert found.kv_bytes_per_token(4) == 2 * 2 * 2 * 32 * 4


def test_the_paper_olmo2_models_are_sized_from_their_configs(tmp_path):
    """7.30B and 13.7B parameters (OLMo 2's report: 7B and 13B, untied embeddings); 0.5 MiB and 0.78 MiB of
    bf16 key-value cache per token (32 layers x 32 heads x 128, 40 x 40 x 128)."""
    from forgetmap.memory import shape

    seven, thirteen = shape(olmo2_config(tmp_path, "7b")), shape(olmo2_config(tmp_path, "13b"))
    assert seven.parameters == pytest.approx(7.30e9, rel=2e-3) and thirteen.parameters == pytest.approx(13.72e9, rel=2e-3)
    assert seven.kv_bytes_per_token(2) == 2 * 32 * 32 * 128 * 2 and thirteen.head_dim == 128


def test_an_engine_that_cannot_fit_the_claimed_gpus_is_refused_naming_the_keys_and_the_gpus_that_fit(tmp_path):
    from forgetmap.errors import ForgetmapError
    from forgetmap.memory import check_engine_fits, engine_need, shape

    seven, thirteen = shape(olmo2_config(tmp_path, "7b")), shape(olmo2_config(tmp_path, "13b"))
    weights, cache = engine_need(seven, "bfloat16", 4096, 1)
    assert weights / GIB == pytest.approx(13.6, abs=0.05) and cache / GIB == pytest.approx(2.0)
    check_engine_fits(seven, "bfloat16", 4096, 1, 0.85, 24 * GIB, "olmo2-7b")  # 15.6 of 20.4 GiB
    check_engine_fits(thirteen, "bfloat16", 4096, 2, 0.85, 24 * GIB, "olmo2-13b")  # split over two
    with pytest.raises(ForgetmapError, match=r"olmo2-13b: the model does not fit the GPUs the job claims: its 13.72B "
                                             r"parameters in bfloat16 \(25.5 GiB per GPU\) and one 4096-token sequence's "
                                             r"key-value cache \(3.12 GiB per GPU\) need 28.7 GiB on each of 1 GPU.*"
                                             r"0.85 x 24.0 GiB = 20.4 GiB .*score.gpu_memory_utilization.*claim 2 GPUs or "
                                             r"more .*resources.score.gpu"):
        check_engine_fits(thirteen, "bfloat16", 4096, 1, 0.85, 24 * GIB, "olmo2-13b")
    with pytest.raises(ForgetmapError, match=r"claim 3 GPUs or more"):  # fp32 doubles the weights
        check_engine_fits(seven, "float32", 4096, 1, 0.85, 16 * GIB, "olmo2-7b")
