"""Tests against real engines other than the simulator: vLLM on CPU, sglang-jax (tuner.engines)."""
