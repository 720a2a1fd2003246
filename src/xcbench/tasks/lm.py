"""Word-level language modelling (PTB, WikiText-2): next-token prediction over the vocabulary.

Params (`task: {name: lm, params: {...}}`): bptt, train_tokens, eval_tokens, eval_streams (PARAMS).
Training: the training text (optionally its first `train_tokens` tokens, the quick scale's subset)
is cut into non-overlapping windows of `bptt` tokens, x = w[s : s+T], y = w[s+1 : s+T+1]; each epoch
visits the windows in an order drawn from the explicit generator, each window starting from a zero
recurrent state (stateless truncated BPTT: every position is a query h with target y; the head sees
(B*T, d) queries and (B*T,) targets).
Evaluation (`eval_state: carry`): the split's text (its first `eval_tokens` tokens when set) is cut into
`eval_streams` contiguous streams that are read `bptt` tokens at a time while the recurrent state is
carried, so every token is predicted from its whole history. `eval_state: zero` (the public MIDX
code's protocol) cuts the text into consecutive windows of `bptt` tokens (the last one shorter) and
reads each from a zero state, as training does; `acc` is the top-1 next-word accuracy; perplexity = exp(mean over tokens of
-log softmax(scores)_target) with the head's full scores over all n classes (metrics.perplexity).
The curves start before the first update (epoch 0).
"""

from __future__ import annotations

import torch

from xcbench import metrics as M
from xcbench.data.datasets import load_npz
from xcbench.registry import TASKS
from xcbench.tasks.base import Param, Task, shuffled_batches

EVAL_STATES = ("carry", "zero")
ZERO_STATE_CHUNK = 32  # windows scored at once (eval_state: zero): (32 * bptt, n) logits


@TASKS.register("lm")
class LMTask(Task):
    PARAMS = {"bptt": Param(int, 35, "tokens per training window / evaluation chunk"),
              "train_tokens": Param(int, None, "use only the first N training tokens (None: all)"),
              "eval_tokens": Param(int, None, "evaluate on the first N tokens of valid/test (None: all)"),
              "eval_streams": Param(int, 10, "parallel streams in evaluation (eval_state: carry)"),
              "eval_state": Param(str, "carry", "carry: state carried over the split; zero: each window from a zero state",
                                  EVAL_STATES)}
    eval_splits = ("val",)
    eval_at_start = True
    probe_size = 32

    def __init__(self, params: dict, entry: dict, processed: str, features: str | None, device: torch.device,
                 seed: int) -> None:
        arrays, meta = load_npz(processed)
        self.device = device
        self.T = params["bptt"]
        self.streams = params["eval_streams"]
        self.eval_state = params["eval_state"]
        cap = lambda a, n: a[:n] if n else a  # noqa: E731
        self.tokens = {"train": torch.from_numpy(cap(arrays["train_tokens"], params["train_tokens"])),
                       "val": torch.from_numpy(cap(arrays["valid_tokens"], params["eval_tokens"])),
                       "test": torch.from_numpy(cap(arrays["test_tokens"], params["eval_tokens"]))}
        self.n_classes = int(meta["n_classes"])
        self.in_dim = self.n_classes
        n_win = (len(self.tokens["train"]) - 1) // self.T
        self.starts = torch.arange(n_win) * self.T                                               # (W,)
        tr = self.tokens["train"]
        self.stats = {"label_counts": torch.bincount(tr[1:n_win * self.T + 1], minlength=self.n_classes),
                      "n_train": n_win * self.T}
        self.info = {"n_train_tokens": len(tr), "n_windows": n_win, "bptt": self.T, "n_classes": self.n_classes,
                     "n_val_tokens": len(self.tokens["val"]), "n_test_tokens": len(self.tokens["test"]),
                     "eval_streams": self.streams, "eval_state": self.eval_state}

    def n_train_batches(self, batch_size: int) -> int:
        return -(-len(self.starts) // batch_size)

    def train_batches(self, batch_size, gen, start=0):
        offs = torch.arange(self.T + 1)
        for b in shuffled_batches(len(self.starts), batch_size, gen, start=start):
            w = self.tokens["train"][self.starts[b].unsqueeze(1) + offs]                        # (B, T + 1)
            yield w[:, :-1].to(self.device), w[:, 1:].reshape(-1).to(self.device), b.to(self.device)

    @staticmethod
    def _score(model, x, y, state):
        """(sum of -log p(y), hits, new state) of one chunk of windows x (S, t), targets y (S, t)."""
        o, state = model.scores_with_state(x, state)                                            # (S*t, n)
        o, y = o.double(), y.reshape(-1)
        nll = (torch.logsumexp(o, 1) - o.gather(1, y.unsqueeze(1)).squeeze(1)).sum().item()
        return nll, (o.argmax(1) == y).sum().item(), state

    @torch.no_grad()
    def _evaluate_zero_state(self, model, tok):
        n = len(tok) - 1
        W = n // self.T
        x_all, y_all = tok[: W * self.T].view(W, self.T), tok[1: W * self.T + 1].view(W, self.T)   # (W, T)
        chunks = [(x_all[s:s + ZERO_STATE_CHUNK], y_all[s:s + ZERO_STATE_CHUNK]) for s in range(0, W, ZERO_STATE_CHUNK)]
        if n > W * self.T:  # the last, shorter window
            chunks.append((tok[W * self.T: n].unsqueeze(0), tok[W * self.T + 1: n + 1].unsqueeze(0)))
        nll, hit = 0.0, 0
        for x, y in chunks:
            a, b, _ = self._score(model, x.to(self.device), y.to(self.device), None)
            nll, hit = nll + a, hit + b
        return {"ppl": M.perplexity(nll, n), "nll": nll / n, "acc": hit / n}

    @torch.no_grad()
    def evaluate(self, model, split):
        tok = self.tokens[split]
        if self.eval_state == "zero":
            return self._evaluate_zero_state(model, tok)
        L = (len(tok) - 1) // self.streams
        x_all = tok[: L * self.streams].view(self.streams, L)                                    # (S, L)
        y_all = tok[1: L * self.streams + 1].view(self.streams, L)
        nll, hit, state = 0.0, 0, None
        for s in range(0, L, self.T):
            x, y = x_all[:, s:s + self.T].to(self.device), y_all[:, s:s + self.T].to(self.device)
            a, b, state = self._score(model, x, y, state)
            nll, hit = nll + a, hit + b
        n = L * self.streams
        return {"ppl": M.perplexity(nll, n), "nll": nll / n, "acc": hit / n}
