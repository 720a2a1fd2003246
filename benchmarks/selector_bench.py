"""Active-class selectors: build time, selection time per batch and precision against `optimal`
(Zhang et al. 2018), and one selective-softmax step against one full-softmax step.

Class embeddings: a stated mixture, n/100 cluster centres mu_k ~ N(0, I_d / d) and
w_c = mu_k(c) + 0.5 eps_c, eps_c ~ N(0, I_d / d) (clusters of ~100 similar classes, as trained face
classifiers' rows of similar identities). A batch of B queries near their classes, h_i = w_{c_i} + 0.5 e_i,
e_i ~ N(0, I_d / d), c_i uniform (cosine to the own class about 0.9). M = 1% of n, per-example quota q = ceil(M / B). Precision =
mean_i |S_i ∩ T_q(h_i)| / q: T_q(h_i) the exact top-q of W h_i among the classes other than c_i (the
label is always active; its hardest negatives are what a selector must find), S_i the
example's own selection of q + 1 classes (room for its label and q others: HF its q + 1 re-ranked
pooled classes, optimal its exact top-(q + 1); PCA / k-means its label's group; random q + 1
uniform classes), before the batch union and the cap (at n = 10^4, M = 100 < B: the cap would keep
the labels alone). Mass = mean_i sum_{c in S_i, c != c_i} p_ic / sum_{c != c_i} p_ic, p_i = softmax(W h_i):
the share of the negatives' softmax mass (and so of their gradient) that the selection keeps. PCA's and
k-means' precision and mass count their whole group (hundreds to thousands of classes per example, see
"selected"), an upper bound of what survives the cap. Selection time: `select` of the batch with
that quota (the union of the per-example selections with the labels), median of `--repeats` after one
warm-up; the structure build (forest, k-means, PCA codes) is timed apart. Each forest is queried
with both re-rankings of the pooled classes (the text's cosine and the response w . h), by the paper's walk
(pool 1) and by walks stopped at pool x q classes (8; also 32 at 10^6), which pool larger cells, and by
the paper's walk plus `probe` best-first rounds of L more walks (7, 15, 31; selectors/forest.py); at 10^6
also 15, 23 and 31 rounds with `prefilter` 4 (the pool ranked from bfloat16 rows, the 4 q best re-scored exactly),
and 15, 16 and 20 rounds' walks made in rounds of 5 L, 8 L and 10 L (`probe_width` 5, 8, 10; with the first pass).
Library indexes where installed: faiss IVF at several nprobe; Annoy (10 trees; the public HF code's
angular metric and Annoy's dot) searching 1, 4, 16 and 64 times its default search_k (trees x q nodes).
The re-rank's floor (`rerank_floor`): P sorted random rows gathered per query and multiplied by it,
against exact top-k in the same run, the least that any selector re-ranking P pooled classes pays.

    python benchmarks/selector_bench.py                       # n in {1e4, 1e5, 1e6}, B = 256, d = 256
    python benchmarks/selector_bench.py --n 10000 --repeats 2 --name selectors_small
    python benchmarks/selector_bench.py --trained results/paper/class_selection/fig2/synthetic-faces-87k/full/seed0 \
        --name selectors_trained     # a trained run's class embeddings and features instead of the mixture
    python benchmarks/selector_bench.py --device cuda --name selectors_cuda   # on the GPU: exact top-k is torch's
Writes benchmarks/out/<name>.{json,md,png} (default selectors). The mixture and the queries are drawn on the
CPU from the same seeds whatever the device, then moved to it; times on CUDA wait for the device.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import platform
import statistics
import time
from pathlib import Path

import torch
from common import write_outputs

OUT = Path(__file__).resolve().parent / "out"


def mixture(n: int, d: int, g: torch.Generator) -> torch.Tensor:
    mu = torch.randn(max(1, n // 100), d, generator=g) / math.sqrt(d)
    return mu[torch.randint(len(mu), (n,), generator=g)] + 0.5 * torch.randn(n, d, generator=g) / math.sqrt(d)


DEV = torch.device("cpu")  # main() sets it from --device


def sync() -> None:
    if DEV.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, repeats: int) -> tuple[float, object]:
    out = fn()
    ts = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        out = fn()
        sync()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), out


def has(module: str) -> bool:
    """Whether an optional library (faiss, annoy) is installed."""
    return importlib.util.find_spec(module) is not None


def POOLS(n: int) -> tuple[int, ...]:
    """HF walks: the paper's (1) and ones stopped at pool x q classes (selectors/forest.py)."""
    return (1, 8, 32) if n >= 10 ** 6 else (1, 8)


NPROBES = (4, 8, 32, 128)


PROBES = (7, 15, 31)
PREFILTER = 4  # at 10^6, also rank the pool from bfloat16 rows and re-score the 4 q best exactly (forest.py)
WIDE = ((15, 5), (16, 8), (20, 10))  # at 10^6, (probe, probe_width): the same walks popped w L sides a round (forest.py)


ANNOY_SEARCH = (1, 4, 16, 64)  # Annoy's search_k in multiples of its default, trees x q nodes


def variants(name: str, n: int, params: dict, q: int) -> list[dict]:
    """Query-time settings tried on one built structure: HF's re-rankings, pools and best-first probes
    (probe rounds of L walks each, ranked by response, also by the text's cosine at 15; forests of at
    most 10 trees: with more, the walks alone cost more than exact top-k), faiss's nprobe."""
    if name == "hf":
        probes = [{"rerank": "inner", "pool": 1, "probe": k} for k in PROBES] + [{"rerank": "cosine", "pool": 1, "probe": 15}]
        if n >= 10 ** 6:  # where the pool is gathered row by row (rerank.DENSE_RATIO): the bfloat16 first pass
            probes += [{"rerank": "inner", "pool": 1, "probe": k, "prefilter": PREFILTER} for k in (15, 23, 31)]
            probes += [{"rerank": "inner", "pool": 1, "probe": k, "prefilter": PREFILTER, "probe_width": w} for k, w in WIDE]
        return ([{"rerank": r, "pool": p, "probe": 0} for p in POOLS(n) for r in ("cosine", "inner")]
                + (probes if params["trees"] <= 10 else []))
    if name == "faiss_ivf":
        return [{"nprobe": p} for p in NPROBES]
    if name == "annoy":
        return [{"search_k": s * params["trees"] * q} for s in ANNOY_SEARCH]
    return [{}]


def configs(n: int) -> list[tuple[str, str, dict]]:
    out = [("optimal", "optimal", {}), ("random", "random", {})]
    out += [(f"pca_hash bits={b}", "pca_hash", {"bits": b}) for b in (8, 12, 16)]
    out += [("kmeans 1024", "kmeans", {"clusters": 1024, "iters": 5})]
    if has("faiss"):  # the library index a practitioner would use (the `ann` extra)
        out += [("faiss_ivf nlist=1024", "faiss_ivf", {"nlist": 1024})]  # one index, searched at every NPROBES
    if has("annoy"):  # the public HF code's index (the `annoy` extra): its angular metric, and Annoy's dot
        out += [(f"annoy trees=10 {m}", "annoy", {"trees": 10, "metric": m}) for m in ("angular", "dot")]
    if n >= 10 ** 6:  # a build grows every tree over all n rows (a minute per 5 trees, one thread): fewer settings
        return out + [(f"hf L={L} leaf=64", "hf", {"trees": L, "leaf": 64}) for L in (5, 10)]
    for L in (5, 10, 20, 50):
        out += [(f"hf L={L} leaf={leaf}", "hf", {"trees": L, "leaf": leaf}) for leaf in (16, 64)]
    return out


def per_example_mask(sel, name: str, h: torch.Tensor, y: torch.Tensor, q: int) -> torch.Tensor:
    """(B, n) bool: each query's own selection (before the batch union and the cap)."""
    mask = torch.zeros(len(h), sel.n_classes, dtype=torch.bool, device=h.device)
    if name == "hf":
        rows, cls = sel.per_example(h, q)
        mask[rows, cls] = True
    elif name in ("pca_hash", "kmeans"):  # the label's whole group
        mask = sel.keys.unsqueeze(0) == sel.keys[y].unsqueeze(1)
    elif name in ("optimal", "faiss_ivf", "annoy"):  # its own (approximate) top-q (annoy: by its metric)
        mask.scatter_(1, sel.candidates(h, y, q, None), True)
    else:
        mask.scatter_(1, torch.randint(sel.n_classes, (len(h), q), generator=torch.Generator().manual_seed(4)).to(h.device), True)
    return mask


def scores_of(mask: torch.Tensor, top: torch.Tensor, p_neg: torch.Tensor) -> tuple[float, float]:
    """(precision, mass): the share of each query's exact top-q negatives in its selection, and the share
    of its negative softmax mass sum_{c != y} p_c that the selection covers (what the restricted softmax's
    gradient keeps), both averaged over the queries."""
    return mask.gather(1, top).double().mean().item(), ((p_neg * mask).sum(1) / p_neg.sum(1)).mean().item()


def bench_n(n: int, d: int, B: int, repeats: int) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    W = mixture(n, d, g)
    y = torch.randint(n, (B,), generator=g)
    h = W[y] + 0.5 * torch.randn(B, d, generator=g) / math.sqrt(d)
    return bench(W.to(DEV), h.to(DEV), y.to(DEV), repeats)


def trained(run_dir: Path, experiment: str, dataset: str, processed: str, B: int) -> tuple:
    """(W, h, y, description) of a trained class-selection run: its class embeddings W (C, d) from
    checkpoint.pt and the features h = encoder(x) (B, d) of B training examples (seeded draw), labels y."""
    from xcbench.catalogue import dataset_entry, load_datasets
    from xcbench.config import load_experiment, resolve_experiment
    from xcbench.run import make_run
    from xcbench.tasks.base import task_of
    from xcbench.train import model_of

    ck = torch.load(run_dir / "checkpoint.pt", weights_only=True, map_location="cpu")
    exp = resolve_experiment(load_experiment(experiment), "paper")
    run = make_run(exp, dataset, run_dir.parent.name, 0)                                    # .../<dataset>/<method>/seed0
    task = task_of(run, dataset_entry(dataset, load_datasets()), processed, None, torch.device("cpu"))
    model = model_of(run, task)
    model.load_state_dict(ck["model"])
    x, y, _ = next(task.train_batches(B, torch.Generator().manual_seed(6)))
    with torch.no_grad():
        h = model.encode(x)[0]                                                                  # (B, d)
    W = model.head.W.detach().clone()                                                          # (C, d)
    var = torch.linalg.svdvals(W - W.mean(0)).square().cumsum(0)
    spread = ", ".join(f"{k}: {var[k - 1] / var[-1]:.2f}" for k in (8, 32, 128) if k <= len(var))
    about = (f"Class embeddings W of a trained run ({dataset}, method {run_dir.parent.name}, checkpoint after "
             f"{ck['epoch']} epochs + {ck.get('step', 0)} batches; C = {len(W):,}, d = {h.shape[1]}; mean row norm "
             f"{W.norm(dim=1).mean():.2f}, norm of the mean row {W.mean(0).norm():.2f}; share of the centred rows' "
             f"variance in the top k principal directions, {spread}); queries = the encoder's features of {B} "
             f"training examples")
    print(about, flush=True)
    return W, h, y, about


def bench(W: torch.Tensor, h: torch.Tensor, y: torch.Tensor, repeats: int) -> list[dict]:
    """Every selector setting of configs(n) on class embeddings W (n, d) and queries h (B, d) of labels y."""
    from xcbench.registry import SELECTORS

    (n, d), B = W.shape, len(h)
    M = max(1, n // 100)
    q = math.ceil(M / B)
    with torch.no_grad():
        s_neg = (h @ W.T).scatter(1, y.unsqueeze(1), -math.inf)                                # (B, n) label excluded
        top = s_neg.topk(q, dim=1).indices                                                      # (B, q) hardest negatives
        p_neg = torch.softmax(s_neg, 1)                                                         # (B, n), 0 at the label
        del s_neg
    q, M = q + 1, (q + 1) * B  # each example selects q + 1 classes: room for its label and its q hardest negatives
    rows = []
    for label, name, params in configs(n):
        if SELECTORS.get(name).requires and DEV.type != "cpu":
            continue  # the library indexes (faiss-cpu, Annoy) search host arrays: not GPU selectors
        sel = SELECTORS.get(name)(n, **params).to(DEV)
        sel.bind(W)
        sync()
        t0 = time.perf_counter()
        if sel.needs_index:
            sel.update(W, torch.Generator().manual_seed(2))
        sync()
        build = time.perf_counter() - t0
        for var in variants(name, n, params, q):  # one structure, queried several ways
            for k, v in var.items():
                setattr(sel, k, v)
            if name == "hf":
                var = {"prefilter": 0, "probe_width": 1, **var}  # each setting states its own (the selector keeps the last one set)
            tag = " ".join([label] + [str(v) if k == "rerank" else f"{k}={v}" for k, v in var.items()
                                      if not (k in ("pool", "probe_width") and v == 1) and not (k in ("probe", "prefilter") and v == 0)])
            sel_s, S = timed(lambda: sel.select(h, y, M, torch.Generator().manual_seed(3)), repeats)
            prec, mass = scores_of(per_example_mask(sel, name, h, y, q), top, p_neg)
            rows.append({"n": n, "d": d, "B": B, "M": max(1, n // 100), "q": q - 1, "selector": tag, "build_s": build,
                         "select_s": sel_s, "precision": prec, "mass": mass, "selected": len(S)})
            if name == "hf":  # distinct classes re-ranked per query (the forest's last query)
                rows[-1]["pooled"] = sel.forest.pooled.float().mean().item()
            print(f"n={n:>8} {tag:<28} build {build:8.3f} s  select {1000 * sel_s:9.2f} ms  precision {prec:.3f}"
                  f"  mass {mass:.3f}", flush=True)
        sel = None  # released before the next selector is built
    return rows


STEP_SELECTORS = {  # one setting per selector family for the training-step comparison (M = 1%)
    "optimal": ("optimal", {}), "random": ("random", {}), "pca_hash": ("pca_hash", {"bits": 12, "rebuild_every": None}),
    "kmeans": ("kmeans", {"clusters": 1024, "iters": 5, "rebuild_every": None}),
    "hf": ("hf", {"trees": 10, "leaf": 64, "rebuild_every": None, "rerank": "inner", "probe": 15}),
    "hf_prefilter": ("hf", {"trees": 10, "leaf": 64, "rebuild_every": None, "rerank": "inner", "probe": 15, "prefilter": 4}),
    "hf_prefilter_23": ("hf", {"trees": 10, "leaf": 64, "rebuild_every": None, "rerank": "inner", "probe": 23, "prefilter": 4}),
    "hf_wide": ("hf", {"trees": 10, "leaf": 64, "rebuild_every": None, "rerank": "inner", "probe": 16, "prefilter": 4,
                       "probe_width": 8}),
    "faiss_ivf": ("faiss_ivf", {"nlist": 1024, "nprobe": 8, "rebuild_every": None}),
    "annoy": ("annoy", {"trees": 10, "metric": "dot", "search_k": 16 * 10 * 41, "rebuild_every": None}),  # 16x default at 10^6
}


def step_ratio(n: int, d: int, B: int, repeats: int) -> dict:
    """One training step (loss, backward, lazy Adam) of the full softmax and of the selective softmax
    with every selector (the index built once beforehand, not timed: it is rebuilt every T steps)."""
    from xcbench.heads.full_softmax import FullSoftmax
    from xcbench.heads.selective_softmax import SelectiveSoftmax
    from xcbench.optim.lazy_adam import LazyAdam
    from xcbench.registry import SELECTORS

    g = torch.Generator().manual_seed(0)
    W = mixture(n, d, g)
    y = torch.randint(n, (B,), generator=g)
    h = W[y] + 0.5 * torch.randn(B, d, generator=g) / math.sqrt(d)
    W, h, y = W.to(DEV), h.to(DEV), y.to(DEV)
    out = {"n": n, "d": d, "B": B, "M": n // 100}
    heads = {"full": lambda: FullSoftmax(d, n, torch.Generator().manual_seed(1))}
    for key, (sel, params) in STEP_SELECTORS.items():
        library = SELECTORS.get(sel).requires
        if library is None or (has(library) and DEV.type == "cpu"):
            heads[key] = lambda sel=sel, params=params: SelectiveSoftmax(
                d, n, torch.Generator().manual_seed(1), selector=sel, selector_params=params, M=n // 100)
    for key, make in heads.items():
        head = make().to(DEV)
        with torch.no_grad():
            head.W.copy_(W)
        head.on_epoch_start(0, torch.Generator().manual_seed(2))
        opt = LazyAdam(head.parameters(), lr=1e-3)
        gen = torch.Generator().manual_seed(3)

        def step():
            loss = head.loss(h, y, None, gen)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        out[f"{key}_step_s"] = timed(step, repeats)[0]
        print(f"n={n} {key} step {out[f'{key}_step_s']:.3f} s", flush=True)
        head = opt = None  # released before the next head is built
    out["speedup"] = {k[:-7]: out["full_step_s"] / v for k, v in out.items() if k.endswith("_step_s") and k != "full_step_s"}
    return out


def rerank_floor(n: int, d: int, B: int, pools: tuple[int, ...], repeats: int, first_P: int = 12500) -> dict:
    """What any pool-and-re-rank selector pays at least: per query, P sorted random rows of W gathered and
    times h (the forest's re-rank without its walks), against exact top-k, the (B, n) product read once
    for all B queries. Gathers move P d floats per query at memory speed; the product runs at BLAS speed.
    At `first_P` rows per query (what HF's best-first walks pool for precision 0.8 at n = 10^6) the rows are
    also read from cheaper copies of W, a first pass that an exact re-rank of a short list would follow:
    bfloat16 (half the bytes) and int8 with a scale per row (a quarter)."""
    g = torch.Generator().manual_seed(0)
    W, h = torch.randn(n, d, generator=g).to(DEV), torch.randn(B, d, generator=g).to(DEV)
    q = math.ceil(n // 100 / B) + 1
    out = {"n": n, "d": d, "B": B, "exact_s": timed(lambda: (h @ W.T).topk(q, dim=1), repeats)[0], "pools": {},
           "storage": {}}
    for P in pools:
        cand = torch.randint(n, (B, P), generator=g).sort(1).values.to(DEV)                     # (B, P)
        out["pools"][P] = timed(lambda: torch.stack([W.index_select(0, cand[b]) @ h[b] for b in range(B)]), repeats)[0]
        print(f"n={n} re-rank of {P} gathered rows per query {out['pools'][P]:.3f} s, exact top-k {out['exact_s']:.3f} s", flush=True)
    P, cand = first_P, torch.randint(n, (B, first_P), generator=g).sort(1).values.to(DEV)   # (B, P)
    Wb, hb = W.to(torch.bfloat16), h.to(torch.bfloat16)
    s8 = W.abs().amax(1) / 127                                                                  # (n,) per-row scale
    W8 = (W / s8.unsqueeze(1)).round().to(torch.int8)                                           # (n, d)
    firsts = {"float32": lambda b: W.index_select(0, cand[b]) @ h[b],
              "bfloat16": lambda b: Wb.index_select(0, cand[b]) @ hb[b],
              "int8 x row scale": lambda b: (W8.index_select(0, cand[b]).float() @ h[b]) * s8[cand[b]]}
    for name, f in firsts.items():
        out["storage"][name] = {"P": P, "s": timed(lambda: torch.stack([f(b) for b in range(B)]), repeats)[0]}
        print(f"n={n} {P} rows per query read as {name}: {out['storage'][name]['s']:.3f} s", flush=True)
    return out


def kmeans_compare(n: int, d: int, settings=((32, 8192, 20), (1024, None, 5))) -> list[dict]:
    """xcbench.kmeans (Lloyd in torch) against faiss.Kmeans on the mixture: K centroids fitted on a
    sample of `fit` rows (None: all n) for `iters` iterations from the same initial rows, then every
    row assigned; wall seconds and the mean squared distance to the assigned centroid."""
    if not has("faiss") or DEV.type != "cpu":
        return []
    import faiss
    import numpy as np

    from xcbench.kmeans import kmeans, nearest

    W = mixture(n, d, torch.Generator().manual_seed(0))
    rows = []
    for K, fit, iters in settings:
        g = torch.Generator().manual_seed(5)
        X = W[torch.randperm(n, generator=g)[:fit]] if fit else W
        C0 = X[torch.randperm(len(X), generator=g)[:K]].clone()
        t0 = time.perf_counter()
        C, _ = kmeans(X, C0, max_iter=iters)
        a = nearest(W, C)
        ours = time.perf_counter() - t0
        mse_ours = (W - C[a]).square().sum(1).mean().item()
        t0 = time.perf_counter()
        km = faiss.Kmeans(d, K, niter=iters, seed=5, max_points_per_centroid=len(X) // K + 1)
        km.train(np.ascontiguousarray(X.numpy()), init_centroids=np.ascontiguousarray(C0.numpy()))
        _, I = km.index.search(np.ascontiguousarray(W.numpy()), 1)
        theirs = time.perf_counter() - t0
        Cf = torch.from_numpy(km.centroids)
        mse_faiss = (W - Cf[torch.from_numpy(I[:, 0])]).square().sum(1).mean().item()
        rows.append({"n": n, "d": d, "K": K, "fit_rows": len(X), "iters": iters, "ours_s": ours, "faiss_s": theirs,
                     "ours_mse": mse_ours, "faiss_mse": mse_faiss})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def family(tag: str) -> str:
    """A row's marker group: the selector's name, HF's best-first walks apart."""
    name = tag.split()[0]
    return "hf best-first" if name == "hf" and "probe=" in tag else name


def where(meta: dict) -> str:
    """The header's machine: the GPU's name on CUDA, else the CPU threads (older JSON has no device)."""
    dev = meta.get("device", "")
    return f"CUDA, {dev}, torch {meta['torch']}" if meta.get("cuda") else f"{meta['threads']} CPU threads, {meta['machine']}"


def mixture_mass(rows: list[dict]) -> str:
    """Why the mass column is near 0 on the mixture, with optimal's and random's shares from `rows`."""
    mass = {(r["n"], r["selector"]): r["mass"] for r in rows if "mass" in r}
    ns = sorted(n for n, sel in mass if sel == "optimal" and (n, "random") in mass)
    if not ns:
        return ""
    ratios = [mass[n, "optimal"] / mass[n, "random"] for n in ns]
    shares = [mass[n, sel] for n in ns for sel in ("optimal", "random")]
    span = f"{min(ratios):.1f}" if f"{min(ratios):.1f}" == f"{max(ratios):.1f}" else f"{min(ratios):.1f}-{max(ratios):.1f}"
    return (" On the mixture the logits W h are of unit scale, so the softmax spreads over all n classes and any "
            f"selection holds about |S_i| / n of it (optimal's top-q {span}x random's share, "
            f"both {share(min(shares))} to {share(max(shares))}): the column tells the selectors apart on trained "
            "embeddings (`--trained`, selectors_trained.md), not here.")


def share(m: float) -> str:
    """A share in [0, 1] to three decimals, or to two significant digits where three decimals would print 0."""
    return f"{m:.3f}" if m >= 0.0005 else f"{m:.1e}"


def selector_table(rows: list[dict], name: str, meta: dict) -> list[str]:
    """Precision vs selection time: the figure OUT/<name>.png and the table's markdown lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = sorted({r["n"] for r in rows})
    fig, axes = plt.subplots(1, len(ns), figsize=(4.2 * len(ns), 3.4), squeeze=False)
    for ax, n in zip(axes[0], ns):
        for fam, mk in (("optimal", "*"), ("random", "x"), ("pca_hash", "s"), ("kmeans", "D"), ("hf", "o"),
                        ("hf best-first", "P"), ("faiss_ivf", "^"), ("annoy", "v")):
            pts = [(1000 * r["select_s"], r["precision"]) for r in rows if r["n"] == n and family(r["selector"]) == fam]
            if pts:
                ax.scatter(*zip(*pts), marker=mk, label=fam, s=22)
        ax.set_xscale("log")
        ax.set_xlabel("selection time per batch (ms)")
        ax.set_ylabel("precision vs optimal")
        ax.set_title(f"n = {n:,}, M = 1%")
        ax.legend(frameon=False, fontsize=7)
    fig.tight_layout()
    fig.savefig(OUT / f"{name}.png", dpi=130)
    lines = [f"# Selectors: precision vs selection time ({where(meta)})", "",
             meta.get("embeddings", "Class embeddings: a mixture of n/100 clusters (benchmarks/selector_bench.py docstring)") +
             f"; B = {rows[0]['B']} queries, M = 1% of n, precision = share of each query's exact top-q negatives "
             "(q = ceil(M / B)) in its own selection.", "",
             "Mass: the share of each query's softmax mass over its negatives, sum_{c != y} softmax(W h)_c, that its "
             "own selection covers (the part of the negatives' gradient the restricted softmax keeps)." +
             ("" if "embeddings" in meta else mixture_mass(rows)), "",
             "Pooled: HF's distinct classes re-ranked per query.", "",
             "| n | selector | build (s) | selection (ms / batch) | precision | mass | selected (batch) | pooled / query | "
             "selection / optimal's |",
             "|---|---|---|---|---|---|---|---|---|"]
    for n in ns:
        opt = next(r["select_s"] for r in rows if r["n"] == n and r["selector"] == "optimal")
        for r in (r for r in rows if r["n"] == n):
            mass = share(r["mass"]) if "mass" in r else "-"  # runs before the column was added
            pooled = f"{r['pooled']:,.0f}" if "pooled" in r else "-"
            lines.append(f"| {n:,} | {r['selector']} | {r['build_s']:.2f} | {1000 * r['select_s']:.1f} | "
                         f"{r['precision']:.3f} | {mass} | {r['selected']} | {pooled} | {r['select_s'] / opt:.3f} |")
    return lines


def render(rows: list[dict], steps: list[dict], km: list[dict], name: str, meta: dict, floor: list[dict] = ()) -> None:
    lines = selector_table(rows, name, meta) if rows else [
        f"# The re-rank's floor ({where(meta)}; benchmarks/selector_bench.py --floor-only)"]
    for fl in floor:
        lines += ["", f"The re-rank's floor at n = {fl['n']:,} (B = {fl['B']}, d = {fl['d']}): P sorted random rows gathered "
                  f"per query and multiplied by it (`rerank_floor`), against exact top-k ({1000 * fl['exact_s']:.0f} ms, one "
                  f"(B, n) product):", "", "| rows per query P | re-rank (ms) | / exact top-k |", "|---|---|---|"]
        lines += [f"| {int(P):,} | {1000 * s:.0f} | {s / fl['exact_s']:.2f} |" for P, s in fl["pools"].items()]
        if fl.get("storage"):
            lines += ["", "Gathers of P rows per query from cheaper copies of W (a first pass; an exact re-rank of a "
                      "short list would follow), side by side in the same run:", "",
                      "| rows read as | rows per query P | first pass (ms) | / exact top-k |", "|---|---|---|---|"]
            lines += [f"| {k} | {v['P']:,} | {1000 * v['s']:.0f} | {v['s'] / fl['exact_s']:.2f} |" for k, v in fl["storage"].items()]
    for st in steps:
        lines += ["", f"One training step at n = {st['n']:,} (loss, backward, lazy Adam; B = {st['B']}, d = {st['d']}, "
                  f"M = {st['M']:,}; index built beforehand):", "",
                  "| head | selector setting | step (s) | speed-up vs full |", "|---|---|---|---|",
                  f"| full softmax | - | {st['full_step_s']:.3f} | 1.0x |"]
        lines += [f"| selective | {k} {STEP_SELECTORS[k][1]} | {st[k + '_step_s']:.3f} | {v:.1f}x |"
                  for k, v in st["speedup"].items()]
    if km:
        lines += ["", "k-means: xcbench.kmeans (torch Lloyd) vs faiss.Kmeans, same initial centroids, then every row assigned:", "",
                  "| n | d | K | rows fitted | iterations | ours (s) | faiss (s) | ours / faiss | MSE ours | MSE faiss |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['n']:,} | {r['d']} | {r['K']} | {r['fit_rows']:,} | {r['iters']} | {r['ours_s']:.2f} | {r['faiss_s']:.2f} | "
                  f"{r['ours_s'] / r['faiss_s']:.2f} | {r['ours_mse']:.4f} | {r['faiss_mse']:.4f} |" for r in km]
    data = {"meta": meta, "rows": rows, "steps": steps, "kmeans": km, "floor": list(floor)}
    write_outputs(name, data, "\n".join(lines))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, nargs="+", default=[10 ** 4, 10 ** 5, 10 ** 6])
    p.add_argument("--d", type=int, default=256)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--step-n", type=int, nargs="*", default=[10 ** 6])
    p.add_argument("--kmeans-n", type=int, nargs="*", default=[10 ** 6], help="k-means comparison sizes (needs faiss)")
    p.add_argument("--floor-only", action="store_true",
                   help="only the re-rank's floor at --step-n (and its cheaper row copies): no selectors, steps or k-means")
    p.add_argument("--name", default="selectors")
    p.add_argument("--render-only", action="store_true",
                   help="rewrite OUT/<name>.md and .png from OUT/<name>.json without measuring")
    p.add_argument("--trained", type=Path, metavar="RUN_DIR",
                   help="a class-selection run folder with checkpoint.pt (.../<dataset>/<method>/seed0): its trained "
                        "class embeddings and encoder features replace the mixture (no step or k-means tables)")
    p.add_argument("--experiment", default="config/experiments/class_selection/fig2.yaml")
    p.add_argument("--processed", help="the run's dataset.npz (default data/processed/<dataset>/dataset.npz)")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda", "auto"),
                   help="where the embeddings, queries, selectors and steps live (faiss_ivf and the k-means table: CPU only)")
    a = p.parse_args()
    if a.render_only:
        saved = json.loads((OUT / f"{a.name}.json").read_text())
        return render(saved["rows"], saved["steps"], saved["kmeans"], a.name, saved["meta"], saved.get("floor", ()))
    global DEV
    from xcbench.device import device_name, pick_device

    DEV = pick_device(a.device)
    OUT.mkdir(exist_ok=True)
    meta = {"threads": torch.get_num_threads(), "machine": platform.machine(), "torch": torch.__version__,
            "device": device_name(DEV), "cuda": DEV.type == "cuda"}
    if a.trained:
        ds = a.trained.parent.parent.name
        W, h, y, meta["embeddings"] = trained(a.trained, a.experiment, ds,
                                              a.processed or f"data/processed/{ds}/dataset.npz", a.batch)
        rows, steps, km, floor = bench(W.to(DEV), h.to(DEV), y.to(DEV), a.repeats), [], [], []
    elif a.floor_only:
        rows, steps, km = [], [], []
        floor = [rerank_floor(n, a.d, a.batch, (2500, 5000, 10000, 20000), a.repeats) for n in a.step_n]
    else:
        rows = [r for n in a.n for r in bench_n(n, a.d, a.batch, a.repeats)]
        steps = [step_ratio(n, a.d, a.batch, a.repeats) for n in a.step_n]
        km = [r for n in a.kmeans_n for r in kmeans_compare(n, a.d)]
        floor = [rerank_floor(n, a.d, a.batch, (2500, 5000, 10000, 20000), a.repeats) for n in a.step_n]
    render(rows, steps, km, a.name, meta, floor)


if __name__ == "__main__":
    main()
