"""Read-ahead of lazily generated batches (data/prefetch.py): same values in the same order as
computing them inline, errors at their item, early exit without hanging, and a training run whose
numbers do not depend on the thread count."""

import threading

import numpy as np
import pytest
import torch

from xcbench.data.prefetch import default_workers, read_ahead


@pytest.mark.parametrize("workers", [0, 1, 3])
def test_read_ahead_keeps_order_and_values(workers):
    items = list(range(50))
    slow_first = lambda i: (threading.Event().wait(0.002 * (i % 3 == 0)), i * i)[1]  # noqa: E731
    assert list(read_ahead(slow_first, items, workers)) == [i * i for i in items]


def test_read_ahead_computes_ahead_in_other_threads():
    seen, main = [], threading.get_ident()

    def f(i):
        seen.append((i, threading.get_ident()))
        return i
    g = read_ahead(f, range(20), workers=2, depth=4)
    assert next(g) == 0
    for _ in range(200):                                           # items 1..4 are queued before 1 is asked for
        if len(seen) >= 5:
            break
        threading.Event().wait(0.01)
    assert sorted(i for i, _ in seen) == [0, 1, 2, 3, 4] and all(t != main for _, t in seen)
    assert list(g) == list(range(1, 20))
    assert list(read_ahead(f, [], 2)) == []


def test_read_ahead_raises_at_the_failing_item_and_stops_cleanly():
    def f(i):
        if i == 5:
            raise ValueError("bad item 5")
        return i
    g = read_ahead(f, range(100), workers=2)
    got = [next(g) for _ in range(5)]
    with pytest.raises(ValueError, match="bad item 5"):
        next(g)
    assert got == [0, 1, 2, 3, 4]
    calls = []
    g = read_ahead(lambda i: calls.append(i) or i, range(10**6), workers=2, depth=4)
    next(g)
    g.close()                                                      # no hang, nothing more is computed
    n = len(calls)
    assert n <= 8 and len(calls) == n


def test_default_workers():
    assert default_workers("cpu") == 0 and 1 <= default_workers("cuda") <= 4


def test_lazy_faces_training_is_independent_of_read_ahead(tmp_path, catalogue):
    """A lazy-faces run trained with 0 and 3 read-ahead threads: identical batches, curves and metrics
    (fails if read-ahead reorders batches or pairs rows with another batch's labels)."""
    from conftest import TINY_EXP, train_run

    from xcbench.config import normalise_methods
    from xcbench.data.datasets import prepare
    from xcbench.data.synthetic import generate
    from xcbench.tasks.base import make_task

    entry = catalogue["synthetic-faces-tiny"]
    entry = {**entry, "name": "lazy", "params": {**entry["params"], "lazy": True}}
    generate(entry, tmp_path / "raw")
    prepare(entry, tmp_path / "raw", tmp_path / "l.npz")
    exp = {**TINY_EXP, "datasets": ["lazy"], "model": {"encoder": {"name": "mlp", "hidden": 16, "dropout": 0.1}},
           "task": {"name": "multiclass", "params": {"eval_train_size": 64, "eval_val_size": 64}},
           "train": {**TINY_EXP["train"], "epochs": 2, "batch_size": 32},
           "methods": normalise_methods({"full": {"head": "full_softmax"}})}
    out = {}
    for w in (0, 3):
        task = make_task(exp, entry, str(tmp_path / "l.npz"), None, torch.device("cpu"), 0)
        task.read_ahead = w
        b = list(task.train_batches(32, torch.Generator().manual_seed(1)))
        out[w] = b, train_run(exp, task, "lazy", "full", 0, tmp_path / f"w{w}", torch.device("cpu"))
    (b0, m0), (b3, m3) = out[0], out[3]
    assert len(b0) == len(b3) > 2 and all(torch.equal(u, v) for p, q in zip(b0, b3) for u, v in zip(p, q))
    assert m0["curves"] == m3["curves"] and m0["metrics"] == m3["metrics"]
    assert np.isfinite(m0["metrics"]["ce"])
