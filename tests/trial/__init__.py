"""Tests of one trial's stages (tuner.trial)."""
