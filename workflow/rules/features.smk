# Fixed features extracted once per dataset and cached.


rule features:
    input:
        f"{DATA}/processed/{{dataset}}/dataset.npz",
    output:
        f"{DATA}/features/{{dataset}}/{{extractor}}{{dim}}.pt",
    wildcard_constraints:
        extractor="[a-z_]+",
        dim=r"\d+",
    params:
        py=PY,
    log:
        "logs/features/{dataset}/{extractor}{dim}.log",
    conda:
        ENV
    shell:
        "{params.py} -m xcbench features --dataset {wildcards.dataset} --processed {input} "
        "--extractor {wildcards.extractor} --dim {wildcards.dim} --out {output} > {log} 2>&1"
