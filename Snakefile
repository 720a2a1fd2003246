# xcbench: one DAG from raw data to every table and figure. See README.md.
configfile: "config/config.yaml"
report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/features.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        ALL_TARGETS,
