"""Rollout engines of the real runs, behind one interface (:class:`.torch_engine.RolloutEngine`:
generate a step's rollouts, take the learner's weights): the torch engine on CPU
(:mod:`.torch_engine`, token sampling in :mod:`.sampling`), the vLLM engine
(:mod:`.vllm_engine`; vllm is imported only when it is chosen), the choice between them
(:mod:`.factory`) and the timing grid measured on an engine (:mod:`.timing_grid`).
"""
