"""Tests of the search: study, TPE, workers, GPU slots, context, knowledge and warm start (tuner.search)."""
