"""What a paper-scale map costs before it runs: the time table of an example config at its real widths.

    python benchmarks/plan_cost.py --config olmo-1b --gpu h200
    python benchmarks/plan_cost.py --config olmo2-7b --gpu h200

The example config's own settings (tasks, steps, batch sizes, lengths, shards) with its base model's real
widths (a config.json only: no weights exist here, and planning reads none) and a corpus of the paper's
141,871 upstream examples; each job's work at forgetmap.cost's rates on the named GPU (every stage's GPUs
that card, as a profile's `gpu_model` names it). No data of the paper's is here, so every example is taken at
its max_length and every fine-tune at its full `steps` (an upper bound: Dolma's documents mostly fill 1,024
tokens, FLAN's examples do not). Prints the table and the GPU-hours by job kind; `--cells` scores that share of
each fine-tuned row's cells (a fractional map, models.NAME.score.cells), the base every example.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# the real widths of the examples' base models (their config.json on the hub)
WIDTHS = {
    "allenai/OLMo-1B-hf": {"hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
                           "num_attention_heads": 16, "num_key_value_heads": 16, "vocab_size": 50304,
                           "max_position_embeddings": 2048, "tie_word_embeddings": True},
    "allenai/OLMo-2-1124-7B": {"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                               "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 100352,
                               "max_position_embeddings": 4096, "tie_word_embeddings": False},
    "EleutherAI/pythia-1b": {"hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
                             "num_attention_heads": 8, "vocab_size": 50304, "max_position_embeddings": 2048,
                             "tie_word_embeddings": False},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="olmo-1b", help="an example config's name (config/examples/NAME.yaml)")
    parser.add_argument("--gpu", default="h200", help="the GPU model every stage's jobs run on")
    parser.add_argument("--upstream", type=int, default=141871, help="upstream examples (the paper's OLMo sample)")
    parser.add_argument("--cells", type=float, default=None,
                        help="the share of each fine-tuned row's cells scored (models.NAME.score.cells; default: the "
                             "example config's own)")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO / "tests"))
    import yaml

    from examples import example_config

    workdir = Path(tempfile.mkdtemp(prefix="plan-cost-"))
    (workdir / "config").mkdir()
    os.environ["HF_HUB_CACHE"] = str(workdir / "hub")
    config = yaml.safe_load(example_config(workdir, args.config, "paper", n_upstream=args.upstream).read_text())
    for model in config["models"].values():
        if args.cells is not None:
            model.setdefault("score", {})["cells"] = args.cells
    for model in config["models"].values():  # the stand-in's config at the real widths (its weights never read)
        for path in (workdir / "hub").glob(f"models--{model['base']['path'].replace('/', '--')}/snapshots/*/config.json"):
            spec = json.loads(path.read_text())
            spec.update(WIDTHS[model["base"]["path"]])
            path.write_text(json.dumps(spec))
    os.chdir(workdir)

    from forgetmap.cost.jobs import Model
    from forgetmap.cost.lengths import Lengths
    from forgetmap.cost.table import time_table
    from forgetmap.plan import Plan

    Lengths.sample = lambda self, path, max_length, template, split=None: None  # each at its max_length
    Model._examples = lambda self, path, split="train": 0  # every fine-tune runs its `steps`
    gpus = {stage: {"default-resources": args.gpu} for stage in ("finetune", "score", "semantic", "gradient")}
    plan = Plan(config, gpus)
    rows = [row for model in plan.computed for row in plan.job_times(model)]
    print(time_table(rows))
    print()
    kinds: dict[str, float] = {}
    for row in (r for r in rows if r.device.kind == "gpu"):
        kind = "arms" if row.job.startswith("arm ") else row.job.split(" (")[0].split(" shard")[0]
        kind += ", " + row.job.split(", ")[1] if ", " in row.job and kind == "score" else ""  # a fractional row
        kinds[kind] = kinds.get(kind, 0.0) + row.count * row.seconds * row.device.count / 3600
    total = sum(kinds.values())
    for kind, hours in sorted(kinds.items(), key=lambda item: -item[1]):
        print(f"{kind:<28} {hours:8.1f} GPU-hours  ({hours / total:.0%})")
    print(f"{'all':<28} {total:8.1f} GPU-hours on {args.gpu}")


if __name__ == "__main__":
    main()
