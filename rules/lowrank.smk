# Low-rank structure of each model's forgetting matrix, and the cross-model R² table.

lowrank_report = analysis_report(fm_plan.LOWRANK, "Low-rank structure")


rule lowrank:
    input:
        fm_plan.MATRIX,
    output:
        r2=lowrank_report("r2.tsv", "lowrank_r2"),
        spectrum=lowrank_report("spectrum.png", "lowrank_spectrum"),
        heatmap=lowrank_report("heatmap.png", "lowrank_heatmap"),
        components=lowrank_report("components.tsv", "lowrank_components"),
        component_figure=lowrank_report("components.png", "lowrank_component_figure"),
        sources=lowrank_report("component_sources.tsv", "lowrank_sources"),
        summary=fm_plan.LOWRANK.replace("{name}", "summary.json"),
    params:
        tasks=lambda wc: as_json(PLAN.tasks[wc.model]),
    threads: resource("analysis", "threads")
    resources:
        mem_mb=resource("analysis", "mem_mb"),
        runtime=resource("analysis", "runtime"),
    log:
        "results/logs/{model}/lowrank.log",
    benchmark:
        "results/benchmarks/{model}/lowrank.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "OMP_NUM_THREADS={threads} forgetmap lowrank --matrix {input:q} --expected-tasks {params.tasks:q} "
        "--r2 {output.r2:q} --spectrum {output.spectrum:q} --heatmap {output.heatmap:q} "
        "--components {output.components:q} --component-figure {output.component_figure:q} "
        "--sources {output.sources:q} --summary {output.summary:q} > {log:q} 2>&1"


rule lowrank_summary:
    input:
        lambda wc: list(PLAN.lowrank_tables().values()),
    output:
        report(
            fm_plan.LOWRANK_SUMMARY,
            caption="../workflow/report/lowrank_summary.rst",
            category="Low-rank structure",
        ),
    params:
        tables=lambda wc: [f"{m}={path}" for m, path in PLAN.lowrank_tables().items()],
    log:
        fm_plan.LOWRANK_SUMMARY_LOG,
    benchmark:
        fm_plan.LOWRANK_SUMMARY_BENCH
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "forgetmap lowrank-summary --r2 {params.tables:q} --out {output:q} > {log:q} 2>&1"
