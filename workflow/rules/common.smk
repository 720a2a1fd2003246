# Helpers shared by all rules: config validation, experiment files, expected outputs.
import functools
import glob
import os
import sys
from pathlib import Path

from snakemake.utils import validate

from xcbench.config import load_experiment, resolve_experiment
from xcbench.catalogue import features_path, load_datasets
from xcbench.schema import SCHEMAS
from xcbench.checks import check_experiment
from xcbench.data.fetch import steps_before_fetch
from xcbench.io import write_yaml
from xcbench.run import expected_runs, make_run, run_location

validate(config, schema=str(SCHEMAS / "config.schema.yaml"))

# the interpreter running snakemake (a bare `python` may be another one), resolved through symlinks so that
# `python` and `python3` give one command (a changed command would rerun every job), but never out of its
# environment: a virtual environment's python links to the base interpreter, whose packages would then run
# the jobs instead of the environment's; there it is the environment's bin/python
PY = os.path.realpath(sys.executable)
if not PY.startswith(os.path.realpath(sys.prefix) + os.sep):
    PY = os.path.join(sys.prefix, "bin", "python") if os.path.exists(os.path.join(sys.prefix, "bin", "python")) else sys.executable
ENV = "../envs/xcbench.yaml"  # for --lint and --sdm conda users; ignored otherwise
SCALE = config["scale"]
# tiny-scale train jobs fork from one warm process that has imported torch, render jobs from one that has imported
# matplotlib (src/xcbench/forkserver.py): they otherwise spend most of their time importing them. Not at the other
# scales, whose peak-memory columns would then read lower (a fork starts from the server's resident pages, not
# from a fresh import); there XCBENCH_FORKSERVER=1 in the environment turns it on, and XCBENCH_FORKSERVER=0 turns it off at tiny scale.
if SCALE == "tiny":
    os.environ.setdefault("XCBENCH_FORKSERVER", "1")
DATA = config["data"]["root"]
RESULTS = config["results"]
FIG = config["figures"]
DEVICE = config["device"]
# The quick and tiny scales are CPU scales: with `device: auto` their runs stay on the CPU (same numbers on
# every machine, no GPU queue on a cluster); paper-scale runs take CUDA when present.
MEM_MB = {"tiny": 2000, "quick": 6000, "paper": 16000}  # measured peaks: the kept paper-scale CPU runs <= 6.9 GB RSS (table7 Full)


def run_device(scale):
    return "cpu" if DEVICE == "auto" and scale != "paper" else DEVICE


def gpus(w):
    """1 for a job that will use CUDA (Slurm then queues it on a GPU partition), else 0."""
    return 0 if run_device(w.scale) == "cpu" else 1


MIRRORS = [a for m in config["data"]["mirrors"] for a in ("--mirror", m)]  # a list: `:q` quotes each item
NAME = r"[A-Za-z0-9_.-]+"  # dataset, method, paper and artifact names (the schemas enforce it too)


def experiment_file(paper, artifact):
    return f"config/experiments/{paper}/{artifact}.yaml"


@functools.lru_cache(maxsize=None)
def experiment(paper, artifact, scale=SCALE):
    """One experiment at a scale, its names and parameters checked against the registries (checks.py);
    loaded, resolved and checked once (every train job's input functions ask for it; callers only read it)."""
    exp = resolve_experiment(load_experiment(experiment_file(paper, artifact)), scale)
    check_experiment(exp, experiment_file(paper, artifact))
    for m, why in exp.get("unavailable", {}).items():  # an optional library is missing: said once, never an error
        if (paper, m, why) not in SAID:
            SAID.add((paper, m, why))
            print(f"xcbench: {paper}: {m} is not run ({why})", file=sys.stderr)
    return exp


SAID = set()  # (paper, method, reason) already printed


def artifacts_of(paper):
    names = [Path(f).stem for f in sorted(glob.glob(f"config/experiments/{paper}/*.yaml"))]
    if not names:
        raise ValueError(f"config: paper {paper!r} has no experiment files in config/experiments/{paper}/")
    wanted = config["artifacts"].get(paper)
    return [a for a in names if wanted is None or a in wanted]


EXPS = {(p, a): experiment(p, a) for p in config["papers"] for a in artifacts_of(p)}
KIND_EXT = {"table": ["md", "csv", "tex", "html"], "figure": ["png", "pdf", "html"]}


def artifact_files(paper, artifact):
    exp = EXPS[(paper, artifact)]
    return [f"{FIG}/{paper}/{artifact}.{e}" for e in KIND_EXT[exp["render"]["kind"]]]


def run_metrics(paper, artifact, scale=SCALE):
    exp = experiment(paper, artifact, scale)
    paths = []
    for d, m, s in expected_runs(exp):
        owner, key = run_location(exp, d, m, s)  # its own run, or the identical one another artifact trains
        paths.append(f"{RESULTS}/{scale}/{paper}/{owner}/{d}/{key}/seed{s}/metrics.json")
    return paths


def render_outputs(kind):
    """The files of one artifact kind; each artifact's .html page goes into the HTML report."""
    base = f"{FIG}/{{paper}}/{{artifact}}"
    page = report(f"{base}.html", category="{paper}", subcategory=f"{kind}s", labels={"artifact": "{artifact}"})
    if kind == "table":
        return {"md": f"{base}.md", "csv": f"{base}.csv", "tex": f"{base}.tex", "html": page}
    return {"png": report(f"{base}.png", category="{paper}", subcategory="figure images",
                          caption="../report/figure.rst", labels={"artifact": "{artifact}"}),
            "pdf": f"{base}.pdf", "caption": f"{base}.caption.md", "html": page}


CATALOGUE = load_datasets()


def manual_downloads():
    """Files that no mirror holds and no URL serves (sign-in pages, Drive links), for every dataset this DAG
    will fetch: said in the first lines of any snakemake call, before any job runs."""
    wanted = sorted({d for exp in EXPS.values() for d, _, _ in expected_runs(exp)})
    steps = [s for d in wanted if d in CATALOGUE
             for s in steps_before_fetch(CATALOGUE[d], f"{DATA}/raw/{d}", config["data"]["mirrors"])]
    if steps:
        print(f"xcbench: {len(steps)} file(s) need a manual download before their jobs can run "
              "(a mirror folder is $XCBENCH_MIRROR or one of data.mirrors):\n  " + "\n  ".join(steps), file=sys.stderr)


manual_downloads()


def train_inputs(w):
    """A run's data; its settings enter through `run_spec_hash` (params), not the experiment file, so
    editing notes, captions or literature rows never retrains (run.Run.spec)."""
    out = {"processed": f"{DATA}/processed/{w.dataset}/dataset.npz"}
    features = features_path(experiment(w.paper, w.artifact, w.scale).get("features"), CATALOGUE[w.dataset], DATA)
    if features:
        out["features"] = features
    return out


def run_spec_hash(w):
    return make_run(experiment(w.paper, w.artifact, w.scale), w.dataset, w.method, int(w.seed)).hash


def names_of_kind(kind):
    names = [a for (p, a), e in EXPS.items() if e["render"]["kind"] == kind]
    return "|".join(names) if names else "__none__"


ALL_TARGETS = (
    [f for (p, a) in EXPS for f in artifact_files(p, a)]
    + [f"{FIG}/{p}/claims.md" for p in config["papers"] if Path(f"config/claims/{p}.yaml").exists()]
    + [f"{FIG}/REPORT.md"]
)


onstart:
    write_yaml(f"{RESULTS}/config.resolved.yaml", config)  # the validated config this run used
