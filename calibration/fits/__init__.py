"""Fits of the simulator's models: cost (:mod:`.cost_fit`, from vLLM timing grids
:mod:`.vllm_grid`, from vLLM's per-step scheduler timings :mod:`.vllm_steps`), response lengths (:mod:`.lengths_fit`, :mod:`.groups_fit`,
:mod:`.prompt_lengths`, :mod:`.icc`), pass rates (:mod:`.passrate_fit`, :mod:`.beta_grid`) and
learning progress (:mod:`.learning_fit`, :mod:`.reward_curve_fit`, :mod:`.learning_draws`,
:mod:`.verl_learning`); a whole verl run at once (:mod:`.verl_fit`); speculative
decoding's acceptance drift (:mod:`.speculative_drift`).
"""
