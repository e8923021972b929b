"""Rollout engines of the real runs, behind one interface (:mod:`.interface`:
:class:`~.interface.RolloutEngine` generates a step's rollouts and takes the learner's
weights; its request and result types; the check that a prompt plus the response cap fits
the model): the torch engine on CPU
(:mod:`.torch_engine`, token sampling in :mod:`.sampling`), the vLLM engine
(:mod:`.vllm_engine`; vllm is imported only when it is chosen), the choice between them
(:mod:`.factory`) and the timing grid measured on an engine (:mod:`.timing_grid`).
"""
