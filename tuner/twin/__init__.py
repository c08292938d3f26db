"""The simulator's twin of a real GPU study: fit a profile's calibrated figures to the study's trials and server
logs (`python -m tuner twin fit`), and judge a profile against the trials (`_fidelity`, which
benchmarks/twin_fidelity.py also runs).
"""

from __future__ import annotations

from ._command import FitOptions, fit_command

__all__ = ["FitOptions", "fit_command"]
