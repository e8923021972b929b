"""rolloutlab.real: true GRPO on a real model, driven by the simulator's controllers. torch is
imported only here, vllm only inside :mod:`.engines.vllm_engine` when it is chosen.

Sub-packages by role: :mod:`.engines` (rollout engines), :mod:`.policy` (model, objective,
learner), :mod:`.tasks` (tasks and evaluation), :mod:`.runners` (the sync and async loops),
:mod:`.rundir` (run directory, configs, checkpoints, trace rows), :mod:`.integrations` (the
controllers inside TRL's and verl's trainers; each framework imported only there).
"""
