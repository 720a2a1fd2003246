# Fixed features extracted once per dataset and cached.


rule features:
    input:
        f"{DATA}/processed/{{dataset}}/dataset.npz",
    output:
        f"{DATA}/features/{{dataset}}/{{extractor}}{{dim}}.pt",
    wildcard_constraints:
        extractor="[a-z_]+",
        dim=r"\d+",
    threads: 1
    params:
        py=PY,
    log:
        "logs/features/{dataset}/{extractor}{dim}.log",
    conda:
        ENV
    shell:
        "{params.py:q} -m xcbench features --dataset {wildcards.dataset:q} --processed {input:q} "
        "--extractor {wildcards.extractor:q} --dim {wildcards.dim:q} --threads {threads} --out {output:q} > {log:q} 2>&1"
