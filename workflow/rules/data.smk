# Raw data (mirrors, URLs or a synthetic generator) -> one prepared .npz per dataset.


rule fetch:
    output:
        f"{DATA}/raw/{{dataset}}/manifest.json",
    params:
        py=PY,
        out=lambda w: f"{DATA}/raw/{w.dataset}",
        mirrors=MIRRORS,
    log:
        "logs/fetch/{dataset}.log",
    conda:
        ENV
    shell:
        "{params.py:q} -m xcbench fetch --dataset {wildcards.dataset:q} --out {params.out:q} {params.mirrors:q} > {log:q} 2>&1"


rule prepare:
    input:
        f"{DATA}/raw/{{dataset}}/manifest.json",
    output:
        f"{DATA}/processed/{{dataset}}/dataset.npz",
    params:
        py=PY,
        raw=lambda w: f"{DATA}/raw/{w.dataset}",
    log:
        "logs/prepare/{dataset}.log",
    conda:
        ENV
    shell:
        "{params.py:q} -m xcbench prepare --dataset {wildcards.dataset:q} --raw {params.raw:q} --out {output:q} > {log:q} 2>&1"
