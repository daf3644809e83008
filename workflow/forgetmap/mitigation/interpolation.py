"""Weight interpolation (WiSE-FT; Wortsman et al., CVPR 2022): θ_α = (1 − α)·θ_base + α·θ_fine-tuned, for
a sweep of α after any fine-tune, every α judged without training again (one learning–forgetting front per
fine-tune).

Full fine-tuning: every parameter is `torch.lerp(θ_base, θ_ft, α)`, exact at both ends (α = 0 gives the
base's weights bit for bit, α = 1 the fine-tune's). LoRA: the adapter scaled by α (its B matrices times α),
which is the same interpolation of the merged weights, θ_base + α·BA·s, with no second copy of the model.
Each α is written as a checkpoint of its own (a temporary directory the judging scores and deletes), so the
torch and vLLM scorers read it as they read any checkpoint.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch


def is_adapter(model_dir: str | Path) -> bool:
    return (Path(model_dir) / "adapter_config.json").exists()


def interpolate(base: str, finetuned: str, alpha: float, into: str | Path) -> Path:
    """Write θ_α of the fine-tune in `finetuned` (a checkpoint or a LoRA adapter) over `base` into `into`."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"interpolation weight {alpha} is outside [0, 1]")
    into = Path(into)
    into.mkdir(parents=True, exist_ok=True)
    if is_adapter(finetuned):
        _scale_adapter(Path(finetuned), alpha, into)
    else:
        _lerp_weights(base, finetuned, alpha, into)
    return into


def _scale_adapter(adapter: Path, alpha: float, into: Path) -> None:
    """The adapter's files with every lora_B scaled by α (its pointer to the base travels along)."""
    from safetensors.torch import load_file, save_file

    for path in adapter.iterdir():
        if path.is_file() and path.name != "adapter_model.safetensors":
            shutil.copy2(path, into / path.name)
    weights = load_file(adapter / "adapter_model.safetensors")
    scaled = {name: (w * alpha if "lora_B" in name else w) for name, w in weights.items()}
    save_file(scaled, into / "adapter_model.safetensors", metadata={"format": "pt"})


@torch.no_grad()
def _lerp_weights(base: str, finetuned: str, alpha: float, into: Path) -> None:
    from ..models import load_model, load_tokenizer, save_model

    cpu = torch.device("cpu")
    model = load_model(finetuned, cpu, torch.float32)
    reference = dict(load_model(base, cpu, torch.float32).named_parameters())
    for name, p in model.named_parameters():
        p.copy_(torch.lerp(reference[name], p, alpha))
    save_model(model, into)
    load_tokenizer(finetuned).save_pretrained(into)
    summary = Path(finetuned) / "train_summary.json"
    if summary.exists():
        facts = json.loads(summary.read_text())
        (into / "train_summary.json").write_text(json.dumps({**facts, "interpolation": alpha}, indent=1))
