"""Face identification on synthetic identities: closed-set training, open-set evaluation (Zhang et al.
2018, "Experimental Settings"; the MS-Celeb-1M / IJB-A / MegaFace stand-in, docs/design.md, Data).

Training and the per-epoch validation are those of `multiclass` (softmax over the training
identities). The test evaluation adds the open-set protocols on the generator's verification
identities, disjoint from the training ones, with the learned embedding (`Model.embed`, cosine):
- verification (IJB-A stand-in): every pair of samples of the first `probe_share` of the verification
  identities; TPR at FPR = `fpr` (1e-3 in the paper), `verif_tpr`;
- identification (MegaFace + FaceScrub stand-in): the gallery is the first sample of each of those
  probe identities plus every sample of the remaining identities (the distractors); each other sample
  of a probe identity is a query; top-1 hit rate, `ident_top1`.
With `open_val_ids: N`, each epoch's validation adds the same identification (`val_ident_top1`) and
verification (`val_verif_tpr`) on N further identities of the generator, unseen in training and disjoint
from the test's (data/faces.py, split "open_val"): a learning rate can then be chosen on the task's own
metric without looking at the test identities (closed-set top-1 on held-out images of the training
identities can rank runs in the opposite order).
"""

from __future__ import annotations

import json

import torch
import torch.nn.functional as F

from xcbench import metrics as M
from xcbench.data.datasets import load_npz
from xcbench.data.faces import FaceModel, LazyRows
from xcbench.registry import TASKS
from xcbench.tasks.base import Param
from xcbench.tasks.multiclass import MultiClassTask


def open_set_split(labels: torch.Tensor, probe_share: float) -> dict[str, torch.Tensor]:
    """Row indices of verification pairs' samples, gallery and queries from per-sample identities."""
    ids = torch.unique(labels)
    probe_ids = ids[: max(1, int(round(probe_share * len(ids))))]
    is_probe = torch.isin(labels, probe_ids)
    rows = torch.arange(len(labels))
    first = torch.ones(len(labels), dtype=torch.bool)
    first[1:] = labels[1:] != labels[:-1]                                       # first sample of each identity
    return {"pairs": rows[is_probe], "gallery": rows[(is_probe & first) | ~is_probe], "queries": rows[is_probe & ~first]}


@TASKS.register("faces")
class FacesTask(MultiClassTask):
    PARAMS = {**MultiClassTask.PARAMS,
              "fpr": Param(float, 1e-3, "false-positive rate of the verification TPR"),
              "probe_share": Param(float, 0.5, "share of verification identities used as probes; the rest are distractors"),
              "open_val_ids": Param(int, 0, "identities unseen in training, disjoint from the test's, identified at each "
                                    "epoch's validation (val_ident_top1, val_verif_tpr); 0: none")}

    def __init__(self, params, entry, processed, features, device, seed):
        super().__init__(params, entry, processed, features, device, seed)
        arrays, _ = load_npz(processed)
        if "lazy_spec" in arrays:
            model = FaceModel(**json.loads(str(arrays["lazy_spec"])))
            x, y = LazyRows(model, "verif")[:], torch.from_numpy(model.labels("verif"))
        elif "verif_x" in arrays:
            x, y = torch.from_numpy(arrays["verif_x"]).float(), torch.from_numpy(arrays["verif_y"]).long()
        else:
            raise ValueError(f"{processed}: task `faces` needs verification identities (verif_x, verif_y) from the "
                             "synthetic-faces generator; use task `multiclass` for other data")
        self.verif = (x * self.feature_scale, y)
        self.split = open_set_split(y, params["probe_share"])
        self.fpr = params["fpr"]
        self.info.update(n_verif_ids=int(len(torch.unique(y))), n_gallery=len(self.split["gallery"]),
                         n_queries=len(self.split["queries"]), n_pairs_samples=len(self.split["pairs"]))
        self.open_val = None
        if params["open_val_ids"]:
            gen = json.loads(str(arrays["lazy_spec"])) if "lazy_spec" in arrays else entry.get("params", {})
            if "lazy_spec" not in arrays and entry.get("generator") != "synthetic-faces":
                raise ValueError(f"{processed}: open_val_ids needs identities from the synthetic-faces generator; "
                                 f"dataset {entry.get('name')!r} has generator {entry.get('generator')!r}")
            fm = FaceModel(**gen, n_open_val_ids=params["open_val_ids"])
            vx, vy = fm.split_arrays("open_val")
            self.open_val = (torch.from_numpy(vx) * self.feature_scale, torch.from_numpy(vy))
            self.open_val_split = open_set_split(self.open_val[1], params["probe_share"])
            self.info.update(n_open_val_ids=params["open_val_ids"], n_open_val_rows=len(vy))

    def open_set(self, model, which: str = "test") -> dict[str, float]:
        """Verification TPR and identification top-1 on the test's verification identities, or on the open-set
        validation identities (`which="val"`)."""
        (x, y), split = (self.verif, self.split) if which == "test" else (self.open_val, self.open_val_split)
        return self._open_set(model, x, y, split)

    @torch.no_grad()
    def _open_set(self, model, x, y, split) -> dict[str, float]:
        E = torch.cat([F.normalize(model.embed(x[s:s + 4096].to(self.device)), dim=1).cpu()
                       for s in range(0, len(x), 4096)])                          # (n, e)
        p = split["pairs"]
        sim = E[p] @ E[p].T
        iu = torch.triu_indices(len(p), len(p), 1)
        tpr = M.tpr_at_fpr(sim[iu[0], iu[1]], (y[p][iu[0]] == y[p][iu[1]]), self.fpr)
        g, q = split["gallery"], split["queries"]
        top1 = M.topk_hit_rate(E[q] @ E[g].T, y[q], y[g], 1)
        return {"verif_tpr": tpr, "ident_top1": top1}

    def evaluate(self, model, split):
        out = super().evaluate(model, split)
        if split == "test":
            return {**out, **self.open_set(model)}
        return {**out, **self.open_set(model, "val")} if split == "val" and self.open_val is not None else out
