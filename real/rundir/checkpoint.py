"""Checkpoints of a real run: model (HF directory), optimiser, controller and RNG states.

Layout: ``<run>/checkpoints/step_000010/`` holds ``config.json`` + ``model.safetensors``
(loadable by transformers / vLLM), ``trainer.pt`` (optimiser, previous update, torch RNG
state; read with ``weights_only=True``), ``state.json`` (step, controller state, clock
offset, numpy/python RNG states) and ``manifest.json`` (sha256 of every other file). A
checkpoint is written into a temporary directory and renamed into place, so a run killed
mid-write leaves either the whole checkpoint or none; a file whose hash does not match
its manifest is a :class:`CheckpointError` naming it, and nothing is deleted then.
``step_k`` means steps ``0..k-1`` are done: a resumed run starts at step ``k``.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rolloutlab.real.policy.model import LlamaLM, load_pretrained, save_pretrained
from rolloutlab.sim.trace import strict_json

KEEP = 2
"""Checkpoints kept on disk (older ones are removed after a new one is in place)."""


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; the message names the file and what is wrong
    (bad input: exit code 2 from the command line)."""


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    """``run_dir/checkpoints/step_{step:06d}``."""
    return Path(run_dir) / "checkpoints" / f"step_{step:06d}"


def save(
    run_dir: Path, step: int, model: LlamaLM, trainer: dict[str, Any], state: dict[str, Any]
) -> Path:
    """Write the checkpoint after ``step`` completed steps; returns its directory.

    ``trainer``: tensors and plain values (``torch.save``); ``state``: JSON-serialisable.
    """
    final = checkpoint_dir(run_dir, step)
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)  # a torn write of our own earlier attempt
    save_pretrained(model, tmp)
    torch.save(trainer, tmp / "trainer.pt")
    strict_json.write_json(tmp / "state.json", {"step": step, **state})
    files = sorted(p.name for p in tmp.iterdir())
    (tmp / "manifest.json").write_text(
        json.dumps({"step": step, "sha256": {f: _sha256(tmp / f) for f in files}}, indent=2)
    )
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    for old in sorted(final.parent.glob("step_*[0-9]"))[:-KEEP]:
        shutil.rmtree(old)
    return final


def latest(run_dir: Path) -> Path | None:
    """The newest complete checkpoint directory of ``run_dir`` (None if there is none)."""
    done = sorted((Path(run_dir) / "checkpoints").glob("step_*[0-9]"))
    return done[-1] if done else None


def load(path: Path) -> tuple[LlamaLM, dict[str, Any], dict[str, Any]]:
    """``(model, trainer, state)`` of a checkpoint directory, after checking every hash.

    Raises: CheckpointError naming the missing, unreadable or altered file.
    """
    path = Path(path)
    manifest = path / "manifest.json"
    try:
        hashes = json.loads(manifest.read_text())["sha256"]
    except (OSError, ValueError, KeyError) as exc:
        raise CheckpointError(f"{manifest}: unreadable checkpoint manifest ({exc})") from None
    for name, digest in hashes.items():
        f = path / name
        if not f.exists():
            raise CheckpointError(f"{f}: listed in {manifest} but missing")
        if _sha256(f) != digest:
            raise CheckpointError(
                f"{f}: sha256 does not match {manifest}: the checkpoint is corrupt"
            )
    try:
        model = load_pretrained(path)
        trainer = torch.load(path / "trainer.pt", weights_only=True)
        state = json.loads((path / "state.json").read_text())
    except Exception as exc:
        raise CheckpointError(f"{path}: cannot load checkpoint: {exc}") from None
    return model, trainer, state


def global_rngs() -> dict[str, list]:
    """numpy's and Python's global RNG states as JSON-able lists (``numpy_rng``, ``python_rng``)."""
    np_state = np.random.get_state(legacy=False)  # stored in the legacy tuple's order
    py_state = random.getstate()
    mt = np_state["state"]
    return {
        "numpy_rng": [
            np_state["bit_generator"],
            mt["key"].tolist(),
            mt["pos"],
            np_state["has_gauss"],
            np_state["gauss"],
        ],
        "python_rng": [py_state[0], list(py_state[1]), py_state[2]],
    }


def restore_global_rngs(state: dict) -> None:
    """Inverse of :func:`global_rngs` (reads ``state["numpy_rng"]`` and ``state["python_rng"]``)."""
    n, p = state["numpy_rng"], state["python_rng"]
    np.random.set_state((n[0], np.array(n[1], dtype=np.uint32), *n[2:]))
    random.setstate((p[0], tuple(p[1]), p[2]))
