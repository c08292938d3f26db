"""A simulated SGLang server for tests and dry runs of the tuner.

`python -m tuner.sim` takes SGLang's launch_server command line and serves SGLang's HTTP API; what it pretends
to be (hardware, model, SGLang version, which backends break) comes from a profile (see PROFILES.md). The same
physics is available without HTTP through `predict()`.
"""

from __future__ import annotations

import os

from ._model import GiB, PerfModel, kv_bytes_per_token_per_gpu, weight_split
from ._predict import Prediction, predict, server_values
from ._profile import DEFAULT_PROFILE, Profile, ProfileError, load_profile, profile_from_mapping, shipped_profiles
from ._resolve import Knobs, resolve

__all__ = ["GiB", "Knobs", "PerfModel", "Prediction", "Profile", "ProfileError", "kv_bytes_per_token_per_gpu",
           "load_profile", "predict", "profile_from_mapping", "resolve", "server_values", "shipped_profiles",
           "weight_split"]


def __getattr__(name: str) -> str:
    # `__version__` is the SGLang version the simulated server speaks, its profile's (TUNER_SIM_PROFILE, as
    # `python -m tuner.sim` reads it): the tuner asks a server command's package for its version, as it asks
    # sglang's (tuner/versions/_server_version.py).
    if name == "__version__":
        return load_profile(os.environ.get("TUNER_SIM_PROFILE") or DEFAULT_PROFILE).sglang_version
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
