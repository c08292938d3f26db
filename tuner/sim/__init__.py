"""A simulated SGLang server for tests and dry runs of the tuner.

`python -m tuner.sim` takes SGLang's launch_server command line and serves SGLang's HTTP API; what it pretends
to be (hardware, model, SGLang version, which backends break) comes from a profile (see PROFILES.md). The same
physics is available without HTTP through `predict()`.
"""

from __future__ import annotations

from ._predict import Prediction, predict
from ._profile import Profile, ProfileError, load_profile, shipped_profiles

__all__ = ["Prediction", "Profile", "ProfileError", "load_profile", "predict", "shipped_profiles"]
