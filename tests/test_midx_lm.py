"""MIDX language-model pieces: the Transformer encoder, named encoders, per-dataset task params,
tables grouped by encoder, sweep figures, claims against several runs, and the proposal KL."""

import math

import pytest
import torch

from xcbench.config import ConfigError, load_experiment, resolve_experiment
from xcbench.features.transformer import PostNormTransformerLM, TransformerLM
from xcbench.heads.sampled_softmax import SampledSoftmax
from xcbench.io import write_json, write_yaml
from xcbench.model import build_model
from xcbench.registry import RENDERERS
from xcbench.reporting.claims import evaluate_claims
from xcbench.reporting.collect import collect
from xcbench.reporting.sweeps import sweep_points
from xcbench.runspec import encoder_config
from xcbench.tasks.base import make_task


def _tf(context=0, cls=TransformerLM, dropout=0.0):
    return cls(50, torch.Generator().manual_seed(0), emb=16, layers=2, heads=2, ff=32, dropout=dropout,
               context=context).eval()


@pytest.mark.parametrize("cls", [TransformerLM, PostNormTransformerLM])
def test_transformer_is_causal(cls):
    """Changing token t changes no output at a position before t, and changes the output at t."""
    enc, g = _tf(cls=cls), torch.Generator().manual_seed(1)
    x = torch.randint(0, 50, (3, 10), generator=g)
    x2 = x.clone()
    x2[:, 6] = (x[:, 6] + 1) % 50
    h, h2 = (enc(z)[0].view(3, 10, 16) for z in (x, x2))
    assert torch.equal(h[:, :6], h2[:, :6]) and not torch.allclose(h[:, 6], h2[:, 6])


def test_transformer_context_state_equals_the_whole_sequence():
    """Chunks read with `context` carried tokens give the same outputs as one pass over the text."""
    enc, x = _tf(context=4), torch.randint(0, 50, (2, 8), generator=torch.Generator().manual_seed(2))
    whole = enc(x)[0].view(2, 8, 16)
    state, parts = None, []
    for s in (0, 4):
        h, state = enc(x[:, s:s + 4], state)
        parts.append(h.view(2, 4, 16))
    assert torch.allclose(torch.cat(parts, 1), whole, atol=1e-5)
    assert _tf()(x[:, :4])[1] is None  # no context: stateless evaluation, as trained


def _post_norm_by_hand(enc, x):
    """The public MIDX code's block written out: z1 = LN(z + MHA(z)), z2 = LN(z1 + W2 gelu(W1 z1 + b1) + b2),
    causal multi-head attention, no final LayerNorm; z = token + position embedding."""
    T = x.shape[1]
    z = enc.tokens(x) + enc.pos(torch.arange(T))                                                # (B, T, e)
    mask = torch.triu(torch.full((T, T), float("-inf")), 1)
    for blk in enc.blocks.layers:
        a = blk.self_attn
        H, e = a.num_heads, z.shape[-1]
        q, k, v = (z @ a.in_proj_weight.T + a.in_proj_bias).split(e, -1)
        q, k, v = (t.view(*t.shape[:2], H, e // H).transpose(1, 2) for t in (q, k, v))          # (B, H, T, e/H)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(e // H) + mask, -1) @ v
        att = att.transpose(1, 2).reshape(z.shape) @ a.out_proj.weight.T + a.out_proj.bias
        z = blk.norm1(z + att)
        ff = torch.nn.functional.gelu(z @ blk.linear1.weight.T + blk.linear1.bias) @ blk.linear2.weight.T + blk.linear2.bias
        z = blk.norm2(z + ff)
    return z.reshape(-1, e)


def test_post_norm_transformer_is_the_reference_block():
    """transformer_lm_post in evaluation equals the post-norm GELU block written by hand; in training it
    drops outputs (the reference's dropout on the encoder output); its init comes from the generator."""
    enc, g = _tf(cls=PostNormTransformerLM), torch.Generator().manual_seed(3)
    x = torch.randint(0, 50, (3, 9), generator=g)
    with torch.no_grad():
        for blk in enc.blocks.layers:  # trained-like LayerNorm gains, so that an extra final LayerNorm shows
            for ln in (blk.norm1, blk.norm2):
                ln.weight.uniform_(0.5, 1.5, generator=g)
                ln.bias.normal_(0.0, 0.3, generator=g)
        assert torch.allclose(enc(x)[0], _post_norm_by_hand(enc, x), atol=1e-5)
    assert torch.count_nonzero(enc.pos.weight) == 0  # positions start at zero, as the reference's
    train = _tf(cls=PostNormTransformerLM, dropout=0.5).train()
    assert (train(x)[0] == 0).float().mean() > 0.3
    again, fresh = _tf(cls=PostNormTransformerLM), _tf(cls=PostNormTransformerLM)
    assert all(torch.equal(p, q) for p, q in zip(fresh.parameters(), again.parameters()))


def test_named_encoders_resolve_and_fail_with_the_names():
    cfg = {"encoder": "T", "encoders": {"T": {"name": "transformer_lm", "emb": 8, "layers": 1, "heads": 2, "ff": 8},
                                        "L": {"name": "lstm_lm", "emb": 8, "hidden": 8, "layers": 1}}}
    assert encoder_config(cfg)["name"] == "transformer_lm"
    m = build_model({**cfg, "encoder": "L"}, "full_softmax", {}, 30, 30, 0)
    assert type(m.encoder).__name__ == "LSTMLM"
    with pytest.raises(ConfigError, match="not among model.encoders"):
        encoder_config({**cfg, "encoder": "GRU"})


def test_per_dataset_task_params_override_the_experiment(prepared):
    processed, entry = prepared("synthetic-lm-tiny")
    exp = {"task": {"name": "lm", "params": {"bptt": 10}}, "per_dataset": {"synthetic-lm-tiny": {"task": {"params": {"bptt": 7}}}}}
    assert make_task(exp, entry, processed, None, torch.device("cpu"), 0, dataset="synthetic-lm-tiny").T == 7
    assert make_task(exp, entry, processed, None, torch.device("cpu"), 0, dataset="other").T == 10


def test_table5_extends_table4_with_its_own_methods():
    t5 = resolve_experiment(load_experiment("config/experiments/midx/table5.yaml"), "paper")
    assert set(t5["methods"]) == {"midx_pq", "midx_rq", "midx_learn_pq", "midx_learn_rq"}  # extends replaced them


def _results(tmp_path, exp, values):
    for (d, m), v in values.items():
        write_json(tmp_path / exp["scale"] / exp["paper"] / exp["artifact"] / d / m / "seed0" / "metrics.json",
                   {"metrics": v})
    return tmp_path


EXP = {"paper": "p", "artifact": "t", "title": "T", "scale": "quick", "datasets": ["d"], "seeds": [0],
       "task": {"name": "lm", "params": {}}, "train": {"epochs": 1, "batch_size": 2, "lr": 0.1},
       "model": {"encoder": "A", "encoders": {"A": {"name": "identity"}, "B": {"name": "identity"}}},
       "methods": {"a_x": {"label": "X", "head": "h"}, "a_y": {"label": "Y", "head": "h", "train": {"lr": 0.2}},
                   "b_x": {"label": "X", "head": "h", "model": {"encoder": "B"}}}}  # distinct settings: runs of
# equal settings would be one run (collect.run_location)


def test_metric_table_groups_columns_by_encoder(tmp_path, catalogue):
    exp = {**EXP, "render": {"kind": "table", "renderer": "metric_table", "percent": False, "column_key": "encoder",
                             "metrics": [{"key": "ppl", "label": "PPL", "digits": 1}],
                             "literature": [{"method": "X", "values": {"d": {"A": 1.5, "B": 2.5}}}]}}
    res = _results(tmp_path, exp, {("d", "a_x"): {"ppl": 10.0}, ("d", "a_y"): {"ppl": 20.0}, ("d", "b_x"): {"ppl": 30.0}})
    RENDERERS.get("metric_table")(exp, str(res), str(tmp_path / "t"), catalogue)
    md = (tmp_path / "t.md").read_text()
    assert "| Method | d A PPL | d B PPL |" in md
    assert "| X | 10.0 | 30.0 |" in md and "| Y | 20.0 | – |" in md and "| X (published) | 1.5 | 2.5 |" in md


def test_sweep_points_follow_x_and_series(tmp_path):
    exp = {**EXP, "render": {"kind": "figure", "renderer": "sweep", "y": "ppl"},
           "methods": {"p8": {"series": "pq", "x": 8}, "p32": {"series": "pq", "x": 32}, "r8": {"series": "rq", "x": 8}}}
    res = _results(tmp_path, exp, {("d", "p32"): {"ppl": 5.0}, ("d", "p8"): {"ppl": 7.0}, ("d", "r8"): {"ppl": 6.0}})
    assert sweep_points(exp, collect(res, exp), [["d"]]) == [{"pq": [(8.0, 7.0), (32.0, 5.0)], "rq": [(8.0, 6.0)]}]


def test_claims_against_the_best_of_several_runs_why_not_and_caveat(tmp_path):
    exp = {k: v for k, v in EXP.items() if k != "scale"}
    exp["render"] = {"kind": "table", "renderer": "metric_table"}
    write_yaml(tmp_path / "exps" / "t.yaml", exp)
    res = _results(tmp_path, EXP, {("d", "a_x"): {"ppl": 10.0}, ("d", "a_y"): {"ppl": 20.0}, ("d", "b_x"): {"ppl": 8.0}})
    claims = {"paper": "p", "claims": [
        {"id": "below_all", "text": "X below the others", "artifact": "t", "left": {"method": "a_x", "metric": "ppl"},
         "op": "<", "right": {"methods": ["a_y", "b_x"], "reduce": "min", "metric": "ppl"},
         "why_not": {"quick": "too short"}},
        {"id": "below_worst", "text": "X below the worst", "artifact": "t", "left": {"method": "a_x", "metric": "ppl"},
         "op": "<", "right": {"methods": ["a_y", "b_x"], "reduce": "max", "metric": "ppl"},
         "why_not": {"quick": "hidden when held"}, "caveat": {"quick": "b diverged last", "paper": "other scale"}}]}
    write_yaml(tmp_path / "c.yaml", claims)
    rows = evaluate_claims(tmp_path / "c.yaml", tmp_path / "exps", res, "quick")["rows"]
    assert [r["verdict"] for r in rows] == ["not held (at the quick scale: too short)",
                                            "held (at the quick scale: b diverged last)"]
    from xcbench.reporting.claim_table import verdict_counts
    assert verdict_counts(rows) == {"held": 1, "not held": 1, "partial": 0, "not testable": 0, "not run": 0}
    assert rows[0]["ours"] == "10 < 8"


def test_a_caveat_leaves_the_verdict_it_qualifies_readable(tmp_path, capsys):
    """A held row with a caveat counts as held in `xcbench claims`' summary, and a not-run row with one is still
    left out of a kept tree's claims (`only`)."""
    from argparse import Namespace

    from xcbench.verbs import cmd_claims

    exp = {k: v for k, v in EXP.items() if k != "scale"}
    exp["methods"] = {**exp["methods"], "c_x": {"label": "Z", "head": "h", "train": {"lr": 0.3}}}  # no results
    exp["render"] = {"kind": "table", "renderer": "metric_table"}
    write_yaml(tmp_path / "exps" / "t.yaml", exp)
    res = _results(tmp_path, EXP, {("d", "a_x"): {"ppl": 10.0}, ("d", "a_y"): {"ppl": 20.0}, ("d", "b_x"): {"ppl": 8.0}})
    side = lambda m: {"method": m, "metric": "ppl"}  # noqa: E731
    claims = {"paper": "p", "claims": [
        {"id": "held", "text": "X below Y", "artifact": "t", "left": side("a_x"), "op": "<", "right": side("a_y"),
         "caveat": {"quick": "Y diverged last"}},
        {"id": "unrun", "text": "Z below Y", "artifact": "t", "left": side("c_x"), "op": "<", "right": side("a_y"),
         "caveat": {"quick": "Z is cut"}}]}
    write_yaml(tmp_path / "c.yaml", claims)
    every = evaluate_claims(tmp_path / "c.yaml", tmp_path / "exps", res, "quick")["rows"]
    assert [r["verdict"] for r in every] == ["held (at the quick scale: Y diverged last)",
                                             "not run (at the quick scale: Z is cut)"]
    kept = evaluate_claims(tmp_path / "c.yaml", tmp_path / "exps", res, "quick", only={"t"})["rows"]
    assert [r["id"] for r in kept] == ["held"]
    cmd_claims(Namespace(claims=tmp_path / "c.yaml", experiments=tmp_path / "exps", results=res, scale="quick",
                         out=tmp_path / "out"))
    assert "1/2 claims held" in capsys.readouterr().out


def test_kl_proposal_of_the_uniform_sampler_is_log_n_minus_entropy():
    """KL(p || 1/n) = log n - H(p): the head's epoch metric against its closed form."""
    g = torch.Generator().manual_seed(0)
    head = SampledSoftmax(6, 40, g, sampler="uniform", m=5, tau=2.0, normalize=True)
    h = torch.randn(9, 6, generator=g)
    p = torch.softmax(head.scores(head._unit(h)).double(), 1)
    want = (math.log(40) + (p * p.log()).sum(1)).mean().item()
    assert head.epoch_metrics(h, torch.zeros(9, dtype=torch.long))["kl_proposal"] == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize("encoder", ["lstm_lm", "transformer_lm", "transformer_lm_post"])
def test_zero_state_evaluation_equals_each_window_read_alone(prepared, encoder):
    """eval_state: zero (the public MIDX code's protocol): every bptt window, the last shorter one
    included, is scored from a zero state; the sum of -log p over the split matches a loop over windows."""
    processed, entry = prepared("synthetic-lm-tiny")
    exp = {"task": {"name": "lm", "params": {"bptt": 7, "eval_state": "zero", "eval_tokens": 200}}}
    task = make_task(exp, entry, processed, None, torch.device("cpu"), 0)
    enc = {"name": encoder, "emb": 8, "layers": 1, **({"hidden": 8} if encoder == "lstm_lm" else {"heads": 2, "ff": 8})}
    model = build_model({"encoder": enc}, "full_softmax", {}, task.in_dim, task.n_classes, 0).eval()
    tok = task.tokens["val"]
    nll = 0.0
    for s in range(0, len(tok) - 1, 7):  # 199 predictions: 28 windows of 7 and one of 3
        x, y = tok[s:min(s + 7, len(tok) - 1)], tok[s + 1:min(s + 8, len(tok))]
        o = model.scores_with_state(x.unsqueeze(0), None)[0].double()
        nll -= torch.log_softmax(o, 1)[torch.arange(len(y)), y].sum().item()
    got = task.evaluate(model, "val")
    assert got["nll"] == pytest.approx(nll / 199, rel=1e-7)  # float32 sums over other batch shapes
    carried = make_task({"task": {"name": "lm", "params": {"bptt": 7, "eval_tokens": 200, "eval_streams": 1}}},
                        entry, processed, None, torch.device("cpu"), 0).evaluate(model, "val")
    if encoder == "lstm_lm":  # the carried state sees more history: a different number
        assert carried["nll"] != pytest.approx(got["nll"], rel=1e-6)


def test_claims_are_evaluated_on_the_runs_present_and_never_vanish(tmp_path):
    """A kept tree lacking one of a claim's runs: the claim is evaluated on the runs there and marked
    partial (it used to be dropped), with its why_not; a misspelt metric gives a 'no data' row instead of no row."""
    exp = {k: v for k, v in EXP.items() if k != "scale"}
    exp["render"] = {"kind": "table", "renderer": "metric_table"}
    write_yaml(tmp_path / "exps" / "t.yaml", exp)
    res = _results(tmp_path, EXP, {("d", "a_x"): {"ppl": 10.0}, ("d", "a_y"): {"ppl": 9.0}})  # b_x absent
    claims = {"paper": "p", "claims": [
        {"id": "below_all", "text": "X below the others", "artifact": "t", "left": {"method": "a_x", "metric": "ppl"},
         "op": "<", "right": {"methods": ["a_y", "b_x"], "reduce": "min", "metric": "ppl"},
         "why_not": {"quick": "noisy"}},
        {"id": "typo", "text": "X below Y", "artifact": "t", "left": {"method": "a_x", "metric": "pll"},
         "op": "<", "right": {"method": "a_y", "metric": "pll"}}]}
    write_yaml(tmp_path / "c.yaml", claims)
    for only in (None, {"t"}):  # the DAG's report and a kept tree's
        rows = evaluate_claims(tmp_path / "c.yaml", tmp_path / "exps", res, "quick", only=only)["rows"]
        assert [r["id"] for r in rows] == ["below_all", "typo"]
        assert rows[0]["verdict"] == "not held, partial: no run of b_x (at the quick scale: noisy)" and rows[0]["ours"] == "10 < 9"
        assert rows[1]["verdict"].startswith("no data") and "'pll'" in rows[1]["verdict"]


def test_a_claim_over_fewer_seeds_than_its_artifact_is_partial(tmp_path):
    """An artifact of seeds [0, 1] (a view like table2_seeds) where one side has seed 0 only: the claim
    compares the means of the runs present and says which seed is missing."""
    exp = {k: v for k, v in EXP.items() if k != "scale"}
    exp.update(render={"kind": "table", "renderer": "metric_table"}, seeds=[0, 1])
    write_yaml(tmp_path / "exps" / "t.yaml", exp)
    res = _results(tmp_path, EXP, {("d", "a_x"): {"ppl": 10.0}, ("d", "a_y"): {"ppl": 9.0}})
    write_json(tmp_path / "quick" / "p" / "t" / "d" / "a_x" / "seed1" / "metrics.json", {"metrics": {"ppl": 12.0}})
    claims = {"paper": "p", "claims": [{"id": "c", "text": "X above Y", "artifact": "t", "left": {"method": "a_x",
              "metric": "ppl"}, "op": ">", "right": {"method": "a_y", "metric": "ppl"}}]}
    write_yaml(tmp_path / "c.yaml", claims)
    row = evaluate_claims(tmp_path / "c.yaml", tmp_path / "exps", res, "quick")["rows"][0]
    assert row["verdict"] == "held, partial: no run of a_y seed 1" and row["ours"] == "11 > 9"
    write_json(tmp_path / "quick" / "p" / "t" / "d" / "a_y" / "seed1" / "metrics.json", {"metrics": {"ppl": 11.0}})
    row = evaluate_claims(tmp_path / "c.yaml", tmp_path / "exps", res, "quick")["rows"][0]
    assert row["verdict"] == "held" and row["ours"] == "11 > 10"


def test_a_tagged_method_counts_in_the_claims_that_name_its_tag(tmp_path):
    """`tagged: static` selects every method carrying that tag: adding a method with `tags: [static]`
    to the experiment is all it takes to enter 'below every static sampler'."""
    exp = {k: v for k, v in EXP.items() if k != "scale"}
    exp["render"] = {"kind": "table", "renderer": "metric_table"}
    exp["methods"] = {**exp["methods"], "a_y": {"label": "Y", "head": "h", "tags": ["static"], "train": {"lr": 0.2}}}
    claims = {"paper": "p", "claims": [
        {"id": "below_static", "text": "X below every static sampler", "artifact": "t",
         "left": {"method": "a_x", "metric": "ppl"}, "op": "<",
         "right": {"tagged": ["static", "A"], "reduce": "min", "metric": "ppl"}}]}
    write_yaml(tmp_path / "c.yaml", claims)
    res = _results(tmp_path, EXP, {("d", "a_x"): {"ppl": 10.0}, ("d", "a_y"): {"ppl": 20.0}, ("d", "a_z"): {"ppl": 5.0},
                                   ("d", "b_x"): {"ppl": 1.0}})
    write_yaml(tmp_path / "exps" / "t.yaml", exp)
    assert evaluate_claims(tmp_path / "c.yaml", tmp_path / "exps", res, "quick")["rows"][0]["verdict"] == "held"
    exp["methods"]["a_z"] = {"label": "Z", "head": "h", "tags": ["static"], "train": {"lr": 0.3}}  # one entry: in the claim
    exp["methods"]["b_x"]["tags"] = ["static"]  # another encoder: not in a side tagged [static, A]
    write_yaml(tmp_path / "exps" / "t.yaml", exp)
    row = evaluate_claims(tmp_path / "c.yaml", tmp_path / "exps", res, "quick")["rows"][0]
    assert row["verdict"] == "not held" and row["ours"] == "10 < 5"


def test_schedule_facts_of_a_hand_written_history():
    """studies/midx_table4/midx_schedule.py: the first lr cut, the largest rise at the first rate and the best epoch
    of a history written by hand (rate 5 for epochs 1-4, cut after epoch 4)."""
    from conftest import load_benchmark

    mod = load_benchmark("midx_schedule", "studies/midx_table4")
    val, lr = [300.0, 250.0, 262.0, 255.0, 240.0, 255.0, 238.0], [5.0] * 4 + [1.25] * 3   # a 15-point rise after the cut
    assert mod.schedule_facts(val, lr) == {"epochs": 7, "lr0": 5.0, "first_cut_after": 4, "val_at_cut": 250.0,
                                           "largest_rise": 12.0, "best_val": 238.0, "best_epoch": 7}
    assert mod.schedule_facts([9.0, 8.0], [1.0, 1.0])["first_cut_after"] is None   # never cut
