"""Supervised warm start: a short next-token fit on worked solutions, cached in the run directory.

RL from a random tiny model never sees a reward; a few hundred supervised steps teach the
format (both scratchpads, :attr:`real.task.TaskConfig.p_long` of them long) and some of the
arithmetic, leaving RL the rest. The result is saved as a Hugging Face model directory
(``<run>/warmstart/``) with ``warmstart.json`` holding the settings that made it; a later
run in the same directory with the same settings loads it instead of training again.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
from rolloutlab.real.config import WarmStartConfig
from rolloutlab.real.learner import pad_prompt_response
from rolloutlab.real.model import (
    LlamaConfig,
    LlamaLM,
    build_model,
    load_pretrained,
    save_pretrained,
)
from rolloutlab.real.task import Problem, TaskConfig, sample_problems
from tqdm import tqdm


def sft_batch(problems: list[Problem], longs: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """``ids (N, T)`` of prompt + solution (right-padded) and the loss mask ``(N, T - 1)``
    that selects the solution tokens as targets."""
    return pad_prompt_response(
        [p.prompt_ids for p in problems],
        [p.solution_ids(bool(lg)) for p, lg in zip(problems, longs)],
    )


def train_warm_start(
    model: LlamaLM, task: TaskConfig, cfg: WarmStartConfig, exclude: frozenset[str]
) -> list[float]:
    """Fit ``model`` in place on ``cfg.steps`` batches; returns the per-step loss (nats/token)."""
    rng = np.random.default_rng([cfg.seed, 1])
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    losses = []
    model.train()
    # a bar on a terminal only (disable=None): the warm start takes most of a minute
    for _ in tqdm(
        range(cfg.steps), desc="supervised warm start", unit="step", disable=None, leave=False
    ):
        problems = sample_problems(rng, task, cfg.batch_size, exclude)
        ids, mask = sft_batch(problems, rng.random(cfg.batch_size) < task.p_long)
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


def cached_warm_start(
    run_dir: Path,
    model_cfg: LlamaConfig,
    task: TaskConfig,
    cfg: WarmStartConfig,
    exclude: frozenset[str],
) -> LlamaLM:
    """The warm-started model of ``run_dir``: loaded when ``run_dir/warmstart`` was made with
    the same settings, else trained from a seeded initialisation and saved there."""
    out = Path(run_dir) / "warmstart"
    key = {"model": asdict(model_cfg), "task": asdict(task), "warm_start": asdict(cfg)}
    meta = out / "warmstart.json"
    if meta.exists() and json.loads(meta.read_text()).get("key") == key:
        return load_pretrained(out)
    model = build_model(model_cfg, cfg.seed)
    t0 = time.perf_counter()
    losses = train_warm_start(model, task, cfg, exclude)
    seconds = time.perf_counter() - t0
    save_pretrained(model, out)
    meta.write_text(
        json.dumps(
            {"key": key, "final_loss": losses[-1] if losses else None, "seconds": seconds}, indent=2
        )
    )
    return model
