# The CPU probe as a job on the cluster partition the CPU jobs go to (forgetmap.cost.probe): planned only where they
# go to a cluster whose CPU the rates file has no figures of, run once, its file kept; the jobs that become ready
# after it are sized by it (until then, borrowed figures, said in the time table).


rule cpu_probe:
    output:
        fm_plan.CPU_PROBE,
    log:
        "results/logs/cost/probe-{partition}.log",
    threads: 1
    priority: 100  # before the jobs it sizes, where they are ready together
    resources:
        slurm_partition=lambda wc: "" if wc.partition == "default" else wc.partition,
        runtime=15,
        mem_mb=4000,
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "OMP_NUM_THREADS=1 forgetmap probe-cpu --partition {wildcards.partition:q} --out {output:q} > {log:q} 2>&1"
