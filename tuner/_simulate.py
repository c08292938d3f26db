"""`--simulate`: which simulator profile stands in for the server a space describes."""

from __future__ import annotations

import os
from pathlib import Path

from ._check import check_flags, parse_help
from ._errors import UsageError
from ._spec import Spec

DEFAULT_PROFILE = "glm5-nvfp4-sm120"  # the seed deployment: `--simulate` without --space
AUTO = ""  # `--simulate` without a name: the profile follows the space
# Zero-latency profile for the tuner's own tests: never picked for a dry run of a space.
_TEST_ONLY = {"instant"}


def choose_profile(spec: Spec, space_path: Path, requested: str) -> str:
    """The profile named on the command line; else the one the space names (`sim-profile:`); else the shipped
    profile named like the space (its `name:` or file name); else the first shipped one whose SGLang version
    takes every flag and choice of the space."""
    from .sim._profile import shipped_profiles

    if requested != AUTO:
        # A file: absolute, as the servers run in their trial folders.
        looks_like_file = requested.endswith((".yaml", ".yml")) or os.sep in requested
        return os.path.abspath(requested) if looks_like_file else requested
    if spec.sim_profile:
        return spec.sim_profile
    shipped = shipped_profiles()
    for name in (spec.name, space_path.stem):
        if name in shipped:
            return name
    for name in shipped:
        if name not in _TEST_ONLY and not check_flags(spec, parse_help(profile_help(name))).errors:
            return name
    raise UsageError(f"no shipped simulator profile takes every flag of {space_path}",
                     f"pass --simulate NAME (shipped: {', '.join(shipped)}) or a profile file, "
                     "or name one in the space (sim-profile: NAME)")


def profile_help(name: str) -> str:
    """The simulated server's --help for a shipped profile: its SGLang version's."""
    from .sim._args import build_parser
    from .sim._profile import load_profile

    return build_parser(load_profile(name).sglang_version).format_help()


def profile_hint(profile: str) -> str:
    """For a flag error against the simulator: the cause is the profile's version, not the space."""
    from .sim._profile import load_profile, shipped_profiles

    version = load_profile(profile).sglang_version
    return (f"the simulated server is profile '{Path(profile).stem}' (SGLang {version}): pass --simulate NAME with a "
            f"profile of the space's SGLang version (shipped: {', '.join(shipped_profiles())})")
