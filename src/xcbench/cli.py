"""`python -m xcbench <verb>`: one verb per Snakemake rule, usable by hand too.

  fetch     obtain a dataset's raw files (mirrors, then URLs; synthetic ones are generated)
  prepare   raw files -> data/processed/<ds>/dataset.npz
  features  prepared data -> data/features/<ds>/<extractor><dim>.pt
  train     one (experiment, dataset, method, seed) -> results/.../metrics.json
  render    an artifact's table or figure from cached results
  claims    a paper's claims file -> figures/<paper>/claims.md
  report    claims + artifacts -> figures/REPORT.md
  rerender  every table, figure, claims file and REPORT of a kept results tree (reference/<scale>-<machine>)
  keep      copy finished runs of results/ into a kept tree (reference/<scale>), refusing stale or cut ones
  status    the checkpointed runs of a results tree: epochs done, hours trained and left, last save
  explain   a run's resolved settings, each with the file and line that set it
  check     every experiment and claims file resolves
  list      the registered names of every family
"""

from __future__ import annotations

import argparse
import logging
import sys

from xcbench.config import ConfigError
from xcbench.verbs import (
    cmd_check,
    cmd_claims,
    cmd_explain,
    cmd_features,
    cmd_fetch,
    cmd_keep,
    cmd_list,
    cmd_prepare,
    cmd_render,
    cmd_report,
    cmd_rerender,
    cmd_status,
    cmd_train,
)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="xcbench", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="verb", required=True)

    def verb(name, fn, *args):
        s = sub.add_parser(name, help=fn.__doc__, description=fn.__doc__)
        s.set_defaults(fn=fn)
        s.add_argument("--datasets", default=None, help="dataset catalogue (default: ./config/datasets.yaml, else the packaged one)")
        for a in args:
            s.add_argument(*a[0], **a[1])
        return s

    def opt(flag, help, **kw):
        return ([flag], {"help": help, **kw})

    D = opt("--dataset", "dataset name, a key of the catalogue (config/datasets.yaml)", required=True)
    O = opt("--out", "output path (a folder for fetch and train, a file stem for render)", required=True)
    EXP = opt("--experiment", "experiment file, config/experiments/<paper>/<artifact>.yaml", required=True)
    SCALE = opt("--scale", "tiny | quick | paper (default %(default)s)", default="quick")
    RES = opt("--results", "results root holding <scale>/<paper>/... (default %(default)s)", default="results")
    PROC = opt("--processed", "prepared dataset, data/processed/<dataset>/dataset.npz", required=True)
    SEED = opt("--seed", "random seed (default %(default)s)", type=int, default=0)
    verb("fetch", cmd_fetch, D, O, opt("--mirror", "mirror folder (repeatable); $XCBENCH_MIRROR comes first",
                                       action="append", default=[]))
    verb("prepare", cmd_prepare, D, O, opt("--raw", "folder with the fetched raw files (data/raw/<dataset>)", required=True))
    verb("features", cmd_features, D, O, PROC, opt("--extractor", "feature extractor (FEATURES registry, e.g. tfidf_svd)",
                                                   required=True),
         opt("--dim", "feature dimension (default %(default)s)", type=int, default=512), SEED,
         opt("--threads", "torch intra-op and numpy BLAS threads (default: the libraries' own, all cores; the features' "
             "last bits depend on the BLAS threads, so the DAG passes its rule's 1)", type=int, default=None))
    verb("train", cmd_train, D, O, EXP, SCALE, opt("--method", "method key of the experiment's `methods:`", required=True),
         SEED, PROC, opt("--features", "cached features, data/features/<dataset>/<extractor><dim>.pt, where the "
                         "experiment uses fixed features", default=None),
         opt("--device", "auto (CUDA when present) | cpu | cuda (default %(default)s)", default="auto",
             choices=["auto", "cpu", "cuda"]),
         opt("--threads", "torch intra-op threads (default: torch's own, all cores); the DAG passes its rule's "
             "threads", type=int, default=None),
         opt("--read-ahead", "threads generating lazily made training batches ahead of the step (synthetic faces); "
             "the results do not depend on it (default: 0 on the CPU, up to 4 with a GPU)", type=int, default=None),
         opt("--finish", "end a run cut short (time limit) at its last checkpointed epoch: test the selected epoch "
             "and write the result; metrics.json says so. The checkpoint stays: the same command without --finish goes on "
             "later", action="store_true"),
         opt("--stop-after", "stop once this many epochs are trained (counting those of a resumed run), keeping the "
             "checkpoint as a time limit would: `--finish` then tests it (a budgeted run, e.g. one epoch of a "
             "30-epoch setting); the results do not depend on it", type=int, default=None),
         opt("--checkpoint-minutes", "also checkpoint inside an epoch every this many minutes, for heads that can "
             "resume there (full softmax, OvA, selective softmax); 0: at epoch ends only (default %(default)s)", type=float, default=30.0),
         opt("--no-reuse", "train even when a finished run of identical settings exists under another name in the "
             "same results tree (by default it is copied: runs are deterministic)", action="store_true"))
    verb("render", cmd_render, O, EXP, SCALE, RES)
    verb("claims", cmd_claims, O, opt("--claims", "claims file, config/claims/<paper>.yaml", required=True),
         opt("--experiments", "folder of the paper's experiment files", required=True), SCALE, RES)
    verb("report", cmd_report, O, opt("--claims", "claims.json files to gather", nargs="*", default=[]),
         opt("--artifacts", "rendered tables (.md) and figures (.png) to gather", nargs="*", default=[]))
    verb("rerender", cmd_rerender, opt("--root", "folder holding results/ (e.g. reference/paper)", required=True),
         opt("--scale", "scale of the kept results (default %(default)s)", default="paper"),
         opt("--readme", "also write the claims into this file's region for the scale (README.md: the paper "
             "scale's headline rows and counts, another scale's counts)", default=None))
    verb("keep", cmd_keep, opt("--root", "kept tree to copy into (e.g. reference/paper)", required=True),
         (["runs"], {"nargs": "+", "help": "run folders, results/<scale>/<paper>/<artifact>/<dataset>/<method>/seed<k>"}))
    verb("status", cmd_status, opt("--results", "results tree (default %(default)s)", default="results"),
         opt("--scale", "only this scale's runs (results/<scale>)", default=None))
    verb("explain", cmd_explain, EXP, SCALE, D, opt("--method", "method key of the experiment", required=True), SEED)
    verb("check", cmd_check, opt("--experiments", "experiments folder (default %(default)s)", default="config/experiments"),
         opt("--claims", "claims folder (default %(default)s)", default="config/claims"))
    verb("list", cmd_list, (["-v", "--verbose"], {"action": "store_true", "help": "every entry with its parameters, "
                                                   "defaults and summary, as markdown (docs/methods.md)"}))
    return p


def configure_logging() -> None:
    """xcbench's own progress lines (logger `xcbench.*`) at INFO, other libraries' at WARNING: with the root
    logger at INFO, matplotlib's PDF backend wrote ~60 lines of fontTools glyph subsetting into every figure's log."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s", datefmt="%H:%M:%S", stream=sys.stderr)
    logging.getLogger("xcbench").setLevel(logging.INFO)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    configure_logging()
    try:
        args.fn(args)
    except KeyboardInterrupt:
        print("interrupted; rerun the same command to resume", file=sys.stderr)
        return 130
    except (ConfigError, KeyError, ValueError, RuntimeError, OSError) as e:
        print(f"xcbench {args.verb}: error: {e}", file=sys.stderr)
        return 1
    return 0
