"""Tests of the space file, read and checked (tuner.spec)."""
