"""Sequential recommendation: the task's split, windows and ranking metrics against brute force; the
SASRec / GRU4Rec encoders are causal and learn a deterministic sequence."""

import math

import numpy as np
import pytest
import torch

from xcbench.data.datasets import save_npz
from xcbench.features.seqrec import GRU4Rec, SASRec
from xcbench.tasks.seqrec import SeqRecTask, split_points


def _task(tmp_path, seqs, n, **params):
    lengths = [len(s) for s in seqs]
    save_npz(tmp_path / "d.npz", {"seq_items": np.concatenate(seqs).astype(np.int64),
                                  "seq_indptr": np.concatenate([[0], np.cumsum(lengths)])},
             {"n_classes": n, "time_ordered": True})
    p = SeqRecTask.parse_params(params)
    return SeqRecTask(p, {"name": "toy"}, str(tmp_path / "d.npz"), None, torch.device("cpu"), 0)


def test_split_windows_and_padding(tmp_path):
    rng = np.random.default_rng(0)
    seqs = [rng.integers(0, 12, L) for L in (2, 10, 23, 41)]
    task = _task(tmp_path, seqs, 12, max_len=5)
    assert split_points(2) == (2, 2) and split_points(10) == (8, 9) and split_points(41) == (33, 37)
    # every training item but a user's first is a target exactly once; padding is never a target
    x, y = task.x_train, task.y_train
    assert ((x < 0) <= (y < 0)).all() and ((y >= 0) <= (x >= 0)).all()
    n_targets = sum(split_points(len(s))[0] - 1 for s in seqs)
    assert int((y >= 0).sum()) == n_targets
    # each target is the item right after its input position in the user's sequence
    assert set(map(tuple, task.queries["val"].tolist())) == {(1, 8), (2, 19), (2, 20), (3, 33), (3, 34), (3, 35), (3, 36)}


class _Fixed(torch.nn.Module):
    """A model whose 'embedding' is the query's row number and whose scores are a fixed matrix."""

    def __init__(self, S):
        super().__init__()
        self.S, self.calls = S, 0
        self.head = self

    def embed(self, x):
        r = torch.arange(self.calls, self.calls + len(x))
        self.calls += len(x)
        return r

    def scores(self, r):
        return self.S[r]


def test_metrics_equal_a_brute_force_ranking_with_history_excluded(tmp_path):
    rng = np.random.default_rng(1)
    n = 30
    seqs = [rng.integers(0, n, L) for L in (12, 20, 31, 9)]
    seqs[1][-1] = seqs[1][3]                     # a test target that repeats a history item stays rankable
    task = _task(tmp_path, seqs, n, max_len=4, cutoffs=[3, 10])
    q = task.queries["test"]
    S = torch.from_numpy(rng.standard_normal((len(q), n)))
    got = task.evaluate(_Fixed(S), "test")
    nd = {3: [], 10: []}
    rc = {3: [], 10: []}
    for i, (u, p) in enumerate(q):
        target = seqs[u][p]
        seen = set(seqs[u][:p].tolist()) - {target}
        ranked = [j for j in np.argsort(-S[i].numpy(), kind="stable") if j not in seen]
        rank = ranked.index(target)
        for k in (3, 10):
            nd[k].append(1 / math.log2(rank + 2) if rank < k else 0.0)
            rc[k].append(float(rank < k))
    for k in (3, 10):
        assert got[f"ndcg@{k}"] == pytest.approx(np.mean(nd[k]), abs=1e-12)
        assert got[f"recall@{k}"] == pytest.approx(np.mean(rc[k]), abs=1e-12)
    # the input window is the last max_len items before the target, left-padded
    x, y, mask = task.query_batch(np.array([[3, 1], [2, 29]]))
    assert x[0].tolist() == [-1, -1, -1, int(seqs[3][0])] and x[1].tolist() == seqs[2][25:29].tolist()
    assert not mask[0, y[0]] and mask[1].sum() == len(set(seqs[2][:29].tolist()) - {int(y[1])})


@pytest.mark.parametrize("cls", [SASRec, GRU4Rec])
def test_encoders_are_causal(cls):
    enc = cls(40, torch.Generator().manual_seed(0), dim=16).eval()
    x = torch.tensor([[-1, -1, 3, 7, 9, 2], [5, 1, 8, 8, 0, 39]])
    h = enc(x).view(2, 6, 16)
    x2 = x.clone()
    x2[:, 4:] = torch.tensor([[11, 12], [13, 14]])          # change the later items
    h2 = enc(x2).view(2, 6, 16)
    assert torch.allclose(h[:, :4], h2[:, :4], atol=1e-6) and not torch.allclose(h[:, 4:], h2[:, 4:])
    assert torch.isfinite(h).all()
    assert torch.allclose(enc.embed(x), h[:, -1])


@pytest.mark.parametrize("encoder", ["sasrec", "gru4rec"])
def test_full_softmax_learns_a_deterministic_sequence(tmp_path, encoder):
    """Item i is always followed by i + 1 (mod n): NDCG@10 reaches 1."""
    from xcbench.model import build_model
    from xcbench.step import make_optimizer, train_step

    n = 30
    rng = np.random.default_rng(2)
    seqs = [(rng.integers(0, n) + np.arange(15)) % n for _ in range(60)]
    task = _task(tmp_path, seqs, n, max_len=6, cutoffs=[1, 10])
    model = build_model({"encoder": {"name": encoder, "dim": 32, "dropout": 0.0}, "tie_embeddings": True},
                        "full_softmax", {}, task.in_dim, n, 0)
    opt = make_optimizer(model, {"optimizer": "adam", "lr": 0.01})
    gen, lg = torch.Generator().manual_seed(0), torch.Generator().manual_seed(1)
    for epoch in range(40):
        model.train()
        for step, (x, y, idx) in enumerate(task.train_batches(32, gen)):
            train_step(model, opt, x, y, idx, lg, step + 1)
    model.eval()
    got = task.evaluate(model, "test")
    assert got["ndcg@10"] == pytest.approx(1.0) and got["recall@1"] == 1.0
    assert model.encoder.items.weight is model.head.class_embeddings()   # tied item table
