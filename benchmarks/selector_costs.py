"""The selector benchmark's side measurements (benchmarks/selector_bench.py): one training step of the selective
softmax with each selector family against the full softmax's; the re-rank's floor, the least any pool-and-re-rank
selector pays (P gathered rows per query times h, against the (B, n) product of exact top-k); and xcbench's
k-means against faiss's.
"""

from __future__ import annotations

import json
import math
import time

import selector_common as sc
import torch

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

    W, h, y = (t.to(sc.DEV) for t in sc.mixture_problem(n, d, B))
    out = {"n": n, "d": d, "B": B, "M": n // 100}
    heads = {"full": lambda: FullSoftmax(d, n, torch.Generator().manual_seed(1))}
    for key, (sel, params) in STEP_SELECTORS.items():
        library = SELECTORS.get(sel).requires
        if library is None or (sc.has(library) and sc.DEV.type == "cpu"):
            heads[key] = lambda sel=sel, params=params: SelectiveSoftmax(
                d, n, torch.Generator().manual_seed(1), selector=sel, selector_params=params, M=n // 100)
    for key, make in heads.items():
        head = make().to(sc.DEV)
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
        out[f"{key}_step_s"] = sc.timed(step, repeats)[0]
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
    W, h = torch.randn(n, d, generator=g).to(sc.DEV), torch.randn(B, d, generator=g).to(sc.DEV)
    q = math.ceil(n // 100 / B) + 1
    out = {"n": n, "d": d, "B": B, "exact_s": sc.timed(lambda: (h @ W.T).topk(q, dim=1), repeats)[0], "pools": {},
           "storage": {}}
    for P in pools:
        cand = torch.randint(n, (B, P), generator=g).sort(1).values.to(sc.DEV)                     # (B, P)
        out["pools"][P] = sc.timed(lambda: torch.stack([W.index_select(0, cand[b]) @ h[b] for b in range(B)]), repeats)[0]
        print(f"n={n} re-rank of {P} gathered rows per query {out['pools'][P]:.3f} s, exact top-k {out['exact_s']:.3f} s", flush=True)
    P, cand = first_P, torch.randint(n, (B, first_P), generator=g).sort(1).values.to(sc.DEV)   # (B, P)
    Wb, hb = W.to(torch.bfloat16), h.to(torch.bfloat16)
    s8 = W.abs().amax(1) / 127                                                                  # (n,) per-row scale
    W8 = (W / s8.unsqueeze(1)).round().to(torch.int8)                                           # (n, d)
    firsts = {"float32": lambda b: W.index_select(0, cand[b]) @ h[b],
              "bfloat16": lambda b: Wb.index_select(0, cand[b]) @ hb[b],
              "int8 x row scale": lambda b: (W8.index_select(0, cand[b]).float() @ h[b]) * s8[cand[b]]}
    for name, f in firsts.items():
        out["storage"][name] = {"P": P, "s": sc.timed(lambda: torch.stack([f(b) for b in range(B)]), repeats)[0]}
        print(f"n={n} {P} rows per query read as {name}: {out['storage'][name]['s']:.3f} s", flush=True)
    return out


def kmeans_compare(n: int, d: int, settings=((32, 8192, 20), (1024, None, 5))) -> list[dict]:
    """xcbench.kmeans (Lloyd in torch) against faiss.Kmeans on the mixture: K centroids fitted on a
    sample of `fit` rows (None: all n) for `iters` iterations from the same initial rows, then every
    row assigned; wall seconds and the mean squared distance to the assigned centroid."""
    if not sc.has("faiss") or sc.DEV.type != "cpu":
        return []
    import faiss
    import numpy as np

    from xcbench.kmeans import kmeans, nearest

    W = sc.mixture(n, d, torch.Generator().manual_seed(0))
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
