"""The models: their tasks and checkpoints, imported evaluation logs, and how many processes a fine-tune takes."""

from __future__ import annotations

from ...errors import ConfigError
from ..views import before_tasks, finetune_settings, forecast_modes, model_tasks
from .common import RESERVED_RUNS

# the fewest tasks a fractional map measures each example under: a rank-1 completion's factor of an example needs one
# measured cell, and the completion holds a cell of each out (its rank's choice, its conformal folds)
LEAST_COVER = 2


def check_models(cfg: dict) -> None:
    """Each computed model names a corpus, configured tasks, a base, and a scorer that fits its fine-tuning
    method; its fine-tuning processes fit the method and the GPUs."""
    for name, model in cfg["models"].items():
        if model["imported"] is not None:
            continue
        if model["upstream"] is None:
            raise ConfigError(f"config key models.{name}.upstream: required unless models.{name}.imported is set")
        if model["upstream"] not in cfg["upstream"]:
            raise ConfigError(f"config key models.{name}.upstream: value {model['upstream']!r} is not an upstream "
                              f"corpus; allowed: {', '.join(cfg['upstream'])}")
        if model["tasks"] != "all":
            unknown = [t for t in model["tasks"] if t not in cfg["tasks"]]
            if unknown:
                raise ConfigError(f"config key models.{name}.tasks: value {unknown[0]!r} is not a task; "
                                  f"allowed: {', '.join(cfg['tasks'])}")
        if model["base"]["kind"] == "pretrained" and not model["base"]["path"]:
            raise ConfigError(f"config key models.{name}.base.path: required when base.kind is 'pretrained'")
        sampling = model["score"]["correctness"]
        if sampling["answers"] == "sampled" and sampling["temperature"] == 0 and sampling["seeds"] > 1:
            raise ConfigError(f"config key models.{name}.score.correctness.seeds: value {sampling['seeds']} seeds at "
                              f"temperature 0 give the same greedy answer {sampling['seeds']} times; set one seed or a "
                              f"temperature above 0")
        if model["score"]["backend"] == "vllm" and model["finetune"]["method"] == "lora":
            raise ConfigError(f"config key models.{name}.score.backend: vllm scores full checkpoints, and "
                              f"models.{name}.finetune.method is lora; use backend torch (it merges the adapter)")
        lora_tasks = [t for t in model_tasks(cfg, name) if (cfg["tasks"][t]["finetune"] or {}).get("method") == "lora"]
        if model["score"]["backend"] == "vllm" and lora_tasks:
            raise ConfigError(f"config key tasks.{lora_tasks[0]}.finetune.method: lora, and models.{name}.score.backend "
                              f"is vllm, which scores full checkpoints only; use backend torch")
        check_checkpoints(cfg, name)
        check_fractional(cfg, name)
        if not model_tasks(cfg, name) and not model["checkpoints"]:
            raise ConfigError(f"config key models.{name}.tasks: model {name!r} has no row: no task is configured for it "
                              f"and it names no checkpoints")
        for task in model_tasks(cfg, name):
            check_processes(finetune_settings(cfg, name, task), model["resources"]["finetune"]["gpu"],
                            f"models.{name} / tasks.{task}")
    check_logged_names(cfg)


def check_fractional(cfg: dict, name: str) -> None:
    """A fractional map (`score.cells` < 1) is completed from its measured cells; what reads measured rows in full
    is refused: a forecast's map fit (and so the monitor's), and probes designed once for every test task (each
    test row of a fractional map has its own measured cells)."""
    cells = cfg["models"][name]["score"]["cells"]
    if cells >= 1:
        return
    forecast = [*forecast_modes(cfg, name), *before_tasks(cfg, name)]
    if forecast:
        raise ConfigError(f"config key models.{name}.score.cells: {cells} (a fractional map), and the model forecasts "
                          f"{forecast[0]!r}, whose map fit (and monitor) reads every example of each measured row; "
                          f"score the map in full (cells: 1) or forecast with a model whose map is measured in full")
    if cfg["prediction"]["probes"] != "random":
        raise ConfigError(f"config key prediction.probes: {cfg['prediction']['probes']!r} reveals the same examples of "
                          f"every test task, and models.{name}.score.cells is {cells}: each test row of a fractional "
                          f"map has its own measured cells, among which its probes are drawn; use random")


def check_cells(cfg: dict, name: str, rows: list[str], example_ids: list[str]) -> None:
    """Every example a fractional map completes (`example_ids`: the corpus's, items left out, which are scored in
    full) is measured under at least LEAST_COVER of its rows; else the smallest fraction that does it is said."""
    from ... import fractional

    score = cfg["models"][name]["score"]
    if not rows or not example_ids:
        return
    least = fractional.least_cover(score["design"], score["cells"], rows, example_ids, cfg["seed"])
    if least >= LEAST_COVER:
        return
    smallest = fractional.smallest_fraction(score["design"], rows, example_ids, LEAST_COVER, cfg["seed"])
    fix = (f"the smallest that does is {smallest}" if smallest is not None else
           f"no fraction does with {len(rows)} fractional row(s): score the map in full (cells: 1)")
    raise ConfigError(f"config key models.{name}.score.cells: {score['cells']} measures some upstream example under "
                      f"{least} of the model's {len(rows)} fractional rows (design {score['design']}); the completion "
                      f"needs every example under at least {LEAST_COVER}: {fix}")


def check_logged_names(cfg: dict) -> None:
    """A row imported from eval logs has a name no model scores: its score files come from another rule."""
    computed = {n: m for n, m in cfg["models"].items() if m["imported"] is None}
    scored = {r for n, m in computed.items()
              for r in [*model_tasks(cfg, n), *(c for c, s in m["checkpoints"].items() if s["logs"] is None)]}
    for name, model in computed.items():
        for row, checkpoint in model["checkpoints"].items():
            if checkpoint["logs"] is not None and row in scored:
                raise ConfigError(f"config key models.{name}.checkpoints.{row}: a row from evaluation logs needs a "
                                  f"name that no model scores ({row!r} is scored elsewhere)")


def check_checkpoints(cfg: dict, model: str) -> None:
    """A model's checkpoints: names that are not runs already, configured categories, references that are
    the base or an earlier link of an acyclic chain, a pretrained base to compare with, and a prompt that
    is either a chat template (zero-shot) or plain few-shot text."""
    spec = cfg["models"][model]
    checkpoints = spec["checkpoints"]
    if checkpoints and spec["base"]["kind"] != "pretrained":
        raise ConfigError(f"config key models.{model}.checkpoints: checkpoints are compared with a pretrained base; "
                          f"set models.{model}.base.kind: pretrained and base.path (the checkpoints' base model)")
    for name, checkpoint in checkpoints.items():
        key = f"config key models.{model}.checkpoints.{name}"
        if name in RESERVED_RUNS or name in cfg["tasks"]:
            what = "a task's name" if name in cfg["tasks"] else "reserved"
            raise ConfigError(f"{key}: the name {name!r} is {what}: a checkpoint's row needs a name of its own")
        if checkpoint["category"] not in cfg["categories"]:
            raise ConfigError(f"{key}.category: value {checkpoint['category']!r} is not a category; allowed: "
                              f"{', '.join(cfg['categories'])}")
        if (checkpoint["path"] is None) == (checkpoint["logs"] is None):
            raise ConfigError(f"{key}: give `path` (a model to score) or `logs` (evaluation logs to import), "
                              f"one of them")
        logs = checkpoint["logs"]
        if logs is not None and logs["align"] == "id" and not logs["id"]:
            raise ConfigError(f"{key}.logs.id: required for align 'id' (a template giving the example_id, e.g. "
                              f"'{{doc[id]}}')")
        if checkpoint["reference"] != "base" and checkpoint["reference"] not in checkpoints:
            raise ConfigError(f"{key}.reference: value {checkpoint['reference']!r} is neither `base` nor a checkpoint "
                              f"of model {model!r}; allowed: base, {', '.join(c for c in checkpoints if c != name)}")
        if checkpoint["shots"] and checkpoint["chat_template"] == "tokenizer":
            raise ConfigError(f"{key}.shots: value {checkpoint['shots']}: few-shot prompts are plain text, and "
                              f"chat_template is `tokenizer` (a chat model prompted zero-shot); set chat_template: "
                              f"auto (or olmo) for a few-shot row")
        seen, at = [name], checkpoint["reference"]
        while at != "base":
            if at in seen:
                raise ConfigError(f"{key}.reference: the chain {' -> '.join([*seen, at])} is a cycle; a chain ends at "
                                  f"`base`")
            seen.append(at)
            at = checkpoints[at]["reference"]


def check_logs(cfg: dict, model: str, files: dict[str, list[list[str]]], has_items: bool) -> None:
    """Logged rows (`files`: row -> each seed's files): every seed's glob matches files, the corpus has items
    to align them with, and a row pairs seed by seed with its reference (a scored run has the model's
    sampling seeds, or one)."""
    spec = cfg["models"][model]
    correctness = spec["score"]["correctness"]
    scored_seeds = correctness["seeds"] if correctness["answers"] == "sampled" else 1
    for name, seeds in files.items():
        key = f"config key models.{model}.checkpoints.{name}.logs"
        if not has_items:
            raise ConfigError(f"{key}: the upstream corpus {spec['upstream']!r} has no item with an answer to align "
                              f"logged items with")
        for pattern, found in zip(spec["checkpoints"][name]["logs"]["files"], seeds):
            if not found:
                raise ConfigError(f"{key}.files: {pattern!r} matches no file")
        reference = spec["checkpoints"][name]["reference"]
        theirs = len(files[reference]) if reference in files else scored_seeds
        if len(seeds) != theirs:
            raise ConfigError(f"{key}.files: {len(seeds)} seed(s), and its reference {reference!r} has {theirs}: seed s "
                              f"is compared with seed s (models.{model}.score.correctness gives scored runs "
                              f"{scored_seeds})")


def check_checkpoint_files(cfg: dict, model: str, templates: dict[str, bool], tokenizers: dict[str, str | None]) -> None:
    """What a model's checkpoint files must give (read by the plan): a chat template where a row is prompted
    through it, and, for a per-token Z, the same tokenizer as the row's reference (`tokenizers`: run ->
    the digest of how it splits text, read where Z is per token)."""
    spec = cfg["models"][model]
    for name, checkpoint in spec["checkpoints"].items():
        if name not in templates:  # an eval log: no files of a model
            continue
        if checkpoint["chat_template"] == "tokenizer" and not templates[name]:
            raise ConfigError(f"config key models.{model}.checkpoints.{name}.chat_template: `tokenizer`, and "
                              f"{checkpoint['path']!r} has no chat template (a base model?); set chat_template: auto "
                              f"and shots (few-shot, as base models are prompted)")
        reference = checkpoint["reference"]
        if spec["z"] == "nats_per_token" and reference in tokenizers and tokenizers[name] != tokenizers[reference]:
            raise ConfigError(f"config key models.{model}.z: nats_per_token, and checkpoint {name!r} "
                              f"({checkpoint['path']}) splits text into other tokens than its reference {reference!r}: "
                              f"a per-token NLL change across tokenizers compares different units; set "
                              f"models.{model}.z: bits_per_byte (the NLL per byte of the scored text)")


def check_processes(settings: dict, gpus: int, where: str) -> None:
    """Several training processes shard full fine-tuning (FSDP), one per GPU."""
    processes = settings["processes"]
    if processes > 1 and settings["method"] != "full":
        raise ConfigError(f"config key finetune.processes ({where}): value {processes} needs method 'full' "
                          f"(FSDP shards full fine-tuning); a {settings['method']} run fits one device")
    if gpus and gpus != processes:
        raise ConfigError(f"config key resources.finetune.gpu ({where}): value {gpus} must equal finetune.processes "
                          f"({processes}): each training process drives one GPU")
