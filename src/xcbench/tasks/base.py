"""A task binds a dataset's prepared arrays to batches and to its evaluation protocol.

    Task(params, dataset entry, processed path, features path, device, seed)
      PARAMS                               {name: Param(type, default, help)}: the options of
                                           `task: {name, params}` in an experiment, checked by
                                           `parse_params` (unknown names and wrong types are errors)
      .in_dim, .n_classes, .stats          sizes and training-set statistics for `Head.setup`
      .train_batches(batch_size, gen, start)  one epoch of (x, y, idx) batches, order from `gen`, from batch `start`
      .read_ahead                          threads that generate lazily made batches ahead (`--read-ahead`)
      .probe_batch()                       a fixed (x, y) batch for the heads' per-epoch metrics
      .evaluate(model, split)              {metric name: value} on "val" or "test"
      .eval_splits, .eval_at_start         what the loop evaluates per epoch (and before the first)
      .trains                              False for a measurement (tasks/probes.py): the job calls
                                           `.measure(method spec, seed)` instead of training (train.execute)
"""

from __future__ import annotations

from typing import Any, Iterator, NamedTuple

import torch

from xcbench.catalogue import features_path
from xcbench.config import ConfigError
from xcbench.registry import TASKS
from xcbench.runspec import task_config


class Param(NamedTuple):
    type: type
    default: Any
    help: str
    choices: tuple | None = None  # the allowed values, where the param names an option


def _check(name: str, p: Param, v: Any, source: str) -> Any:
    ok = isinstance(v, p.type) and not (p.type is not bool and isinstance(v, bool))
    if p.type is float and isinstance(v, int) and not isinstance(v, bool):
        v, ok = float(v), True
    if v is None and p.default is None:
        ok = True
    if not ok:
        raise ConfigError(f"{source}: task param {name!r} must be {p.type.__name__}, got {v!r} ({p.help})")
    if p.choices and v not in p.choices:
        raise ConfigError(f"{source}: task param {name!r} must be one of {p.choices}, got {v!r} ({p.help})")
    return v


class Task:
    PARAMS: dict[str, Param] = {}
    trains = True                            # False: a measurement, nothing is trained (no `train:`)
    eval_splits: tuple[str, ...] = ("val",)  # evaluated after every epoch, keys prefixed "<split>_"
    eval_at_start = False                    # also evaluate before the first epoch (curves from epoch 0)
    probe_size = 256                         # examples in `probe_batch`
    pads_targets = False                     # True: single-label targets hold -1 where no query is (Model drops them)
    read_ahead: int | None = None            # threads generating lazy batches ahead (None: data.prefetch's default)
    inputs: dict[str, str] = {}              # digests of the input files (records.input_digests), for metrics.json

    @classmethod
    def parse_params(cls, params: dict | None, source: str = "experiment") -> dict:
        params = dict(params or {})
        unknown = sorted(set(params) - set(cls.PARAMS))
        if unknown:
            known = "; ".join(f"{k} ({p.type.__name__}, default {p.default!r}): {p.help}"
                              for k, p in sorted(cls.PARAMS.items())) or "none"
            raise ConfigError(f"{source}: task {cls.registry_name!r} has no params {unknown}; its params: {known}")
        return {k: _check(k, p, params.get(k, p.default), source) for k, p in cls.PARAMS.items()}

    def train_batches(self, batch_size: int, gen: torch.Generator, start: int = 0) -> Iterator[tuple[torch.Tensor, ...]]:
        raise NotImplementedError

    def n_train_batches(self, batch_size: int) -> int:
        raise NotImplementedError

    def probe_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The first `probe_size` training examples in a fixed order (the same every epoch)."""
        gen = torch.Generator().manual_seed(0)
        x, y, _ = next(iter(self.train_batches(self.probe_size, gen)))
        return x, y

    def evaluate(self, model: torch.nn.Module, split: str) -> dict[str, float]:
        raise NotImplementedError


def make_task(exp: dict, entry: dict, processed: str, features: str | None, device: torch.device, seed: int,
              source: str = "experiment", dataset: str | None = None) -> Task:
    """The experiment's task (`exp["task"] = {name, params}`) with its params checked; the dataset's
    `per_dataset: {<dataset>: {task: {name, params}}}` entry overrides them (e.g. a sequence length),
    or names another task for that dataset (a language-model column in a face-identification table),
    whose params then start from that entry's alone."""
    return build_task(*task_config(exp, dataset), entry, processed, features, device, seed, source, exp.get("features"))


def task_of(run, entry: dict, processed: str, features: str | None, device: torch.device,
            source: str = "experiment") -> Task:
    """The task of a run (run.Run), from the task settings the run resolved."""
    return build_task(run.task, run.task_params, entry, processed, features, device, run.seed, source,
                      run.spec["features"])


def build_task(name: str, params: dict, entry: dict, processed: str, features: str | None, device: torch.device,
               seed: int, source: str, wanted: dict | None = None) -> Task:
    """The task, refused before any data is read where the experiment's `features:` (`wanted`) names a file for
    this dataset and none was given (the file named, catalogue.features_path)."""
    want = features_path(wanted, entry)
    if features is None and want is not None:
        raise ConfigError(f"{source}: {entry['name']} reads fixed features and none were given: pass --features "
                          f"{want} (`snakemake --cores 1 {want}` builds it)")
    cls = TASKS.get(name)
    return cls(cls.parse_params(params, source), entry, processed, features, device, seed)


def load_features(features: str | None, dataset: str) -> dict:
    """The fixed features of a task that reads them (data/features/<dataset>/<extractor><dim>.pt), with a
    readable error where none was given."""
    if features is None:
        raise ConfigError(f"{dataset}: this task reads fixed features and none were given: pass --features "
                          f"data/features/{dataset}/<extractor><dim>.pt (the experiment's `features:` names the "
                          f"extractor and dim; `snakemake --cores 1 <that path>` builds it)")
    return torch.load(features, weights_only=True)


def shuffled_batches(n: int, batch_size: int, gen: torch.Generator, drop_last: bool = False, start: int = 0):
    """Index batches of a random permutation of range(n) drawn from `gen`, from batch `start` on (the
    whole permutation is drawn either way, so a resumed epoch sees the same order and leaves `gen` alike)."""
    perm = torch.randperm(n, generator=gen)
    stop = n - n % batch_size if drop_last else n
    for s in range(start * batch_size, stop, batch_size):
        yield perm[s:s + batch_size]
