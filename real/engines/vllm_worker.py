"""The worker-side half of the weight sync: methods vLLM grafts onto its GPU worker.

vLLM (0.24.0: ``vllm/v1/worker/worker_base.py``) takes a class named by
``worker_extension_cls`` (a qualified-name string), checks that none of its attributes
clash with the worker's, adds it to the worker's bases, and lets the driver call its
methods by name through ``LLM.collective_rpc(name, args=...)``. Inside a method ``self``
is the worker: ``self.model_runner.model`` is the loaded model, whose
``load_weights(weights)`` takes an iterable of ``(hf_name, tensor)`` pairs and copies
each into its (possibly fused, e.g. ``qkv_proj``) parameter with its own weight loader
(``vllm/model_executor/models/llama.py``). This is the path of vLLM's RLHF examples
(``examples/offline_inference/rlhf*.py``). The module imports neither vllm nor torch at
import time, so it can be named from any process.
"""

from __future__ import annotations


class WeightSyncExtension:
    """Mixed into vLLM's worker; every name is prefixed ``rolloutlab_`` to avoid clashes."""

    def rolloutlab_load_weights(self, named_tensors: list) -> int:
        """Load ``[(hf_name, tensor), ...]`` (CPU or GPU tensors, any float dtype) into the
        model in place; returns the number of tensors given. Parameters keep their storage,
        so captured CUDA graphs stay valid."""
        self.model_runner.model.load_weights(weights=named_tensors)
        return len(named_tensors)

    def rolloutlab_weight_checksum(self) -> float:
        """Sum of all parameters in float64 (a cheap probe that a sync changed the weights)."""
        total = 0.0
        for p in self.model_runner.model.parameters():
            total += float(p.detach().double().sum())
        return total
