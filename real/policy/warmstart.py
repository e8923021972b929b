"""Supervised warm start: a short next-token fit on worked solutions, cached by a hash.

RL from a random tiny model never sees a reward; a few hundred supervised steps teach the
format (for ``digit-chain`` both scratchpads, :attr:`real.tasks.digit_chain.TaskConfig.p_long` of them
long; for ``graph-walk`` uniform random walks) and some of the skill, leaving RL the rest.

Two caches, both keyed by :func:`warm_start_key` (model config, task name and settings,
warm-start settings including the seed, the held-out prompts left out of its data, the
torch version, the CPU code path and whether numerics are pinned (:mod:`real.policy.numerics`)
and :data:`FORMAT`):

- the run directory's ``<run>/warmstart/`` (a Hugging Face model directory with
  ``warmstart.json`` holding the key): what a resumed run loads;
- a shared cache ``<cache_dir>/<sha256 of the key>/`` (default
  :func:`default_cache_dir`), so the runs of a comparison pay for one warm start; a run
  copies the entry into its own directory. ``cache_dir=None`` (``--no-cache``) neither
  reads nor writes it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rolloutlab.real.policy.learner import pad_prompt_response
from rolloutlab.real.policy.model import (
    LlamaConfig,
    LlamaLM,
    build_model,
    load_pretrained,
    save_pretrained,
)
from rolloutlab.real.policy.numerics import describe as describe_numerics
from rolloutlab.real.rundir.config import WarmStartConfig
from rolloutlab.real.tasks.registry import TaskOps
from rolloutlab.sim.trace import strict_json
from rolloutlab.sim.trace.progress import progress_bar

FORMAT = 1
"""Bumped when the warm-start procedure changes (so old cache entries stop matching)."""
CACHE_ENV = "ROLLOUTLAB_CACHE_DIR"
"""Environment variable overriding the shared cache's location."""


def default_cache_dir() -> Path:
    """``$ROLLOUTLAB_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/rolloutlab/warmstart``
    (``~/.cache/rolloutlab/warmstart``)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "rolloutlab" / "warmstart"


def warm_start_key(
    model_cfg: LlamaConfig, ops: TaskOps, cfg: WarmStartConfig, exclude: frozenset[str]
) -> dict[str, Any]:
    """Everything the warm-started weights depend on, as a JSON-able dict (the held-out
    prompts enter as the sha256 of their sorted texts).

    The run's ``eval_size`` enters through ``exclude`` (its first ``eval_size`` held-out
    prompts, which the warm start's batches leave out), so another ``eval_size`` is
    another key; the size itself is not a field, since two settings that leave out the
    same prompts train the same weights."""
    numerics = describe_numerics()
    held = hashlib.sha256("\n".join(sorted(exclude)).encode()).hexdigest()
    return {
        "format": FORMAT,
        "model": asdict(model_cfg),
        "task": ops.name,
        "task_settings": asdict(ops.settings),
        "warm_start": asdict(cfg),
        "heldout_sha256": held,
        "torch": torch.__version__,
        # the CPU model too, not only the vector ISA: an AVX-512 Intel Xeon and AMD EPYC
        # train different warm starts, with portable numerics as well (held-out start
        # 0.547 against 0.484, docs/real_task.md)
        "numerics": {k: numerics[k] for k in ("cpu_capability", "portable", "cpu")},
    }


def key_hash(key: dict[str, Any]) -> str:
    """sha256 of the key's canonical JSON (sorted keys): the shared cache entry's name."""
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()


def sft_batch(problems: list, solutions: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """``ids (N, T)`` of prompt + solution (right-padded) and the loss mask ``(N, T - 1)``
    that selects the solution tokens as targets."""
    return pad_prompt_response([p.prompt_ids for p in problems], solutions)


def train_warm_start(
    model: LlamaLM, ops: TaskOps, cfg: WarmStartConfig, exclude: frozenset[str]
) -> list[float]:
    """Fit ``model`` in place on ``cfg.steps`` batches; returns the per-step loss (nats/token)."""
    rng = np.random.default_rng([cfg.seed, 1])
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    losses = []
    model.train()
    # the warm start takes minutes: a bar on a terminal, plain lines in a log
    for _ in progress_bar(range(cfg.steps), desc="supervised warm start", unit="step"):
        problems = ops.sample(rng, cfg.batch_size, exclude)
        ids, mask = sft_batch(problems, ops.solutions(rng, problems))
        logits = model(ids)[:, :-1]  # (N, T-1, V)
        nll = torch.nn.functional.cross_entropy(
            logits.transpose(1, 2), ids[:, 1:], reduction="none"
        )
        loss = (nll * mask).sum() / mask.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def _copy_dir(src: Path, dst: Path) -> None:
    """Copy directory ``src`` to ``dst`` via a temporary sibling and a rename (a reader
    never sees a half-written ``dst``; if another process got there first, keep theirs)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dst.name}.", dir=dst.parent))
    shutil.copytree(src, tmp, dirs_exist_ok=True)
    try:
        os.rename(tmp, dst)
    except OSError:  # dst appeared meanwhile (another run): theirs is the same model
        shutil.rmtree(tmp, ignore_errors=True)


def _matches(d: Path, key: dict[str, Any]) -> bool:
    meta = d / "warmstart.json"
    try:
        return meta.exists() and json.loads(meta.read_text()).get("key") == key
    except ValueError:
        return False


def cached_warm_start(
    run_dir: Path,
    model_cfg: LlamaConfig,
    ops: TaskOps,
    cfg: WarmStartConfig,
    exclude: frozenset[str],
    cache_dir: Path | None = None,
) -> LlamaLM:
    """The warm-started model of ``run_dir``: loaded from ``run_dir/warmstart`` when it was
    made with the same key, else copied from ``cache_dir`` (when given and it holds the
    key's entry), else trained from a seeded initialisation and saved in both.

    Writes ``warmstart.json`` with ``key``, ``key_sha256``, ``final_loss``, ``seconds`` and
    ``source`` (``trained`` or ``cache``). Raises ValueError (from
    :func:`real.policy.model.load_pretrained`) on an unreadable model directory.
    """
    out = Path(run_dir) / "warmstart"
    key = warm_start_key(model_cfg, ops, cfg, exclude)
    if _matches(out, key):
        return load_pretrained(out)
    entry = None if cache_dir is None else Path(cache_dir) / key_hash(key)
    if entry is not None and _matches(entry, key):
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(entry, out)
        meta = json.loads((out / "warmstart.json").read_text())
        strict_json.write_json(out / "warmstart.json", {**meta, "source": "cache"})
        return load_pretrained(out)
    model = build_model(model_cfg, cfg.seed)
    t0 = time.perf_counter()
    losses = train_warm_start(model, ops, cfg, exclude)
    seconds = time.perf_counter() - t0
    save_pretrained(model, out)
    doc = {
        "key": key,
        "key_sha256": key_hash(key),
        "final_loss": losses[-1] if losses else None,
        "seconds": seconds,
        "source": "trained",
    }
    strict_json.write_json(out / "warmstart.json", doc)
    if entry is not None:
        _copy_dir(out, entry)
    return model


def initial_policy(
    run_dir: Path,
    model: str,
    ops: TaskOps,
    cfg: WarmStartConfig,
    exclude: frozenset[str],
    cache_dir: Path | None = None,
) -> LlamaLM:
    """The policy a run starts from (and its KL reference): the tiny model's
    :func:`cached_warm_start`, or the pretrained SmolLM2 (:func:`real.policy.smollm2.load_policy`,
    no warm start) when ``model`` is ``smollm2-135m``."""
    from rolloutlab.real.policy import smollm2

    if model == smollm2.MODEL_NAME:
        return smollm2.load_policy()
    from rolloutlab.real.policy.model import load_config

    return cached_warm_start(run_dir, load_config(), ops, cfg, exclude, cache_dir)
