# Models whose matrix the paper's authors released: the matrix and its prediction splits are imported
# into the same files the pipeline writes, so every analysis runs on them unchanged.


def _imported(wc):
    return CFG["models"][wc.model]["imported"]


def _imported_inputs(wc):
    spec = _imported(wc)
    meta = spec["meta"] or f"{spec['matrix']}.meta"
    optional = [meta, spec["base_logprobs"], spec["sources"]]
    return [spec["matrix"]] + [p for p in optional if p and os.path.exists(p)]


def _import_options(wc):
    spec = _imported(wc)
    options = ["--matrix", spec["matrix"]]
    for key in ("meta", "base_logprobs", "sources"):
        if spec[key]:
            options += [f"--{key.replace('_', '-')}", spec[key]]
    groups = {c: v["group"] for c, v in CFG["categories"].items()}
    return " ".join(shlex.quote(o) for o in options + ["--corpus", wc.model, "--groups", as_json(groups)])


rule import_matrix:
    input:
        _imported_inputs,
    output:
        "results/{model}/forgetting.parquet",
    wildcard_constraints:
        model=_alternatives(IMPORTED),
    params:
        options=_import_options,
    log:
        "results/logs/{model}/import_matrix.log",
    benchmark:
        "results/benchmarks/{model}/import_matrix.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "forgetmap import {params.options} --out {output:q} > {log:q} 2>&1"


rule import_split:
    input:
        matrix=lambda wc: _imported(wc)["matrix"],
        split=lambda wc: _imported(wc)["splits"][wc.split],
    output:
        "results/{model}/splits/{split}.json",
    wildcard_constraints:
        model=_alternatives(IMPORTED),
    params:
        options=_import_options,
        splits_dir=lambda wc: f"results/{wc.model}/splits",
    log:
        "results/logs/{model}/import_split/{split}.log",
    benchmark:
        "results/benchmarks/{model}/import_split/{split}.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "forgetmap import {params.options} --split {wildcards.split}={input.split:q} "
        "--splits-dir {params.splits_dir:q} > {log:q} 2>&1"
