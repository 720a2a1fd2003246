"""Model = encoder h = f(x) + head (docs/design.md, Interfaces): the only object the loop and the tasks see.

    loss(x, y, idx, gen)        the head's training loss of a batch (a trainable proposal steps on its own
                                loss inside it; the parts go to `head.loss_parts`); with
                                single-label targets per query row, rows with y = -1 (padding) are dropped
    scores(x) -> (B, C)         evaluation logits
    scores_with_state(x, state) -> (scores, state)   the same for a stateful encoder over a stream
    embed(x) -> (B, d)          the representation used for evaluation (verification, retrieval)

`tie_embeddings: true` in the model config makes the encoder's input table (token or item
embeddings) and the head's class embeddings one Parameter (Press & Wolf 2017; SASRec ties items):
it needs the table's shape (C, d) to equal the head's (n classes, encoder out_dim).

`encoder` is either a config {name, **params} or the key of an entry of `model.encoders`, so that
one experiment can compare encoders (MIDX Table 4: LSTM and Transformer) with each method naming
one: `model: {encoder: LSTM, encoders: {LSTM: {name: lstm_lm, ...}, Transformer: {...}}}`.
"""

from __future__ import annotations

from torch import nn

from xcbench.config import ConfigError
from xcbench.registry import ENCODERS, HEADS
from xcbench.runspec import encoder_config
from xcbench.seed import torch_generator


class Model(nn.Module):
    def __init__(self, encoder: nn.Module, head: nn.Module) -> None:
        super().__init__()
        self.encoder, self.head = encoder, head
        self.padded_targets = True  # targets may hold -1 (set from the task: reading y.min() waits for a GPU)

    def encode(self, x, state=None):
        """(h, state): h (N, d) one row per query; state None for a stateless encoder."""
        return self.encoder(x, state) if self.encoder.stateful else (self.encoder(x), None)

    def loss(self, x, y, idx, gen):
        h = self.encode(x)[0]
        if self.padded_targets and y.dim() == 1 and len(y) == len(h) and y.min() < 0:  # padding (-1) is no target
            keep = y >= 0
            h, y = h[keep], y[keep]
        return self.head.loss(h, y, idx, gen)

    def scores(self, x):
        return self.head.scores(self.encode(x)[0])

    def scores_with_state(self, x, state):
        h, state = self.encode(x, state)
        return self.head.scores(h), state

    def embed(self, x):
        return self.encoder.embed(x)


def tie(encoder: nn.Module, head: nn.Module) -> None:
    """Make the encoder's input table and the head's class embeddings one Parameter."""
    table, W = encoder.input_embedding(), head.class_embeddings()
    if table is None or W is None:
        side = "encoder" if table is None else "head"
        raise ConfigError(f"model.tie_embeddings: the {side} ({type(encoder if table is None else head).__name__}) "
                          "has no embedding table to tie")
    if table.weight.shape != W.shape:
        raise ConfigError(f"model.tie_embeddings: input table {tuple(table.weight.shape)} != class embeddings "
                          f"{tuple(W.shape)}; set the encoder's embedding size equal to its output size")
    table.weight = W
    head.tied = True


def build_model(model_cfg: dict, head_name: str, head_params: dict, in_dim: int, n_classes: int,
                seed: int) -> Model:
    gen = torch_generator(seed, "init")
    enc_cfg = encoder_config(model_cfg)
    encoder = ENCODERS.get(enc_cfg.pop("name"))(in_dim, gen, **enc_cfg)
    head = HEADS.get(head_name)(encoder.out_dim, n_classes, gen, **head_params)
    if model_cfg.get("tie_embeddings", False):
        tie(encoder, head)
    return Model(encoder, head)
