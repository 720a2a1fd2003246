"""Shared fixtures: tiny synthetic datasets prepared into a temporary folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from xcbench.catalogue import load_datasets

REPO = Path(__file__).resolve().parents[1]


def load_benchmark(name: str, folder: str = "benchmarks"):
    """<folder>/<name>.py (benchmarks/ or a studies/<topic>/ folder) as a module (the scripts are not a package),
    for tests of their pure parts; with its folder on sys.path, as when the script runs, so that its imports of
    its neighbours resolve."""
    import importlib.util
    import sys

    if str(REPO / folder) not in sys.path:
        sys.path.insert(0, str(REPO / folder))

    spec = importlib.util.spec_from_file_location(name, REPO / folder / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def catalogue():
    return load_datasets()


@pytest.fixture(scope="session")
def prepared(tmp_path_factory, catalogue):
    """prepared(name) -> (dataset.npz path, entry): a synthetic dataset generated and prepared once."""
    from xcbench.data.datasets import prepare
    from xcbench.data.synthetic import generate

    cache = {}

    def make(name: str):
        if name not in cache:
            root = tmp_path_factory.mktemp(name)
            entry = catalogue[name]
            generate(entry, root / "raw")
            prepare(entry, root / "raw", root / "dataset.npz")
            cache[name] = (root / "dataset.npz", entry)
        return cache[name]

    return make


@pytest.fixture(scope="session")
def tiny_xmc(prepared):
    """synthetic-xmc-tiny generated, prepared and featurised: (processed.npz, features.pt, entry)."""
    import torch

    from xcbench.data.datasets import load_npz
    from xcbench.features.tfidf_svd import TfidfSVD

    processed, entry = prepared("synthetic-xmc-tiny")
    arrays, meta = load_npz(processed)
    feats, fmeta = TfidfSVD(dim=16).extract(arrays, meta)
    torch.save({**feats, "meta": fmeta}, processed.parent / "feats.pt")
    return processed, processed.parent / "feats.pt", entry


TINY_EXP = {
    "paper": "test", "artifact": "unit", "task": {"name": "xmc", "params": {"val_frac": 0.1, "split_seed": 0}},
    "title": "t", "scale": "tiny",
    "render": {"kind": "table", "renderer": "metric_table"},
    "datasets": ["synthetic-xmc-tiny"], "seeds": [0],
    "methods": {"full_softmax": {"head": "full_softmax"}},
    "model": {"encoder": {"name": "mlp", "hidden": 16, "dropout": 0.1}},
    "train": {"epochs": 3, "batch_size": 64, "lr": 0.01, "optimizer": "adam", "schedule": "cosine"},
}


@pytest.fixture
def tiny_exp():
    import copy

    return copy.deepcopy(TINY_EXP)


def make_test_task(name: str, params: dict, entry, processed, features, device="cpu", seed: int = 0):
    """A registered task with `params` checked as an experiment's `task: {name, params}` would be."""
    import torch

    from xcbench.registry import TASKS

    cls = TASKS.get(name)
    return cls(cls.parse_params(params, "test"), entry, str(processed), features, torch.device(device), seed)


def train_run(exp: dict, task, dataset: str, method: str, seed: int, out, device, **options) -> dict:
    """One run's job as `xcbench train` does it (run.make_run, train.execute); `options` are FitOptions."""
    from xcbench.run import make_run
    from xcbench.train import FitOptions, execute

    return execute(make_run(exp, dataset, method, seed), task, out, device, FitOptions(**options))
