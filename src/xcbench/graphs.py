"""Training steps replayed as CUDA graphs (`train.cuda_graph: true`; needs `train.draws: device` and a GPU).

With every draw on the device a step makes no host synchronisation (seed.py), so the whole step (loss,
backward, clipping, optimizer step, after-step hook) can be captured once and replayed, and the host's
kernel launches stop bounding it: 3.7-8.6x faster on MIDX Table 4's PTB steps on an H200, 1.2-2.0 ms a step
(studies/cuda_graphs). Per epoch: the first WARMUP batches run eagerly on a side stream (optimizer state and
library workspaces are created lazily), the next one is captured with copies of its tensors as the graph's
inputs and replayed, and every later batch of the same shapes is copied into those inputs and replayed; a
batch of other shapes or dtypes runs eagerly. `reset` at each epoch start drops the graph: an index rebuild,
a new learning rate or new buffers need a fresh capture. Only heads that declare `graph_safe` (no host
synchronisation and no step-count-dependent hook in their step) are captured; the loop asks `check`.
"""

from __future__ import annotations

from typing import Callable

import torch

from xcbench.config import ConfigError

WARMUP = 2  # eager steps before each epoch's capture


def check(train_cfg: dict, device: torch.device, head) -> bool:
    """Whether `train.cuda_graph` asks for captured steps, with a clear error where they cannot be had."""
    if not train_cfg.get("cuda_graph", False):
        return False
    if device.type != "cuda":
        raise ConfigError(f"train.cuda_graph needs a CUDA device (this run is on {device.type}); drop it or run with "
                          "--device cuda")
    if train_cfg.get("draws", "cpu") != "device":
        raise ConfigError("train.cuda_graph needs train.draws: device (draws on a CPU generator synchronise every step)")
    if not getattr(head, "graph_safe", False):
        raise ConfigError(f"train.cuda_graph: head {type(head).__name__} synchronises with the host or counts steps "
                          "inside its step, so it cannot be captured; drop cuda_graph for it")
    return True


def _same(a, b) -> bool:
    if torch.is_tensor(a) and torch.is_tensor(b):
        return a.shape == b.shape and a.dtype == b.dtype and a.device == b.device
    return a is None and b is None


class GraphedStep:
    """step(x, y, idx) -> loss, replayed from a CUDA graph where the batch's shapes allow (module docstring)."""

    def __init__(self, step: Callable, generators: tuple[torch.Generator, ...] = ()) -> None:
        self.step, self.generators = step, tuple(g for g in generators if g.device.type == "cuda")
        self.captures = self.replays = 0
        self.reset()

    def reset(self) -> None:
        self.graph, self.inputs, self.out, self.seen = None, None, None, 0

    def __call__(self, x, y, idx):
        batch = (x, y, idx)
        if self.graph is not None:
            if not all(_same(a, b) for a, b in zip(batch, self.inputs)):
                return self.step(*batch)
            for mine, theirs in zip(self.inputs, batch):
                if torch.is_tensor(mine):
                    mine.copy_(theirs)
            self.graph.replay()
            self.replays += 1
            return self.out
        if self.seen < WARMUP:
            self.seen += 1
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                out = self.step(*batch)
            torch.cuda.current_stream().wait_stream(side)
            return out
        self.inputs = tuple(t.clone() if torch.is_tensor(t) else t for t in batch)
        graph = torch.cuda.CUDAGraph()
        for g in self.generators:
            graph.register_generator_state(g)
        try:
            with torch.cuda.graph(graph):
                self.out = self.step(*self.inputs)
        except RuntimeError as e:
            raise RuntimeError(f"train.cuda_graph: capturing the training step failed ({str(e)[:200]}): a call in it "
                               "synchronises with the host (multi-label targets, a trainable proposal); drop cuda_graph "
                               "for this run") from e
        self.graph = graph
        self.captures += 1
        graph.replay()  # capture records the step without running it
        self.replays += 1
        return self.out
