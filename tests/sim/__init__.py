"""Tests of the simulated SGLang server (tuner.sim)."""
