"""Which SGLang version a space is written for and which one its server runs: the space's flags checked against the
server's `--help`, the verdict when the versions differ, `space upgrade`, and the simulator profile that speaks a
space's version (`--simulate`)."""

from __future__ import annotations

from ._check import CheckReport, check_flags, parse_help, raise_on_errors, server_help
from ._server_version import ServerVersion, probe_version
from ._simulate import AUTO, DEFAULT_PROFILE, SIM_SPEED, choose_profile, profile_version
from ._upgrade import upgrade_command
from ._version_verdict import add_verdict

__all__ = ["AUTO", "DEFAULT_PROFILE", "SIM_SPEED", "CheckReport", "ServerVersion", "add_verdict", "check_flags",
           "choose_profile", "parse_help", "probe_version", "profile_version", "raise_on_errors", "server_help",
           "upgrade_command"]
