"""`check` and `run`: is the space written for the SGLang version the server runs, and if not, what to do."""

from __future__ import annotations

import shlex
from pathlib import Path

from ..engines import listed, versions
from ..spec import Spec
from ._check import CheckReport, versions_taking
from ._server_version import ServerVersion


def written_for(spec: Spec) -> str | None:
    """The SGLang version whose flags the space uses: the one it declares (sglang-version), else the one version
    the tuner knows whose flags take all of it; None where that is not one version (a typo, or flags that both
    versions have)."""
    if spec.engine != "sglang":
        return None
    if spec.sglang_version:
        return spec.sglang_version
    fits = versions_taking(spec)
    return fits[0] if len(fits) == 1 else None


def upgrade_command(space_path: Path, written: str, to: str) -> str:
    stem = space_path.stem.removesuffix(f"-{written}")
    return f"python -m tuner space upgrade --to {to} {shlex.quote(str(space_path))} > {stem}-{to}.yaml"


def add_verdict(report: CheckReport, spec: Spec, space_path: Path, server: ServerVersion | None,
                profile: str | None) -> None:
    """When the space is written for another SGLang version than the server's: a warning where every flag
    passes anyway, else the hint that goes with the errors. Nothing is said where it would not be true: a
    typo gets its "did you mean" and no word about versions."""
    written = written_for(spec)
    if server is None or written is None:
        return
    running = server.sglang
    if running is None:
        if report.errors and spec.sglang_version:
            report.hint = f"{space_path} is written for SGLang {written}; the server is {server.describe()}"
        return
    if running == written:
        return
    sim = f" (simulator profile {profile})" if profile is not None else ""
    what = f"{space_path} is written for SGLang {written} and the server is SGLang {running}{sim}"
    fixes = []
    if profile is not None:
        from ._simulate import profiles_of

        same = profiles_of(written)
        if same:
            fixes.append(f"pass --simulate NAME with a profile of SGLang {written} ({', '.join(same)})")
    known = versions()
    if written in known and running in known:
        fixes.append(f"rewrite it with: {upgrade_command(space_path, written, running)}")
    elif not fixes:
        fixes.append(f"rename the flags by hand: the tuner has the flags of SGLang {listed(known)} only")
    text = f"{what}: {', or '.join(fixes)}"
    if report.errors:
        report.hint = text
    else:
        report.warnings.append(text)
