"""The SimPy engine: W worker replicas under continuous batching, each a
:class:`EngineWorker` (the slot :class:`Worker`, or the :class:`PagedWorker` with KV blocks,
preemption, chunked prefill and a prefix cache), behind a dispatcher (:class:`Engine`);
:func:`generate` runs one synchronous generation phase; pause, resume and abort of running
requests (:mod:`.interrupts`); the vectorised fast path (:mod:`.fastpath`).
"""

from rolloutlab.sim import lazy_exports

# module of this package -> the interface names it defines
__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "core": "Engine generate",
        "config": "EngineConfig",
        "worker": "EngineWorker",
        "slot_worker": "Worker",
        "paged_worker": "PagedWorker",
        "batch": "Batch",
        "interrupts": "pause resume abort",
    },
)
