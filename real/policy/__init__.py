"""The trained policy and its learner: the compact Llama model with Hugging Face parameter
names (:mod:`.model`), the GRPO/DAPO objective as pure tensor functions (:mod:`.grpo`),
the learner's optimiser steps (:mod:`.learner`), the supervised warm start
(:mod:`.warmstart`) and the CPU numerics that make two machines agree (:mod:`.numerics`).
"""
