"""The GPU paths against the CPU ones: every sampler's log q, draws, every selector's set, the heads'
loss and gradients, and whole sampled runs on CUDA equal the CPU's for the same inputs and seed (float
tolerance).

Skipped without CUDA (CI has none); run on a GPU machine with `pytest tests/test_cuda.py`. Every
generator is a CPU one (seed.py): the code draws on it and moves the draws, so one CPU stream gives both
devices the same negatives, selections, dropout masks, trees and codebooks (benchmarks/device_parity.py
covers every run of the DAG). `XCBENCH_CUDA_STANDIN=1 pytest tests/test_cuda.py` runs these tests on a
machine without CUDA with the CPU standing in for it: it checks the tests' own code, not the GPU.
"""

import copy
import os

import pytest
import torch

from xcbench.registry import HEADS, SAMPLERS, SELECTORS

STANDIN = os.environ.get("XCBENCH_CUDA_STANDIN") == "1"
if not (torch.cuda.is_available() or STANDIN):
    pytest.skip("no CUDA device: the GPU paths are checked on a GPU machine", allow_module_level=True)

from test_samplers import REFERENCES  # noqa: E402  (brute-force q per sampler, on CPU)

N, D, CUDA = 40, 6, torch.device("cpu" if STANDIN else "cuda")
DEVICES = {"cpu": torch.device("cpu"), "cuda": CUDA}  # keys name the sides; CUDA is the only device handle


# every sampler with its test parameters, and MIDX's staged draw (`draw: stages`) as `<name>+stages`
CASES = SAMPLERS.names() + ["midx_pq+stages", "midx_learn_rq+stages"]


def _case(case: str) -> tuple[str, dict]:
    """(sampler name, its test parameters) of a case of CASES."""
    name, _, draw = case.partition("+")
    return name, {**REFERENCES[name][1], **({"draw": draw} if draw else {})}


def _built(case: str, device: torch.device):
    """A sampler of `case` set up and indexed from the same CPU-drawn inputs and CPU generator, on `device`."""
    name, kw = _case(case)
    g = torch.Generator().manual_seed(7)
    counts, E = torch.randint(0, 50, (N,), generator=g), torch.randn(N, D, generator=g)
    s = SAMPLERS.get(name)(N, **kw).to(device)
    s.setup(counts.to(device))
    s.update(E.to(device), torch.Generator().manual_seed(8))
    return s, E, counts


@pytest.mark.parametrize("name", CASES)
def test_log_prob_on_cuda_equals_cpu_and_brute_force(name):
    h = torch.randn(3, D, generator=torch.Generator().manual_seed(1)) * 2
    ids = torch.arange(N).expand(3, -1)
    cpu, E, counts = _built(name, torch.device("cpu"))
    gpu, _, _ = _built(name, CUDA)
    lp_cpu, lp_gpu = cpu.log_prob(h, ids), gpu.log_prob(h.to(CUDA), ids.to(CUDA)).cpu()
    assert torch.allclose(lp_gpu.exp(), lp_cpu.exp(), atol=1e-5), name
    ref, _ = REFERENCES[_case(name)[0]]  # the CPU sampler's state (plain tensor attributes stay where they were built)
    assert torch.allclose(lp_gpu.double().exp(), ref(cpu, h, E, counts), atol=1e-4), name


@pytest.mark.parametrize("name", CASES)
def test_cuda_draws_lie_on_cuda_match_their_log_prob_and_are_the_cpus(name):
    s, _, _ = _built(name, CUDA)
    h = torch.randn(2, D, generator=torch.Generator().manual_seed(1)).to(CUDA)
    ids, log_q = s.sample(h, 500, torch.Generator().manual_seed(2))
    assert ids.device.type == CUDA.type and ids.shape == (2, 500) and int(ids.min()) >= 0 and int(ids.max()) < N
    assert torch.allclose(log_q, s.log_prob(h, ids), atol=1e-5)
    assert torch.isfinite(log_q).all()
    cpu, _, _ = _built(name, torch.device("cpu"))
    ids_cpu, _ = cpu.sample(h.cpu(), 500, torch.Generator().manual_seed(2))
    # the CPU's draws: a proposal CUDA rounds otherwise may move a draw that falls on a boundary
    assert (ids.cpu() == ids_cpu).float().mean() >= 0.99, name


@pytest.mark.parametrize("name", [n for n in SELECTORS.names() if getattr(SELECTORS.get(n), "requires", None) is None])
def test_selectors_choose_the_same_classes_on_cuda(name):
    """Same class table, queries and CPU generators: the same selected set (trees split on projections
    that CUDA rounds otherwise may move a class on a tie; none occur on these random rows)."""
    from test_selective import clustered

    W, g = clustered()
    h, y = torch.randn(8, W.shape[1], generator=g), torch.randint(len(W), (8,), generator=g)
    out = {}
    for key, dev in DEVICES.items():
        sel = SELECTORS.get(name)(len(W)).to(dev)
        sel.bind(W.to(dev))
        if sel.needs_index:
            sel.update(W.to(dev), torch.Generator().manual_seed(2))
        out[key] = sel.select(h.to(dev), y.to(dev), 60, torch.Generator().manual_seed(3)).cpu()
    assert torch.equal(out["cpu"], out["cuda"]), name


@pytest.mark.parametrize("params", [{"trees": 4, "leaf": 4, "probe": 4}, {"trees": 4, "leaf": 4, "pool": 8, "rerank": "inner"}])
def test_hf_scores_gathered_pools_in_batches_on_cuda_and_selects_the_cpus_classes(params, monkeypatch):
    """DENSE_RATIO 0: every pool is scored from gathered rows, one query at a time on the CPU and by
    rerank.batched (padded rows of chunks of queries, one bmm) on CUDA: the same selected set."""
    from test_selective import clustered

    from xcbench.selectors import rerank as rr

    monkeypatch.setattr(rr, "DENSE_RATIO", 0)
    monkeypatch.setattr(rr, "GATHER_CHUNK", 3 * 8 * 200)   # several chunks
    W, g = clustered()
    h, y = torch.randn(16, W.shape[1], generator=g), torch.randint(len(W), (16,), generator=g)
    out = {}
    for key, dev in DEVICES.items():
        sel = SELECTORS.get("hf")(len(W), **params).to(dev)
        sel.bind(W.to(dev))
        sel.update(W.to(dev), torch.Generator().manual_seed(2))
        out[key] = sel.select(h.to(dev), y.to(dev), 120, torch.Generator().manual_seed(3)).cpu()
    assert torch.equal(out["cpu"], out["cuda"])


@pytest.mark.parametrize("name", ["full_softmax", "normalized_softmax", "bce", "sq_hinge"])
def test_deterministic_heads_give_the_cpu_loss_and_gradients_on_cuda(name):
    if name not in HEADS.names():
        pytest.skip(f"{name} is not registered")
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(16, 12, generator=g), torch.randint(0, 30, (16,), generator=g)
    heads = {key: HEADS.get(name)(12, 30, torch.Generator().manual_seed(1)).to(dev) for key, dev in DEVICES.items()}
    grads, losses = {}, {}
    for key, head in heads.items():
        dev = DEVICES[key]
        xx = x.clone().to(dev).requires_grad_(True)  # a leaf on each device (x itself stays grad-free)
        loss = head.loss(xx, y.to(dev), None, torch.Generator().manual_seed(3))
        loss.backward()
        losses[key] = loss.item()
        grads[key] = {k: p.grad.cpu() for k, p in head.named_parameters() if p.grad is not None} | {"h": xx.grad.cpu()}
    assert losses["cuda"] == pytest.approx(losses["cpu"], rel=1e-5)
    assert grads["cuda"].keys() == grads["cpu"].keys() and len(grads["cpu"]) > 1
    for k, a in grads["cpu"].items():
        assert torch.allclose(a, grads["cuda"][k], atol=1e-6, rtol=1e-4), k


@pytest.mark.parametrize("sparse_grad", [False, True])
def test_sparse_route_dots_give_the_cpu_values_and_gradients_on_cuda(sparse_grad):
    """`logits: sparse` (heads/row_dots.py: a sampled product and two CSR products, cuSPARSE on a GPU) against
    the CPU's, repeated classes in a row included."""
    from xcbench.heads.row_dots import SampledDots

    g = torch.Generator().manual_seed(0)
    h0, E0 = torch.randn(9, D, generator=g), torch.randn(N, D, generator=g)
    ids, w = torch.randint(0, N, (9, 12), generator=g), torch.randn(9, 12, generator=g)
    out = {}
    for key, dev in DEVICES.items():
        h, E = h0.clone().to(dev).requires_grad_(True), E0.clone().to(dev).requires_grad_(True)  # leaves of their own
        dots = SampledDots.apply(h, E, ids.to(dev), sparse_grad)
        (dots * w.to(dev)).sum().backward()
        out[key] = (dots.detach().cpu(), h.grad.cpu(), E.grad.cpu().to_dense())
    for a, b in zip(out["cpu"], out["cuda"]):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("sampler, params", [("midx_rq", {"K": 4}), ("rff", {"D": 16})])
def test_a_cuda_run_cut_after_an_epoch_resumes_to_the_uninterrupted_metrics(tiny_xmc, tiny_exp, tmp_path, sampler, params):
    """Its checkpoint holds the generators' states and the CUDA stream's; read back onto the device, a CUDA
    generator's state failed set_state ('RNG state must be a torch.ByteTensor', seen on an H200), so no
    GPU run could resume."""
    from conftest import train_run
    from test_interfaces import _sampled

    from xcbench.config import normalise_methods
    from xcbench.tasks.base import make_task

    exp = _sampled(tiny_exp, sampler, sampler_params=params)
    exp["methods"] = normalise_methods(exp["methods"])
    processed, feats, entry = tiny_xmc

    def go(out, **kw):
        task = make_task(copy.deepcopy(exp), entry, processed, feats, CUDA, 0)
        return train_run(copy.deepcopy(exp), task, "synthetic-xmc-tiny", "s", 0, out, CUDA, **kw)

    full = go(tmp_path / "full")
    with pytest.raises(KeyboardInterrupt):
        go(tmp_path / "cut", interrupt_after=1)
    resumed = go(tmp_path / "cut")
    assert resumed["device"] == CUDA.type and resumed["metrics"] == full["metrics"] and resumed["curves"] == full["curves"]


@pytest.mark.parametrize("sampler, params", [("uniform", {}), ("midx_rq", {"K": 4}), ("rff", {"D": 16})])
def test_a_sampled_run_with_dropout_gives_the_cpus_metrics_on_cuda(tiny_xmc, tiny_exp, tmp_path, sampler, params):
    """Negatives, codebooks, kernel trees and the encoder's dropout (TINY_EXP: mlp, p 0.1) drawn on the CPU
    for both devices: the test metrics agree to float tolerance (device_parity's 1e-4), not in distribution."""
    from conftest import train_run
    from test_interfaces import _sampled

    from xcbench.config import normalise_methods
    from xcbench.tasks.base import make_task

    exp = _sampled(tiny_exp, sampler, sampler_params=params)
    exp["methods"] = normalise_methods(exp["methods"])
    processed, feats, entry = tiny_xmc
    out = {}
    for key, dev in DEVICES.items():
        task = make_task(copy.deepcopy(exp), entry, processed, feats, dev, 0)
        out[key] = train_run(copy.deepcopy(exp), task, "synthetic-xmc-tiny", "s", 0, tmp_path / key, dev)["metrics"]
    assert out["cuda"].keys() == out["cpu"].keys() and any(isinstance(a, float) for a in out["cpu"].values())
    for k, a in out["cpu"].items():
        if isinstance(a, float):
            assert out["cuda"][k] == pytest.approx(a, rel=1e-4, abs=1e-6), k


# `train.draws: device` (seed.py): the loss generator on the GPU, draws made there.

@pytest.mark.parametrize("name", CASES)
def test_device_draws_follow_log_prob(name):
    """A generator on the device draws other classes than the CPU's, from the same distribution: the counts of
    100,000 draws against the exact q (chi-square); a sampler that drew on the host or ignored the device
    generator's stream would still pass here, the next test catches that."""
    from scipy.stats import chisquare

    from xcbench.seed import torch_generator

    s, _, _ = _built(name, CUDA)
    h = (torch.randn(1, D, generator=torch.Generator().manual_seed(1)) * 2).to(CUDA)
    ids, log_q = s.sample(h, 100_000, torch_generator(0, "loss", CUDA))
    assert ids.device.type == CUDA.type and torch.allclose(log_q, s.log_prob(h, ids), atol=1e-5)
    counts = torch.bincount(ids[0].cpu(), minlength=N).double()
    expected = s.log_prob(h, torch.arange(N, device=CUDA).unsqueeze(0))[0].double().exp().cpu() * 100_000
    support = expected > 0
    assert counts[~support].sum() == 0, f"{name}: drew classes of probability 0"
    counts, expected = counts[support], expected[support]
    assert chisquare(counts.numpy(), expected.numpy() * counts.sum().item() / expected.sum().item()).pvalue > 1e-3


SYNC_FREE = ["uniform", "unigram", "lsh", "quadratic_exact", "midx_pq", "midx_rq", "midx_rq+stages"]  # MIDX Table 4's, RFF's aside


@pytest.mark.skipif(STANDIN, reason="host synchronisations exist on CUDA only")
@pytest.mark.parametrize("sampler", SYNC_FREE)
def test_a_sampled_step_with_device_draws_never_waits_for_the_gpu(sampler):
    """One training step of the sampled head (loss, backward, clipping, Adam, the after-step hook) under
    torch.cuda.set_sync_debug_mode('error'): any host synchronisation raises. With a CPU generator the
    draws' copies synchronise (checked too, so the test can fail)."""
    from xcbench.optim.weights import clip_grad_norm
    from xcbench.runtime import optimizer_step
    from xcbench.seed import torch_generator

    n, d, B = 500, 16, 32
    name, _, draw = sampler.partition("+")
    params = {"K": 4, **({"draw": draw} if draw else {})} if name.startswith("midx") else {}
    head = HEADS.get("sampled_softmax")(d, n, torch.Generator().manual_seed(0), sampler=name, m=20,
                                        sampler_params=params).to(CUDA)
    head.setup({"label_counts": torch.randint(0, 50, (n,), generator=torch.Generator().manual_seed(1))})
    head.on_epoch_start(0, torch.Generator().manual_seed(2))
    opt = torch.optim.Adam(head.parameters(), lr=1e-3)
    h = torch.randn(B, d, device=CUDA, requires_grad=True)
    y = torch.randint(0, n, (B,), device=CUDA)

    def step(gen):
        loss = head.loss(h, y, None, gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        clip_grad_norm(head.parameters(), 0.25)
        optimizer_step(opt)
        head.after_step(1, opt)

    step(torch_generator(0, "loss", CUDA))  # warm-up: lazy state (Adam's moments), kernels' first launch
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        step(torch_generator(0, "loss", CUDA))
        if sampler != "uniform":  # uniform's randint has no probabilities to copy
            with pytest.raises(RuntimeError, match="synchroniz"):
                step(torch.Generator().manual_seed(0))
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.parametrize("sampler, params", [("midx_rq", {"K": 4}), ("uniform", {})])
def test_a_device_draws_run_resumes_to_the_uninterrupted_metrics(tiny_xmc, tiny_exp, tmp_path, sampler, params):
    """A CUDA generator's state (seed and offset) in the checkpoint: a run cut after an epoch and resumed
    gives the uninterrupted run's metrics; its draws are not the CPU generator's (the metrics differ)."""
    from conftest import train_run
    from test_interfaces import _sampled

    from xcbench.config import normalise_methods
    from xcbench.tasks.base import make_task

    processed, feats, entry = tiny_xmc

    def go(out, draws, **kw):
        exp = _sampled(tiny_exp, sampler, sampler_params=params)
        exp["methods"] = normalise_methods(exp["methods"])
        exp["train"]["draws"] = draws
        task = make_task(copy.deepcopy(exp), entry, processed, feats, CUDA, 0)
        return train_run(exp, task, "synthetic-xmc-tiny", "s", 0, out, CUDA, **kw)

    full = go(tmp_path / "full", "device")
    with pytest.raises(KeyboardInterrupt):
        go(tmp_path / "cut", "device", interrupt_after=1)
    resumed = go(tmp_path / "cut", "device")
    assert resumed["metrics"] == full["metrics"] and resumed["curves"] == full["curves"]
    if not STANDIN:
        assert go(tmp_path / "cpu_draws", "cpu")["metrics"] != full["metrics"]


@pytest.mark.skipif(STANDIN, reason="host synchronisations exist on CUDA only")
def test_dropout_with_device_draws_keeps_1_minus_p_and_never_waits_for_the_gpu():
    """Dropout.on_device (train.draws: device): the mask from the device's stream, kept share 1 - p within
    5 standard errors, kept entries scaled by 1 / (1 - p); the CPU-drawn mask's copy synchronises (checked)."""
    from xcbench.features.base import Dropout

    p, x = 0.3, torch.ones(400, 500, device=CUDA)
    layer = Dropout(p).train()
    layer.on_device = True
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = layer(x)
        layer.on_device = False
        with pytest.raises(RuntimeError, match="synchroniz"):
            layer(x)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    kept = (out != 0).double().mean().item()
    assert abs(kept - (1 - p)) < 5 * ((p * (1 - p)) / x.numel()) ** 0.5
    assert torch.allclose(out[out != 0], torch.full_like(out[out != 0], 1 / (1 - p)))


@pytest.mark.skipif(STANDIN, reason="CUDA graphs exist on CUDA only")
@pytest.mark.parametrize("head, params", [("full_softmax", {}), ("sampled_softmax", {"sampler": "midx_rq", "m": 8,
                                                                                    "sampler_params": {"K": 4}})])
def test_a_cuda_graph_run_gives_the_eager_runs_metrics(prepared, tmp_path, head, params):
    """train.cuda_graph (graphs.py) on a tiny LSTM language model, 3 epochs (a capture per epoch, after 2 warm-up
    steps), draws on the device: the replayed steps are the eager ones, so the test metrics agree to float tolerance."""
    from conftest import train_run

    from xcbench.config import normalise_methods
    from xcbench.tasks.base import make_task

    processed, entry = prepared("synthetic-lm-tiny")
    exp = {"paper": "t", "artifact": "g", "scale": "tiny", "task": {"name": "lm", "params": {"bptt": 10, "eval_tokens": 500}},
           "model": {"encoder": {"name": "lstm_lm", "emb": 16, "hidden": 16, "layers": 1, "dropout": 0.0}},
           "methods": normalise_methods({"m": {"head": head, "params": params}}), "seeds": [0],
           "datasets": ["synthetic-lm-tiny"],
           "train": {"epochs": 3, "batch_size": 8, "lr": 1.0, "optimizer": "sgd", "grad_clip": 0.25, "draws": "device"}}
    out = {}
    for graph in (False, True):
        e = copy.deepcopy(exp)
        e["train"]["cuda_graph"] = graph
        task = make_task(copy.deepcopy(e), entry, processed, None, CUDA, 0)
        out[graph] = train_run(e, task, "synthetic-lm-tiny", "m", 0, tmp_path / str(graph), CUDA)["metrics"]
    for k, a in out[False].items():
        if isinstance(a, float):
            assert out[True][k] == pytest.approx(a, rel=1e-4, abs=1e-6), k


@pytest.mark.skipif(STANDIN, reason="CUDA graphs exist on CUDA only")
def test_train_step_times_steps_replayed_from_a_cuda_graph(tiny_xmc, tiny_exp):
    """benchmarks/train_step.py --cuda-graph: the timed steps are replays (after the eager warm-up and the capture),
    with the draws on the device and no host synchronisation in a replayed step."""
    from conftest import load_benchmark

    from xcbench.config import normalise_methods
    from xcbench.tasks.base import make_task

    ts = load_benchmark("train_step")
    processed, feats, entry = tiny_xmc
    tiny_exp["methods"] = normalise_methods(tiny_exp["methods"])
    task = make_task(tiny_exp, entry, processed, feats, CUDA, 0)
    r = ts.one(tiny_exp, task, "synthetic-xmc-tiny", "full_softmax", CUDA, 3, evaluate=False, cuda_graph=True)
    assert r["cuda_graph"] and r["draws"] == "device" and r["warmup_steps"] >= 3
    assert r["syncs_per_step"] == 0 and r["step_ms"] > 0
