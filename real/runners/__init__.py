"""The real GRPO loops that drive the simulator's controllers: synchronous
(:func:`.sync.run_sync`), asynchronous with bounded staleness (:mod:`.async_loop` with its
generator process :mod:`.async_workers`), DAPO refill (:mod:`.refill`), collapse detection
(:mod:`.collapse`) and stability grids over (S, lr, seed) (:mod:`.stability`).
"""
