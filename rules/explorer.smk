# The explorer: one offline HTML page per model linking its matrix to its examples (texts), predictions,
# item transitions, components and mitigation arms.


rule explorer:
    input:
        unpack(job(PLAN.explorer.inputs)),
    output:
        report(fm_plan.EXPLORER, caption="../workflow/report/explorer.rst", category="Explorer",
               subcategory="{model}"),
    wildcard_constraints:
        model=Z_MODELS,
    params:
        settings=settings(PLAN.explorer.settings),
        options=optional_inputs("shards", "forecast", "trajectory", "transitions"),
        pairs=arguments(PLAN.explorer.arguments),
    threads: resource("analysis", "threads")
    resources:
        mem_mb=resource("analysis", "mem_mb"),
        runtime=resource("analysis", "runtime"),
    log:
        "results/logs/{model}/explorer.log",
    benchmark:
        "results/benchmarks/{model}/explorer.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "OMP_NUM_THREADS={threads} forgetmap explorer --settings {params.settings:q} --matrix {input.matrix:q} "
        "{params.options} {params.pairs} --out {output:q} > {log:q} 2>&1"
