# One training run per (scale, paper, artifact, dataset, method, seed); resumes from its checkpoint.


rule train:
    input:
        unpack(train_inputs),
    output:
        metrics=f"{RESULTS}/{{scale}}/{{paper}}/{{artifact}}/{{dataset}}/{{method}}/seed{{seed}}/metrics.json",
        history=f"{RESULTS}/{{scale}}/{{paper}}/{{artifact}}/{{dataset}}/{{method}}/seed{{seed}}/history.csv",
        config=f"{RESULTS}/{{scale}}/{{paper}}/{{artifact}}/{{dataset}}/{{method}}/seed{{seed}}/config.resolved.yaml",
    wildcard_constraints:
        scale="tiny|quick|paper",
        dataset=NAME,
        method=NAME,
        seed=r"\d+",
    params:
        py=PY,
        experiment=lambda w: experiment_file(w.paper, w.artifact),
        spec=run_spec_hash,
        device=lambda w: run_device(w.scale),
        features=lambda w, input: ["--features", input.features] if "features" in input.keys() else [],
        out=lambda w, output: str(Path(output.metrics).parent),
    threads: 1
    resources:
        gpu=gpus,
        gpu_manufacturer="nvidia",
        mem_mb=lambda w: MEM_MB[w.scale],
        slurm_partition=lambda w: "gpu" if gpus(w) else "cpu",  # the Slurm profile's partition names
    log:
        "logs/train/{scale}/{paper}/{artifact}/{dataset}/{method}/seed{seed}.log",
    conda:
        ENV
    shell:
        "{params.py:q} -m xcbench train --experiment {params.experiment:q} --scale {wildcards.scale:q} "
        "--dataset {wildcards.dataset:q} --method {wildcards.method:q} --seed {wildcards.seed:q} "
        "--processed {input.processed:q} {params.features:q} --device {params.device:q} --threads {threads:q} --out {params.out:q} > {log:q} 2>&1"
