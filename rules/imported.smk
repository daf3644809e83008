# Models whose matrix the paper's authors released: the matrix and its prediction splits are imported
# into the same files the pipeline writes, so every analysis runs on them unchanged; a binary matrix
# (the exact-match Y) becomes the model's 1->0 matrix, which the correctness analyses read.


rule import_matrix:
    input:
        job(PLAN.imported_inputs),
    output:
        fm_plan.MATRIX,
    wildcard_constraints:
        model=Z_IMPORTED,
    params:
        options=arguments(PLAN.import_options),
    threads: resource("analysis", "threads")
    resources:
        mem_mb=resource("analysis", "mem_mb"),
        runtime=resource("analysis", "runtime"),
    log:
        "results/logs/{model}/import_matrix.log",
    benchmark:
        "results/benchmarks/{model}/import_matrix.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "forgetmap import {params.options} --out {output:q} > {log:q} 2>&1"


rule import_binary:
    input:
        job(PLAN.imported_inputs),
    output:
        fm_plan.CORRECTNESS.replace("{name}", fm_plan.TRANSITION_OUTPUTS["forgetting"]),
    wildcard_constraints:
        model=BINARY_IMPORTED,
    params:
        options=arguments(PLAN.import_options),
    threads: resource("analysis", "threads")
    resources:
        mem_mb=resource("analysis", "mem_mb"),
        runtime=resource("analysis", "runtime"),
    log:
        "results/logs/{model}/import_binary.log",
    benchmark:
        "results/benchmarks/{model}/import_binary.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "forgetmap import {params.options} --out {output:q} > {log:q} 2>&1"


rule import_split:
    input:
        matrix=job(PLAN.imported_matrix),
        split=job(PLAN.prediction.released_split),
    output:
        fm_plan.SPLIT,
    wildcard_constraints:
        model=IMPORTED,
    params:
        options=arguments(PLAN.import_options),
    log:
        "results/logs/{model}/import_split/{split}.log",
    benchmark:
        "results/benchmarks/{model}/import_split/{split}.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "forgetmap import-split {params.options} --name {wildcards.split:q} --split {input.split:q} "
        "--out {output:q} > {log:q} 2>&1"
