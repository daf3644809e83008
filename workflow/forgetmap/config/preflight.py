"""Before any job runs: can what the config points at serve the run? Each failure names the config key.

`resolve` checks the config itself and the plan finds the base model's files; this checks what only
loading them shows, once, in the Snakemake process that plans the run:
- a pretrained base's tokenizer is usable (a real vocabulary and an EOS; transformers builds a
  two-token tokenizer for a directory without tokenizer files, and fine-tunes on it learn only EOS);
- the chat template exists where the config asks for the tokenizer's own, and renders a response
  verbatim (the scored span is found in the rendered text);
- LoRA `target_modules` name modules the architecture has (read from its config, no weights loaded);
- on a local run, no rule asks for more GPUs than the machine has (a job would wait on a lock or fail);
- every job on GPUs fits them where their memory is known, and a fine-tune's host memory request holds it
  (forgetmap.config.fits).
"""

from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError
from . import fits
from .checks import about

GPU_STAGES = ("base", "finetune", "score", "semantic", "gradient")  # resources whose `gpu` a rule declares


def check(plan) -> None:
    """The base models' checks, and the mitigation arms' against the architecture (the Snakefile runs
    `check_gpus` when a local run starts: a dry run or a cluster run needs no GPU here)."""
    for model, files in plan.base_files.items():
        check_base(plan, model, Path(files["local"]))
    for model in plan.computed:
        check_packing(plan, model)
        if plan.mitigation.tasks(model):
            check_arena(plan, model)
    fits.check(plan)


def check_packing(plan, model: str) -> None:
    """Packing only where the base's architecture keeps packed examples apart (forgetmap.data.packing), and only for
    the torch scorer (vLLM batches without padding of its own)."""
    from .. import anatomy
    from ..data.packing import refusal

    spec = plan.cfg["models"][model]
    keys = [f"models.{model}.score.packing"] if spec["score"]["packing"] else []
    if spec["score"]["packing"] and spec["score"]["backend"] == "vllm":
        raise ConfigError(f"config key models.{model}.score.packing: packing is the torch backend's; the vllm backend "
                          f"schedules its tokens without padding itself: set it to false")
    packed = next((t for t in plan.finetuned[model] if plan.finetune_settings(model, t).get("packing")), None)
    if packed is not None:  # the key that asked for it: the task's own override, else the model's
        own = (plan.cfg["tasks"][packed]["finetune"] or {}).get("packing")
        keys.append(f"tasks.{packed}.finetune.packing" if own else f"models.{model}.finetune.packing")
    for key in keys:
        why = refusal(model, anatomy.model_type(plan.base_json(model)), key)
        if why:
            raise ConfigError(f"config key {why}")


def check_arena(plan, model: str) -> None:
    """Every arena knob fits the architecture: no more trained blocks than it has, no LoRA rank above its
    hidden size, module names it has (`train_modules`, an arm's `lora.target_modules`), generations shorter
    than its positions."""
    from .. import anatomy
    from ..mitigation.knobs import generates, knob_values
    from ..models import matching_names, short_names

    arms = {name: spec for name, spec in plan.cfg["mitigation"]["arms"].items()
            if any(spec.get(k) for k in ("train_top", "train_modules", "lora")) or generates(spec)}
    if not arms:
        return
    config = plan.base_json(model)
    text, tree = anatomy.text(config), anatomy.modules(config)
    where = f"the base of model {model!r} ({tree['class']})"
    for name, spec in arms.items():
        key = f"config key mitigation.arms.{name}"
        tops = knob_values(spec, "train_top")
        if tops and (tree["blocks"] is None or max(tops) > tree["blocks"]):
            raise ConfigError(f"{key}.train_top: value {spec['train_top']}: {where} has {tree['blocks'] or 'no'} "
                              f"transformer blocks")
        ranks = knob_values(spec, "lora.r")
        hidden = text["hidden"]
        if ranks and hidden and max(ranks) > hidden:
            raise ConfigError(f"{key}.lora.r: value {spec['lora']['r']}: above the hidden size of {where}, {hidden}")
        positions = text["positions"]
        if generates(spec) and positions and spec["generation"]["max_new_tokens"] >= positions:
            raise ConfigError(f"{key}.generation.max_new_tokens: value {spec['generation']['max_new_tokens']}: "
                              f"{where} has {positions} positions, and a generated text needs its prompt beside it")
        for sub, names in (("train_modules", spec.get("train_modules")),
                           ("lora.target_modules", (spec.get("lora") or {}).get("target_modules"))):
            missing = [t for t, found in matching_names(tree["names"], names or []).items() if not found]
            if missing:
                raise ConfigError(f"{key}.{sub}: {', '.join(missing)} not in {where}; its modules: "
                                  f"{', '.join(short_names(tree['names']))}")


def check_base(plan, model: str, directory: Path) -> None:
    from ..data.chat import chat_pieces, template_in_use
    from ..models import check_tokenizer
    from ..pretrained import has_tokenizer_files, target_modules_missing

    spec = plan.cfg["models"][model]
    key = f"models.{model}.base.path"
    if not has_tokenizer_files(directory):
        raise ConfigError(f"config key {key}: {directory} has no tokenizer files (tokenizer.json, tokenizer.model or "
                          f"vocab.json); save the model's tokenizer there with tokenizer.save_pretrained")
    tokenizer = _tokenizer(directory, key)
    with about(key):
        check_tokenizer(tokenizer, directory)
    template = spec["chat_template"]
    if template == "tokenizer" and not getattr(tokenizer, "chat_template", None):
        raise ConfigError(f"config key models.{model}.chat_template: 'tokenizer', but the tokenizer of {directory} has "
                          f"no chat template; use 'olmo' (the paper's format) or 'auto' (the tokenizer's own where it "
                          f"has one)")
    try:
        chat_pieces(tokenizer, "Is this a prompt?", "It is the response.", template)
    except Exception as exc:  # a template that fails to render or hides the response: the job would fail alike
        raise ConfigError(f"config key models.{model}.chat_template: the tokenizer's chat template "
                          f"({template_in_use(tokenizer, template)}) cannot render a prompt and response: {exc}") from None
    checked: dict[tuple, tuple] = {}  # the architecture is built once per distinct target list, not per task
    for task in plan.finetuned[model]:  # measured or only forecast: every task is fine-tuned
        settings = plan.finetune_settings(model, task)
        if settings["method"] != "lora":
            continue
        targets = tuple(settings["lora"]["target_modules"])
        if targets not in checked:
            checked[targets] = target_modules_missing(directory, list(targets))
        missing, linear = checked[targets]
        if missing:
            overridden = "lora" in (plan.cfg["tasks"][task]["finetune"] or {})
            where = f"tasks.{task}.finetune" if overridden else f"models.{model}.finetune"
            raise ConfigError(f"config key {where}.lora.target_modules: {', '.join(missing)} not in the architecture "
                              f"of {directory} ({type_name(directory)}); its linear layers: {', '.join(linear)}")


def _tokenizer(directory: Path, key: str):
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    try:
        return AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    except Exception as exc:  # transformers raises many kinds for a broken tokenizer
        raise ConfigError(f"config key {key}: the tokenizer of {directory} cannot be loaded: {exc}") from None


def type_name(directory: Path) -> str:
    import json

    config = json.loads((Path(directory) / "config.json").read_text())
    return ", ".join(config.get("architectures") or [config.get("model_type", "unknown")])


def check_gpus(plan) -> None:
    """No rule of a local run asks for more GPUs than the machine has (forgetmap.devices counts them): every key
    that does is named in one error, with the lines that run it on the CPU instead."""
    from ..devices import device_count

    available = device_count()
    over = []
    for model in plan.computed:
        spec = plan.cfg["models"][model]
        used = [s for s in GPU_STAGES if (s not in ("semantic", "gradient")
                                          or (spec["correlations"][s] and plan.task_correlations(model)))
                and (s != "finetune" or plan.finetuned[model])]  # a map of checkpoints fine-tunes nothing
        for stage in used:
            if stage == "base" and spec["base"]["kind"] == "pretrained":
                continue  # a pointer to the weights: its job never touches a GPU
            gpus = spec["resources"][stage]["gpu"]
            if gpus > available:
                over.append((model, stage, gpus))
    if over:
        keys = "; ".join(f"models.{m}.resources.{s}.gpu: value {g}" for m, s, g in over)
        lines = "models:" + "".join(f"\n  {m}:\n    resources:" + "".join(
            f"\n      {s}: {{gpu: 0}}" for mm, s, _ in over if mm == m) for m in dict.fromkeys(m for m, _, _ in over))
        raise ConfigError(f"config key{'s' if len(over) > 1 else ''} {keys}, but this machine has {available} GPU(s) "
                          f"and the run is local; set {'them' if len(over) > 1 else 'it'} to 0 to run on the CPU, "
                          f"in the config:\n{lines}\nor submit to a cluster (--profile profiles/slurm)")
