# Low-rank structure of each model's forgetting matrix, and the cross-model R² table.


def lowrank_report(name, caption):
    return report(
        f"results/{{model}}/lowrank/{name}",
        caption=f"../workflow/report/{caption}.rst",
        category="Low-rank structure",
        subcategory="{model}",
    )


rule lowrank:
    input:
        "results/{model}/forgetting.parquet",
    output:
        r2=lowrank_report("r2.tsv", "lowrank_r2"),
        spectrum=lowrank_report("spectrum.png", "lowrank_spectrum"),
        heatmap=lowrank_report("heatmap.png", "lowrank_heatmap"),
        components=lowrank_report("components.tsv", "lowrank_components"),
        component_figure=lowrank_report("components.png", "lowrank_component_figure"),
        sources=lowrank_report("component_sources.tsv", "lowrank_sources"),
        summary="results/{model}/lowrank/summary.json",
    params:
        tasks=lambda wc: as_json(TASKS[wc.model]),
        out_dir=lambda wc: f"results/{wc.model}/lowrank",
    threads: 1
    log:
        "results/logs/{model}/lowrank.log",
    benchmark:
        "results/benchmarks/{model}/lowrank.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "OMP_NUM_THREADS={threads} forgetmap lowrank --matrix {input:q} --out-dir {params.out_dir:q} "
        "--expected-tasks {params.tasks:q} > {log:q} 2>&1"


rule lowrank_summary:
    input:
        expand("results/{model}/lowrank/r2.tsv", model=MODELS),
    output:
        report(
            "results/lowrank_summary.tsv",
            caption="../workflow/report/lowrank_summary.rst",
            category="Low-rank structure",
        ),
    params:
        tables=[f"{m}=results/{m}/lowrank/r2.tsv" for m in MODELS],
    log:
        "results/logs/lowrank_summary.log",
    benchmark:
        "results/benchmarks/lowrank_summary.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "forgetmap lowrank-summary --r2 {params.tables:q} --out {output:q} > {log:q} 2>&1"
