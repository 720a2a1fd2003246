"""What a training step's time is measured against (benchmarks/train_step.py's columns).

- matmul floor: the step's matrix-product FLOPs F, counted by torch's FlopCounterMode forward and backward,
  plus the fused recurrent layers it counts as 0 (`rnn_flop_formulas`: 2 x tokens x sum of the weight matrices'
  entries forward, twice that backward), with a sparse operand's products counted at its stored entries
  (`sparse_flop_formulas`: the counter prices a CSR x dense product as dense and a sampled product at 0),
  at the device's float32 product rate R measured here (`gemm_gflops`, a 2048^3 product): floor = F / R.
  Gathers, element-wise work and launches are not in it.
- host syncs: the synchronising CUDA calls one step makes, by source line (`syncs_of_a_step`).
- optimizer ms: the optimizer's update alone (`optimizer_seconds`), the part no sampler or loss change removes.
"""

from __future__ import annotations

import functools
import statistics
import time
from pathlib import Path

import torch


def sync(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA); nothing on the CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize()


def _rnn_flops(input, *weights, out_shape=None, backward: bool = False, **_) -> int:
    """A fused recurrent op's matrix products, which torch's FlopCounterMode does not count (nn.LSTM runs as
    mkldnn_rnn_layer on the CPU, _cudnn_rnn on CUDA, counted as 0 FLOPs): 2 x tokens x the entries of every
    weight matrix (w_ih, w_hh of each layer) forward, twice that backward (the inputs' and the weights'
    gradients). `input` (T, B, I) or (B, T, I); `weights` the op's other arguments, matrices among them."""
    mats = [w for w in _flat(weights) if isinstance(w, torch.Size) and len(w) == 2]
    tokens = input[0] * input[1] if len(input) == 3 else input[0]
    return (4 if backward else 2) * tokens * sum(m[0] * m[1] for m in mats)


def _flat(xs):
    for x in xs:
        if isinstance(x, (list, tuple)) and not isinstance(x, torch.Size):
            yield from _flat(x)
        else:
            yield x


def _rnn_layer_flops(input, w_ih, w_hh, *_, out_shape=None, backward: bool = False, **__) -> int:
    """mkldnn_rnn_layer(_backward): one layer, its input-hidden and hidden-hidden matrices next to its input."""
    return _rnn_flops(input, w_ih, w_hh, backward=backward)


def rnn_flop_formulas() -> dict:
    """FlopCounterMode's custom_mapping for the fused recurrent ops of this torch (those it has)."""
    aten, out = torch.ops.aten, {}
    for name, f, back in (("mkldnn_rnn_layer", _rnn_layer_flops, False), ("mkldnn_rnn_layer_backward", _rnn_layer_flops, True),
                          ("_cudnn_rnn", _rnn_flops, False), ("_cudnn_rnn_backward", _rnn_flops, True)):
        if hasattr(aten, name):
            out[getattr(aten, name)] = functools.partial(f, backward=back)
    return out


def _sparse_mm_flops(a, b, *_, out_val=None, **__) -> int:
    """mm: 2 x stored entries x columns for a sparse left operand (heads/row_dots.py's backward), else 2 M K N."""
    if a.layout != torch.strided:
        return 2 * a.values().numel() * b.shape[1]
    return 2 * a.shape[0] * a.shape[1] * b.shape[1]


def _sampled_addmm_flops(pattern, m1, m2, *_, out_val=None, **__) -> int:
    """sparse_sampled_addmm: one K-long dot product per stored entry of the pattern."""
    return 2 * pattern.values().numel() * m1.shape[1]


_sparse_mm_flops._get_raw = _sampled_addmm_flops._get_raw = True  # FlopCounterMode hands them the tensors


def sparse_flop_formulas() -> dict:
    """FlopCounterMode's custom_mapping for products with a sparse operand, counted at their stored entries."""
    aten = torch.ops.aten
    return {aten.mm: _sparse_mm_flops, aten.sparse_sampled_addmm: _sampled_addmm_flops}


def matmul_flop_formulas() -> dict:
    """The custom_mapping train_step.py counts a step with: fused recurrent layers and sparse products."""
    return {**rnn_flop_formulas(), **sparse_flop_formulas()}


def gemm_gflops(device: torch.device, n: int = 2048, reps: int = 5) -> float:
    """The device's float32 matrix-product rate here (GFLOP/s, best of reps): what a step's matmul FLOPs
    would take if they ran at it (the `floor ms` column: the arithmetic floor, gathers and launches not counted)."""
    a = torch.randn(n, n, device=device)
    best = float("inf")
    for _ in range(reps + 1):
        sync(device)
        t0 = time.perf_counter()
        a @ a
        sync(device)
        best = min(best, time.perf_counter() - t0)
    return 2 * n ** 3 / best / 1e9


def syncs_of_a_step(step, device: torch.device) -> dict[str, int]:
    """Host synchronisations one call of `step()` makes on CUDA, by the source line that made them
    (torch.cuda.set_sync_debug_mode's warnings); {} on the CPU."""
    import warnings
    from collections import Counter

    if device.type != "cuda":
        return {}
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return dict(Counter(f"{Path(w.filename).name}:{w.lineno}" for w in seen if "synchroniz" in str(w.message)))


def optimizer_seconds(opt: torch.optim.Optimizer, steps: int, device: torch.device) -> float:
    """Median seconds of the optimizer's update alone (`optimizer_step`, as train_step makes it), repeated
    `steps` times on the gradients the last step left: the share of a step that no loss or sampler change can
    remove (dense Adam reads and writes every parameter row, and all its moments, whatever rows got a
    gradient). It moves the weights on; callers time it after every other measurement of the model."""
    from xcbench.runtime import optimizer_step

    times = []
    for _ in range(max(1, steps)):
        sync(device)
        t0 = time.perf_counter()
        optimizer_step(opt)
        sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
