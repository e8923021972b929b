"""Rollout engines beyond the torch one: vLLM (GPU). Nothing here imports vllm at import time."""
