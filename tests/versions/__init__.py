"""Tests of SGLang versions: flag checks, version verdicts, space upgrade (tuner.versions)."""
