"""Supervised warm start: a short next-token fit on worked solutions, cached in the run directory.

RL from a random tiny model never sees a reward; a few hundred supervised steps teach the
format (both scratchpads, :attr:`real.task.TaskConfig.p_long` of them long) and some of the
arithmetic, leaving RL the rest. The result is saved as a Hugging Face model directory
(``<run>/warmstart/``) with ``warmstart.json`` holding the settings that made it; a later
run in the same directory with the same settings loads it instead of training again.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from real.model import LlamaConfig, LlamaLM, build_model, load_pretrained, save_pretrained
from real.task import Problem, TaskConfig, sample_problems
from real.tokenizer import PAD_ID


@dataclass(frozen=True)
class WarmStartConfig:
    """Supervised warm-start settings."""

    steps: int = 300
    """AdamW steps (0: RL starts from the random initialisation)."""
    batch_size: int = 64
    """Worked solutions per step."""
    lr: float = 3e-3
    """AdamW learning rate, cosine-decayed to 0."""
    seed: int = 0
    """Seeds the initialisation and the problems."""


def sft_batch(problems: list[Problem], longs: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """``ids (N, T)`` of prompt + solution (right-padded) and the loss mask ``(N, T - 1)``
    that selects the solution tokens as targets."""
    seqs = [(p.prompt_ids, p.solution_ids(bool(lg))) for p, lg in zip(problems, longs)]
    t = max(len(a) + len(b) for a, b in seqs)
    ids = torch.full((len(seqs), t), PAD_ID, dtype=torch.long)
    mask = torch.zeros(len(seqs), t - 1)
    for i, (a, b) in enumerate(seqs):
        ids[i, : len(a) + len(b)] = torch.tensor(a + b)
        mask[i, len(a) - 1: len(a) + len(b) - 1] = 1.0
    return ids, mask


def train_warm_start(model: LlamaLM, task: TaskConfig, cfg: WarmStartConfig,
                     exclude: frozenset[str]) -> list[float]:
    """Fit ``model`` in place on ``cfg.steps`` batches; returns the per-step loss (nats/token)."""
    rng = np.random.default_rng([cfg.seed, 1])
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(cfg.steps, 1))
    losses = []
    model.train()
    for _ in range(cfg.steps):
        problems = sample_problems(rng, task, cfg.batch_size, exclude)
        ids, mask = sft_batch(problems, rng.random(cfg.batch_size) < task.p_long)
        logits = model(ids)[:, :-1]  # (N, T-1, V)
        nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
        loss = (nll * mask).sum() / mask.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
    return losses


def cached_warm_start(run_dir: Path, model_cfg: LlamaConfig, task: TaskConfig, cfg: WarmStartConfig,
                      exclude: frozenset[str]) -> LlamaLM:
    """The warm-started model of ``run_dir``: loaded when ``run_dir/warmstart`` was made with
    the same settings, else trained from a seeded initialisation and saved there."""
    out = Path(run_dir) / "warmstart"
    key = {"model": asdict(model_cfg), "task": asdict(task), "warm_start": asdict(cfg)}
    meta = out / "warmstart.json"
    if meta.exists() and json.loads(meta.read_text()).get("key") == key:
        return load_pretrained(out)
    model = build_model(model_cfg, cfg.seed)
    losses = train_warm_start(model, task, cfg, exclude)
    save_pretrained(model, out)
    meta.write_text(json.dumps({"key": key, "final_loss": losses[-1] if losses else None}, indent=2))
    return model
