"""`--simulate`: which simulator profile stands in for the server a space describes."""

from __future__ import annotations

import os
from pathlib import Path

from .._errors import UsageError
from ..spec import Spec
from ._check import check_flags, version_help

DEFAULT_PROFILE = "glm5-nvfp4-sm120"  # the seed deployment: `--simulate` without --space
AUTO = ""  # `--simulate` without a name: the profile follows the space
# Zero-latency profile for the tuner's own tests: never picked for a dry run of a space.
_TEST_ONLY = {"instant"}
# A dry run compresses the minutes of a real start-up far more than decode steps, whose wall-clock token
# rate the probe must keep up with on a small machine. The environment overrides either.
SIM_SPEED = {"TUNER_SIM_TIME_SCALE": "0.05", "TUNER_SIM_STARTUP_SCALE": "0.005"}


def choose_profile(spec: Spec, space_path: Path, requested: str) -> tuple[str, str | None]:
    """The profile named on the command line; else the one the space names (`sim-profile:`); else the shipped
    profile named like the space (its `name:` or file name) if it speaks the SGLang version the space declares;
    else the shipped one (of that version, where the space declares one) whose version takes the space best:
    every flag and choice where one does, else the fewest failing, so that the check then says which flag of the
    space is wrong (a typo gets its "did you mean") instead of that no profile fits.
    With it, a note for the screen where the profile is that last guess: a dry run of the GLM-5 space on a Llama
    profile, unsaid, looked like a dry run of GLM-5."""
    from ..sim import shipped_profiles

    if requested != AUTO:
        # A file: absolute, as the servers run in their trial folders.
        looks_like_file = requested.endswith((".yaml", ".yml")) or os.sep in requested
        return (os.path.abspath(requested) if looks_like_file else requested), None
    if spec.sim_profile:
        return spec.sim_profile, None
    shipped = shipped_profiles()
    for name in (spec.name, space_path.stem):
        if name in shipped and spec.sglang_version in (None, profile_version(name)):
            return name, None
    candidates = [name for name in shipped if name not in _TEST_ONLY
                  and spec.sglang_version in (None, profile_version(name))]
    if not candidates:
        raise UsageError(f"no shipped simulator profile speaks SGLang {spec.sglang_version}, which {space_path} "
                         "declares (sglang-version)", f"pass --simulate NAME (shipped: {', '.join(shipped)}) or a "
                         "profile file, or name one in the space (sim-profile: NAME)")
    chosen = min(candidates, key=lambda name: len(check_flags(spec, version_help(profile_version(name))).errors))
    return chosen, _guess_note(spec, space_path, chosen, [n for n in shipped if n not in _TEST_ONLY])


def _guess_note(spec: Spec, space_path: Path, chosen: str, shipped: list[str]) -> str:
    """Which profile a dry run of the space uses, why, and how to choose another."""
    from ..sim import load_profile

    why = f"SGLang {spec.sglang_version}, as the space declares" if spec.sglang_version else \
        "its flags take the space best"
    alike = next((n for n in (spec.name, space_path.stem) if n in shipped), None)
    if alike:
        why += f"; {alike}, named like the space, speaks SGLang {profile_version(alike)}"
    else:
        why += "; no shipped profile is named like the space"
    hardware = load_profile(chosen).hardware
    return (f"simulating {spec.name} with profile {chosen} ({hardware.gpu_count} x {hardware.gpu_name}: {why}); "
            f"choose another with --simulate PROFILE (shipped: {', '.join(shipped)}) or sim-profile: in the space")


def profile_version(name: str) -> str:
    """The SGLang version a profile (a shipped name or a file) speaks."""
    from ..sim import load_profile

    return load_profile(name).sglang_version


def profiles_of(version: str) -> list[str]:
    """The shipped profiles (not the test-only ones) that speak an SGLang version."""
    from ..sim import shipped_profiles

    return [name for name in shipped_profiles() if name not in _TEST_ONLY and profile_version(name) == version]
