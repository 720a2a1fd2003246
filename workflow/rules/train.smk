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
        dataset="[^/]+",
        method="[^/]+",
        seed=r"\d+",
    params:
        py=PY,
        device=DEVICE,
        features=lambda w, input: f"--features {input.features}" if "features" in input.keys() else "",
        out=lambda w, output: str(Path(output.metrics).parent),
    threads: 1
    resources:
        gpu=1,
        gpu_manufacturer="nvidia",
    log:
        "logs/train/{scale}/{paper}/{artifact}/{dataset}/{method}/seed{seed}.log",
    conda:
        ENV
    shell:
        "{params.py} -m xcbench train --experiment {input.experiment} --scale {wildcards.scale} "
        "--dataset {wildcards.dataset} --method {wildcards.method} --seed {wildcards.seed} "
        "--processed {input.processed} {params.features} --device {params.device} --threads {threads} --out {params.out} > {log} 2>&1"
