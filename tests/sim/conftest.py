"""Shared fixtures: `start_sim` starts simulators and always kills their process groups afterwards."""

from __future__ import annotations

from pathlib import Path

import pytest

from .simproc import SimFactory


@pytest.fixture
def start_sim(tmp_path: Path):
    factory = SimFactory(tmp_path)
    try:
        yield factory
    finally:
        factory.cleanup()  # always: every process group the test started dies with it

