"""Checks of a calibrated simulator against data it was not fitted on: held-out verl
steps (:mod:`.verl_holdout`), the straggler probability against G on grouped traces
(:mod:`.groups`), the spread between runs of one configuration (:mod:`.run_spread`) and
simulated against measured makespans of real steps (:mod:`.vllm_compare`).
"""
