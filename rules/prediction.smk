# Forgetting prediction (paper §5): per model, split and method, all seeds in one job.


rule split_definition:
    output:
        fm_plan.SPLIT,
    wildcard_constraints:
        model=COMPUTED,
    params:
        split=settings(PLAN.prediction.split_settings),
    log:
        "results/logs/{model}/split_definition/{split}.log",
    benchmark:
        "results/benchmarks/{model}/split_definition/{split}.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "forgetmap split-definition --split {params.split:q} --out {output:q} > {log:q} 2>&1"


rule predict:
    input:
        matrix=fm_plan.MATRIX,
        split=fm_plan.SPLIT,
        similarity=job(PLAN.prediction.predict_similarity),
    output:
        predictions=directory(fm_plan.PREDICTIONS),
        metrics=fm_plan.PREDICTION_METRICS,
    params:
        settings=settings(PLAN.prediction.predict_settings),
        similarity=optional_inputs("similarity"),
    threads: resource("analysis", "threads")
    resources:
        mem_mb=resource("analysis", "mem_mb"),
        runtime=resource("analysis", "runtime"),
    log:
        fm_plan.PREDICT_LOG,
    benchmark:
        fm_plan.PREDICT_BENCH
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "OMP_NUM_THREADS={threads} OPENBLAS_NUM_THREADS={threads} forgetmap predict --matrix {input.matrix:q} "
        "--split {input.split:q} --settings {params.settings:q} --out {output.predictions:q} "
        "--metrics {output.metrics:q} {params.similarity} > {log:q} 2>&1"


rule prediction_scores:
    input:
        job(PLAN.prediction.metrics),
    output:
        table=report(
            fm_plan.PREDICTION_SCORES,
            caption="../workflow/report/prediction_scores.rst",
            category="Forgetting prediction",
            subcategory="{model}",
        ),
        figure=report(
            fm_plan.PREDICTION_SCORES.replace(".tsv", ".png"),
            caption="../workflow/report/prediction_figure.rst",
            category="Forgetting prediction",
            subcategory="{model}",
        ),
    log:
        "results/logs/{model}/prediction_scores.log",
    benchmark:
        "results/benchmarks/{model}/prediction_scores.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "forgetmap prediction-scores --metrics {input:q} --out {output.table:q} "
        "--figure {output.figure:q} > {log:q} 2>&1"


rule probe_evaluation:
    input:
        matrix=fm_plan.MATRIX,
        split=fm_plan.SPLIT,
    output:
        table=report(
            fm_plan.PROBES,
            caption="../workflow/report/probe_evaluation.rst",
            category="Forgetting prediction",
            subcategory="{model}",
        ),
        coverage=fm_plan.PROBES.replace(".tsv", "_coverage.tsv"),
        figure=report(
            fm_plan.PROBES.replace(".tsv", ".png"),
            caption="../workflow/report/probe_evaluation_figure.rst",
            category="Forgetting prediction",
            subcategory="{model}",
        ),
    params:
        settings=settings(PLAN.prediction.probe_evaluation_settings),
    threads: resource("analysis", "threads")
    resources:
        mem_mb=resource("analysis", "mem_mb"),
        runtime=resource("analysis", "runtime"),
    log:
        "results/logs/{model}/probe_evaluation/{split}.log",
    benchmark:
        "results/benchmarks/{model}/probe_evaluation/{split}.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "OMP_NUM_THREADS={threads} OPENBLAS_NUM_THREADS={threads} forgetmap probe-evaluation "
        "--matrix {input.matrix:q} --split {input.split:q} --settings {params.settings:q} --out {output.table:q} "
        "--coverage-out {output.coverage:q} --figure {output.figure:q} > {log:q} 2>&1"
