"""What each verb of `python -m xcbench` does (cli.py parses the arguments): one function per verb, each a thin
call into the module that does the work, importing it late so that a job loads only what its verb needs.
"""

from __future__ import annotations

import os
from pathlib import Path

from xcbench.blas import pin_numpy_blas
from xcbench.catalogue import dataset_entry, load_datasets
from xcbench.config import ConfigError, load_experiment, resolve_experiment


def _entry(args) -> dict:
    return dataset_entry(args.dataset, load_datasets(args.datasets))


def cmd_fetch(args) -> None:
    """Copy or download a dataset's raw files (mirrors first, then its URLs) and verify their sha256."""
    from xcbench.data.fetch import fetch_dataset
    from xcbench.data.synthetic import generate
    from xcbench.io import write_json

    entry = _entry(args)
    if "generator" in entry:
        files = generate(entry, args.out)
        write_json(Path(args.out) / "manifest.json", {"dataset": entry["name"], "generated": files,
                                                      "generator": entry["generator"], "params": entry["params"]})
    else:
        if not entry.get("files"):
            raise ConfigError(f"dataset {entry['name']!r} has no files to fetch; "
                              f"use its stand-in {entry.get('stand_in', '(none listed)')}")
        fetch_dataset(entry, args.out, args.mirror)


def cmd_prepare(args) -> None:
    """Read a dataset's raw files into one prepared .npz (splits, labels, vocabulary)."""
    pin_numpy_blas()  # synthetic sets are drawn with numpy products
    from xcbench.data.datasets import prepare

    meta = prepare(_entry(args), args.raw, args.out)
    print({k: v for k, v in meta.items() if k != "vocab"})


def cmd_features(args) -> None:
    """Extract fixed features (e.g. tf-idf + truncated SVD) from a prepared dataset and cache them."""
    pin_numpy_blas(args.threads)  # before numpy loads (below): the SVD's last bits move with BLAS threads and kernels
    from xcbench.runtime import configure_process

    configure_process(args.threads)
    from xcbench.data.datasets import load_npz
    from xcbench.io import torch_save
    from xcbench.registry import FEATURES

    arrays, meta = load_npz(args.processed)
    feats, fmeta = FEATURES.get(args.extractor)(dim=args.dim, seed=args.seed).extract(arrays, meta)
    torch_save(args.out, {**feats, "meta": {**fmeta, "dataset": args.dataset}})
    print({k: tuple(v.shape) for k, v in feats.items()}, fmeta)


def cmd_train(args) -> None:
    """Train (or measure) one run: an experiment's method on a dataset with a seed; resumes from its checkpoint."""
    # numpy's BLAS on one thread unless the environment says otherwise (read when numpy loads, below): a train
    # job's numpy work is the lazy faces' two small products per batch, which BLAS threads make no faster and
    # read-ahead threads oversubscribe (16 cores: 4 read-ahead threads 4.0 ms a batch with the default BLAS
    # threads, 1.8 ms with one; inline 3.8 and 3.6: studies/read_ahead/out/read_ahead_h100_machine.md). Same values.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    pin_numpy_blas()  # the faces' products: the same bits on every x86 CPU
    from xcbench.checkpoint import StopAfter
    from xcbench.device import pick_device
    from xcbench.records import input_digests
    from xcbench.reuse import copy_run, find_identical
    from xcbench.run import job_run
    from xcbench.runtime import configure_process, mark_rss
    from xcbench.tasks.base import task_of
    from xcbench.train import FitOptions, execute

    configure_process(args.threads)
    mark_rss()  # memory.peak_rss_above_start_bytes counts from here, after the imports
    run = job_run(args.experiment, resolve_experiment(load_experiment(args.experiment), args.scale),
                  args.dataset, args.method, args.seed)
    src = None if args.no_reuse else find_identical(run, args.out)
    if src is not None:  # the same settings finished under another name (reuse.py): the same numbers
        where = copy_run(run, src, args.out)["reused_from"]
        print(f"{run.label} seed {run.seed}: copied from {where} (identical settings; --no-reuse trains it anyway)")
        return
    device = pick_device(args.device)
    task = task_of(run, _entry(args), args.processed, args.features, device, source=args.experiment)
    task.read_ahead = args.read_ahead
    task.inputs = input_digests(processed=args.processed, features=args.features)
    options = FitOptions(checkpoint_minutes=args.checkpoint_minutes, finish=args.finish, stop_after=args.stop_after)
    try:
        m = execute(run, task, args.out, device, options)
    except StopAfter as e:  # a pause asked for, not an error
        print(e)
        return
    print({k: round(v, 4) for k, v in m["metrics"].items()})
    rows = "per epoch" if task.trains else "one row per measured value"
    print(f"results: {Path(args.out) / 'metrics.json'} ({rows}: history.csv, settings: config.resolved.yaml)")


def cmd_render(args) -> None:
    """Render one table or figure from cached results only."""
    from xcbench.registry import RENDERERS
    from xcbench.reporting.collect import for_rendering

    exp = for_rendering(args.experiment, args.scale, args.results)
    for p in RENDERERS.get(exp["render"]["renderer"])(exp, args.results, args.out, load_datasets(args.datasets)):
        print("wrote", p)


def cmd_claims(args) -> None:
    """Check a paper's claims against the results and write claims.md / claims.json."""
    from xcbench.reporting.claim_table import bare_verdict
    from xcbench.reporting.claims import write_claims

    res = write_claims(args.claims, args.experiments, args.results, args.scale, args.out)
    print(f"{sum(bare_verdict(r['verdict']) == 'held' for r in res['rows'])}/{len(res['rows'])} claims held")


def cmd_report(args) -> None:
    """Gather every table, figure and claims check into REPORT.md."""
    from xcbench.reporting.report import write_report

    write_report(args.claims, args.artifacts, args.out)


def cmd_keep(args) -> None:
    """Copy finished runs into a kept tree, each where today's experiment files put it, with today's settings."""
    from xcbench.keep import keep

    for dst in keep(args.runs, args.root):
        print("kept", dst)


def cmd_status(args) -> None:
    """Where the checkpointed runs of a results tree stand: epochs done, time trained and left, last save."""
    from xcbench.status import status

    print(status(Path(args.results), args.scale))


def cmd_rerender(args) -> None:
    """Render again, from its cached results alone, every artifact of a results tree that has runs."""
    from xcbench.reporting.rerender import rerender

    rerender(Path(args.root), args.scale, load_datasets(args.datasets), args.readme)


def cmd_explain(args) -> None:
    """Print a run's resolved settings and the file and line that set each value."""
    from xcbench.explain import explain

    print(explain(args.experiment, args.scale, args.dataset, args.method, args.seed), end="")


def cmd_check(args) -> None:
    """Check every experiment and claims file: names, parameters, methods that run nowhere, stale views and claims."""
    from xcbench.checks import check_repository

    errs = check_repository(Path(args.experiments), Path(args.claims))
    if errs:
        raise ConfigError(f"{len(errs)} problem(s):\n  " + "\n  ".join(errs))
    print("xcbench check: every experiment, view and claim resolves")


def cmd_list(args) -> None:
    """List every registered method by family; -v writes the parameter reference (docs/methods.md)."""
    from xcbench.registry import FAMILIES

    if args.verbose:
        from xcbench.reference import methods_reference

        print(methods_reference(), end="")
        return
    for name, reg in FAMILIES.items():
        print(f"{name:11s} {', '.join(reg.names()) or '-'}")
