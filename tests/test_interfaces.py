"""The loop's interfaces: model selection and early stopping, resume with selection and with an
index-based sampler, the sampler contract (log q constant, aux losses), tied embeddings, per-epoch
head metrics, experiment files that extend others, task params."""

import copy
import csv

import pytest
import torch
from conftest import REPO, train_run

from xcbench.config import ConfigError, load_experiment, normalise_methods, resolve_experiment
from xcbench.io import write_yaml
from xcbench.model import build_model
from xcbench.registry import HEADS, SAMPLERS, TASKS
from xcbench.samplers.base import Sampler
from xcbench.selection import BestEpoch
from xcbench.tasks.base import make_task

DEV = torch.device("cpu")


def _run(tiny_xmc, exp, out, method=None, **kw):
    processed, feats, entry = tiny_xmc
    exp = copy.deepcopy(exp)
    exp["methods"] = normalise_methods(exp["methods"])
    task = make_task(exp, entry, processed, feats, DEV, 0)
    return train_run(exp, task, "synthetic-xmc-tiny", method or next(iter(exp["methods"])), 0, out, DEV, **kw)


def _const(tiny_exp, epochs, select=None):
    exp = copy.deepcopy(tiny_exp)
    exp["train"] = {**exp["train"], "epochs": epochs, "schedule": "constant", "lr": 0.03}
    if select:
        exp["train"]["select"] = select
    return exp


def test_best_epoch_unit_min_and_max():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))

    m = M()
    for mode, vals, best, stop_at in (("min", [3.0, 2.0, 2.5, 2.4, 1.0], 2, 4), ("max", [1.0, 3.0, 2.0, 2.5, 4.0], 2, 4)):
        sel, stopped = BestEpoch("ppl", mode=mode, patience=2), None
        for e, v in enumerate(vals, 1):
            with torch.no_grad():
                m.w.fill_(v)
            if sel.update(e, {"val_ppl": v}, m):
                stopped = e
                break
        assert sel.best_epoch == best and stopped == stop_at
        sel.restore(m)
        assert m.w.item() == vals[best - 1]  # the best epoch's weights, not the last
    with pytest.raises(KeyError, match="val_P@1"):
        BestEpoch("P@1").update(1, {"val_ppl": 1.0}, m)
    with pytest.raises(ValueError, match="min"):
        BestEpoch("ppl", mode="lowest")


@pytest.mark.parametrize("mode", ["max", "min"])
def test_select_tests_the_best_epoch_and_stops_early(tiny_xmc, tiny_exp, tmp_path, mode):
    sel = _run(tiny_xmc, _const(tiny_exp, 6, {"metric": "P@1", "mode": mode, "patience": 2}), tmp_path / "sel")
    curve = sel["curves"]["val_P@1"]
    arg = curve.index((max if mode == "max" else min)(curve))  # the first epoch reaching the optimum
    best = sel["curves"]["epoch"][arg]
    assert sel["best_epoch"] == best and sel["best"]["val_P@1"] == curve[arg]
    # patience 2: the run stops two epochs after its best (or at the last epoch)
    assert sel["epochs"] == min(6, best + 2)
    # the test metrics are those of a run trained for exactly best_epoch epochs (constant lr, same seed)
    ref = _run(tiny_xmc, _const(tiny_exp, best), tmp_path / f"ref{best}")
    assert sel["metrics"] == ref["metrics"]


def test_resume_mid_run_with_early_stopping_is_identical(tiny_xmc, tiny_exp, tmp_path):
    exp = _const(tiny_exp, 6, {"metric": "P@1", "mode": "min", "patience": 3})
    full = _run(tiny_xmc, exp, tmp_path / "full")
    with pytest.raises(KeyboardInterrupt):
        _run(tiny_xmc, exp, tmp_path / "cut", interrupt_after=2)
    resumed = _run(tiny_xmc, exp, tmp_path / "cut")
    assert resumed["best_epoch"] == full["best_epoch"] <= 2  # the best weights came from the checkpoint
    assert resumed["metrics"] == full["metrics"] and resumed["curves"] == full["curves"]


def _sampled(tiny_exp, sampler, **params):
    exp = copy.deepcopy(tiny_exp)
    exp["methods"] = {"s": {"head": "sampled_softmax", "params": {"sampler": sampler, "m": 8, "tau": 5.0, "normalize": True,
                                                                    "sparse_grad": True, **params}}}
    exp["train"] = {**exp["train"], "optimizer": "lazy_adam", "epochs": 3}
    return exp


@pytest.mark.parametrize("sampler, params", [("rff", {"D": 16}), ("midx_rq", {"K": 4}), ("midx_learn_rq", {"K": 4})])
def test_resume_with_an_index_based_sampler_is_identical(tiny_xmc, tiny_exp, tmp_path, sampler, params):
    """A kernel tree (rebuilt at each epoch start), MIDX (codebooks in buffers, warm-started k-means) and
    learnable MIDX (codewords and their Adam moments in buffers, a step every batch)."""
    exp = _sampled(tiny_exp, sampler, sampler_params=params)
    full = _run(tiny_xmc, exp, tmp_path / "full")
    with pytest.raises(KeyboardInterrupt):
        _run(tiny_xmc, exp, tmp_path / "cut", interrupt_after=1)
    resumed = _run(tiny_xmc, exp, tmp_path / "cut")
    assert resumed["metrics"] == full["metrics"] and resumed["curves"] == full["curves"]


class Learnable(Sampler):
    """A trainable proposal for the tests: q = softmax(t); its own step shrinks t by 10% (aux loss |t|^2).
    t requires grad, as learnable MIDX codewords do, so log q would carry a gradient if the head used it."""

    def __init__(self, n_classes: int) -> None:
        super().__init__(n_classes)
        self.register_buffer("t", torch.linspace(-1, 1, n_classes).requires_grad_())

    def sample(self, h, m, gen):
        ids = torch.multinomial(torch.softmax(self.t.detach(), 0), h.shape[0] * m, True, generator=gen)
        ids = ids.view(h.shape[0], m)
        return ids, self.log_prob(h, ids)

    def log_prob(self, h, ids):
        return torch.log_softmax(self.t, 0)[ids]  # depends on t: the head must not differentiate it

    def fit_step(self, h, class_emb):
        with torch.no_grad():
            loss = self.t.square().sum().item()
            self.t.mul_(0.9)
        return loss


def _learnable_head():
    head = HEADS.get("sampled_softmax")(4, 30, torch.Generator().manual_seed(0), m=5)
    head.sampler = Learnable(30)
    return head


def test_log_q_carries_no_gradient_and_the_proposal_trains_apart():
    """The head's loss is the sampled softmax alone, with log q a constant; the proposal takes its own
    step inside it and its loss is logged beside (loss_parts), never added to what the model's
    optimizer minimises."""
    h = torch.randn(6, 4, generator=torch.Generator().manual_seed(1))
    y = torch.randint(0, 30, (6,), generator=torch.Generator().manual_seed(2))
    head = _learnable_head()
    t0 = head.sampler.t.clone()
    loss = head.loss(h, y, None, torch.Generator().manual_seed(3))
    assert loss.item() == pytest.approx(head.loss_parts["main"], rel=1e-6)
    assert head.loss_parts["aux"] == pytest.approx(t0.square().sum().item(), rel=1e-6)
    assert torch.allclose(head.sampler.t, 0.9 * t0)  # one step of its own
    loss.backward()
    assert head.sampler.t.grad is None  # log q entered the loss detached
    assert head.E.grad is not None and head.E.grad.abs().sum() > 0


def test_loss_parts_and_head_metrics_land_in_history(tiny_xmc, tiny_exp, tmp_path):
    SAMPLERS.register("_test_learnable")(Learnable)
    try:
        m = _run(tiny_xmc, _sampled(tiny_exp, "_test_learnable"), tmp_path / "aux")
    finally:
        SAMPLERS._entries.pop("_test_learnable")
    rows = list(csv.DictReader(open(tmp_path / "aux" / "history.csv")))
    for r in rows:
        main, aux = float(r["train_loss_main"]), float(r["train_loss_aux"])
        assert float(r["train_loss"]) == pytest.approx(main, rel=1e-5) and aux > 0
    assert len(m["curves"]["train_loss_aux"]) == 3
    exp = copy.deepcopy(tiny_exp)
    exp["methods"] = {"u": {"head": "uniform_sparse", "params": {"fan_in": 8, "rewire_interval": 0}}}
    exp["train"] = {**exp["train"], "lr": 0.05, "schedule": "constant"}  # fits fast: fewer labels back-propagate
    m = _run(tiny_xmc, exp, tmp_path / "sparse")
    rows = list(csv.DictReader(open(tmp_path / "sparse" / "history.csv")))
    shares = [float(r["backprop_label_share"]) for r in rows]
    assert len(shares) == 3 and all(0 < s <= 1 for s in shares) and m["curves"]["backprop_label_share"] == shares
    # per epoch, not cumulative: every epoch sees the same number of labels, so the run's share is their mean
    assert m["head"]["backprop_label_share"] == pytest.approx(sum(shares) / 3, rel=1e-9) and shares[0] != shares[-1]


def test_tied_embeddings_share_storage_and_train_as_one():
    cfg = {"encoder": {"name": "lstm_lm", "emb": 8, "hidden": 8, "layers": 1}, "tie_embeddings": True}
    model = build_model(cfg, "sampled_softmax", {"m": 4, "sparse_grad": True}, 20, 20, 0)
    assert model.encoder.tokens.weight is model.head.E
    assert model.encoder.tokens.weight.data_ptr() == model.head.E.data_ptr()
    assert sum(p is model.head.E for p in model.parameters()) == 1
    x = torch.randint(0, 20, (3, 5), generator=torch.Generator().manual_seed(0))
    model.loss(x, x.reshape(-1), None, torch.Generator().manual_seed(1)).backward()
    g = model.head.E.grad.coalesce().to_dense() if model.head.E.grad.is_sparse else model.head.E.grad
    assert g[x.unique()].abs().sum(1).min() > 0  # every input token's row gets the encoder's gradient
    assert model.embed(x).shape == (3, 8)
    untied = build_model({**cfg, "tie_embeddings": False}, "sampled_softmax", {"m": 4}, 20, 20, 0)
    assert untied.encoder.tokens.weight is not untied.head.E
    with pytest.raises(ConfigError, match="embedding size"):
        build_model({"encoder": {"name": "lstm_lm", "emb": 6, "hidden": 8}, "tie_embeddings": True},
                    "sampled_softmax", {}, 20, 20, 0)
    with pytest.raises(ConfigError, match="no embedding table"):
        build_model({"encoder": {"name": "mlp", "hidden": 8}, "tie_embeddings": True}, "full_softmax", {}, 20, 20, 0)


def test_extends_merges_a_variant_onto_its_parent(tmp_path):
    parent = {"paper": "p", "artifact": "a", "title": "A", "task": {"name": "xmc", "params": {"val_frac": 0.2}},
              "render": {"kind": "table", "renderer": "metric_table"}, "datasets": ["d"], "seeds": [0],
              "methods": {"m": {"head": "full_softmax"}}, "train": {"epochs": 2, "batch_size": 4, "lr": 0.1},
              "features": {"extractor": "tfidf_svd", "dim": 64},
              "scales": {"quick": {"train": {"epochs": 5}}}}
    write_yaml(tmp_path / "a.yaml", parent)
    write_yaml(tmp_path / "b.yaml", {"paper": "p", "artifact": "b", "title": "B", "extends": "a",
                                     "features": {"extractor": "label_svd"}, "task": {"params": {"split_seed": 3}},
                                     "scales": {"quick": {"train": {"lr": 0.5}}}})
    b = resolve_experiment(load_experiment(tmp_path / "b.yaml"), "quick")
    assert b["artifact"] == "b" and b["title"] == "B" and b["methods"] == {"m": {"head": "full_softmax"}}
    assert b["features"] == {"extractor": "label_svd", "dim": 64}
    assert b["train"] == {"epochs": 5, "batch_size": 4, "lr": 0.5}
    assert b["task"] == {"name": "xmc", "params": {"val_frac": 0.2, "split_seed": 3}}
    write_yaml(tmp_path / "c.yaml", {"paper": "p", "artifact": "c", "title": "C", "extends": "c"})
    with pytest.raises(ConfigError, match="loops"):
        load_experiment(tmp_path / "c.yaml")
    write_yaml(tmp_path / "d.yaml", {"paper": "p", "artifact": "d", "title": "D", "extends": "nope"})
    with pytest.raises(ConfigError, match="nope.yaml"):
        load_experiment(tmp_path / "d.yaml")


def test_a_variants_render_layers_unless_it_names_a_renderer(tmp_path):
    """A variant's `render` without a renderer keeps the parent's layout (its literature list replaces the
    parent's); one with a renderer is a rendering of its own; a file left without renderer or kind is refused."""
    parent = {"paper": "p", "artifact": "a", "title": "A", "task": "xmc", "datasets": ["d"], "seeds": [0],
              "methods": {"m": {"head": "full_softmax"}}, "train": {"epochs": 1},
              "render": {"kind": "table", "renderer": "metric_table", "column_key": "encoder",
                         "literature": [{"method": "M", "values": {"d": 1.0}}, {"method": "N", "values": {"d": 2.0}}]}}
    write_yaml(tmp_path / "a.yaml", parent)
    variant = {"paper": "p", "artifact": "b", "title": "B", "extends": "a"}
    write_yaml(tmp_path / "b.yaml", {**variant, "render": {"literature": [{"method": "N", "values": {"d": 2.0}}]}})
    r = resolve_experiment(load_experiment(tmp_path / "b.yaml"), "paper")["render"]
    assert r == {"kind": "table", "renderer": "metric_table", "column_key": "encoder",
                 "literature": [{"method": "N", "values": {"d": 2.0}}]}
    write_yaml(tmp_path / "b.yaml", {**variant, "render": {"kind": "figure", "renderer": "sweep", "y": "ppl"}})
    assert resolve_experiment(load_experiment(tmp_path / "b.yaml"), "paper")["render"] == \
        {"kind": "figure", "renderer": "sweep", "y": "ppl"}  # no column_key or literature leaks in
    write_yaml(tmp_path / "a.yaml", {**parent, "render": {"renderer": "metric_table"}})
    with pytest.raises(ConfigError, match=r"a\.yaml: render needs `kind`"):
        load_experiment(tmp_path / "b.yaml")


@pytest.mark.parametrize("table", ["table1", "table2", "table3"])
def test_cascade_tables_differ_from_their_parents_only_in_features_and_text(table):
    d = REPO / "config" / "experiments" / "sparse"
    for scale in ("tiny", "quick", "paper"):
        a = resolve_experiment(load_experiment(d / f"{table}.yaml"), scale)
        b = resolve_experiment(load_experiment(d / f"{table}_cascade.yaml"), scale)
        differ = {k for k in set(a) | set(b) if a.get(k) != b.get(k)}
        assert differ == {"artifact", "title", "notes", "features", "extends", "source"}
        assert b["features"]["extractor"] == "label_svd"


@pytest.mark.parametrize("name", TASKS.names())
def test_every_task_checks_its_params(name):
    cls = TASKS.get(name)
    defaults = cls.parse_params({}, "x.yaml")
    assert set(defaults) == set(cls.PARAMS)
    with pytest.raises(ConfigError, match=r"x.yaml: task .* has no params \['bogus'\]"):
        cls.parse_params({"bogus": 1}, "x.yaml")
    for k, p in cls.PARAMS.items():
        with pytest.raises(ConfigError, match=f"{k!r} must be ({p.type.__name__}|one of)"):
            cls.parse_params({k: "not a value"}, "x.yaml")


@pytest.mark.parametrize("sparse_grad", [True, False])
def test_a_tied_tables_input_rows_reach_the_samplers_index_after_a_step(sparse_grad):
    """With tied embeddings a step moves the input tokens' rows too; a kernel tree refreshed for the
    head's own rows only (positives, draws) would keep their old embeddings until the next epoch."""
    import copy

    from xcbench.step import train_step

    n, g = 200, torch.Generator().manual_seed(0)
    cfg = {"encoder": {"name": "lstm_lm", "emb": 8, "hidden": 8, "layers": 1}, "tie_embeddings": True}
    model = build_model(cfg, "sampled_softmax", {"m": 2, "sampler": "rff", "sampler_params": {"D": 16},
                                                 "sparse_grad": sparse_grad}, n, n, 0)
    model.head.on_epoch_start(0, torch.Generator().manual_seed(1))
    x = torch.randint(0, n // 2, (3, 5), generator=g)           # inputs: the first half of the classes
    y = torch.randint(n // 2, n, (15,), generator=g)            # targets: the second half
    train_step(model, torch.optim.SGD(model.parameters(), lr=1.0), x, y, None, torch.Generator().manual_seed(2), 0)
    fresh = copy.deepcopy(model.head.sampler)
    fresh.update(model.head._unit(model.head.E.detach()), None)  # same random features, every row current
    h = torch.nn.functional.normalize(torch.randn(4, 8, generator=g), dim=1)
    all_ids = torch.arange(n).expand(4, n)
    lp, ref = model.head.sampler.log_prob(h, all_ids), fresh.log_prob(h, all_ids)
    # probabilities, not logs: classes far from h have log q near -100, where float32 tree sums round
    assert torch.allclose(lp.exp(), ref.exp(), atol=1e-6)  # 6e-8 here; 1.3e-3 with the input rows left stale
