# Tables, figures, claims and the report, rendered from cached results only.


for _kind in KIND_EXT:  # one render rule, instantiated per kind: only the output files differ

    rule:
        name:
            f"render_{_kind}"
        input:
            runs=lambda w: run_metrics(w.paper, w.artifact),
            experiment=lambda w: experiment_file(w.paper, w.artifact),
        output:
            **render_outputs(_kind),
        wildcard_constraints:
            artifact=names_of_kind(_kind),
        params:
            py=PY,
            scale=SCALE,
            results=RESULTS,
            out=lambda w: f"{FIG}/{w.paper}/{w.artifact}",
        log:
            "logs/render/{paper}/{artifact}.log",
        conda:
            ENV
        shell:
            "{params.py:q} -m xcbench render --experiment {input.experiment:q} --scale {params.scale:q} "
            "--results {params.results:q} --out {params.out:q} > {log:q} 2>&1"


rule claims:
    input:
        claims="config/claims/{paper}.yaml",
        artifacts=lambda w: [f for (p, a) in EXPS if p == w.paper for f in artifact_files(p, a)],
    output:
        md=f"{FIG}/{{paper}}/claims.md",
        json=f"{FIG}/{{paper}}/claims.json",
        html=report(f"{FIG}/{{paper}}/claims.html", category="{paper}", subcategory="claims",
                    labels={"artifact": "claims"}),
    params:
        py=PY,
        scale=SCALE,
        results=RESULTS,
    log:
        "logs/claims/{paper}.log",
    conda:
        ENV
    shell:
        "{params.py:q} -m xcbench claims --claims {input.claims:q} --experiments config/experiments/{wildcards.paper:q} "
        "--scale {params.scale:q} --results {params.results:q} --out {output.md:q} > {log:q} 2>&1"


rule report:
    input:
        claims=[f"{FIG}/{p}/claims.json" for p in config["papers"] if Path(f"config/claims/{p}.yaml").exists()],
        artifacts=[f"{FIG}/{p}/{a}.{'md' if e['render']['kind'] == 'table' else 'png'}" for (p, a), e in EXPS.items()],
    output:
        md=f"{FIG}/REPORT.md",
        html=report(f"{FIG}/REPORT.html", category="REPORT (all papers)", labels={"artifact": "REPORT"}),
    params:
        py=PY,
    log:
        "logs/report.log",
    conda:
        ENV
    shell:
        "{params.py:q} -m xcbench report --claims {input.claims:q} --artifacts {input.artifacts:q} --out {output.md:q} > {log:q} 2>&1"
