"""Tests of the commands that read a study back: show, export, confirm, report, dashboard (tuner.results)."""
