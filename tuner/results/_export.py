"""`tuner export`: the winner as a file SGLang's `--config` loads, with where it came from."""

from __future__ import annotations

import datetime as dt
import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import optuna
import yaml

from .._errors import UsageError
from .._files import write_atomically
from .._redact import redact_argv, redact_env, redact_url
from ..engines import flag_argv, get_engine
from ..search import CONTEXT_ATTR, describe_gpus, load_study
from ..trial import slo_text
from ._results import Winner, certainty_lines, objective_metric, pareto_front, winner
from ._which_study import target_args


def _engine(study: optuna.Study, trial: optuna.trial.FrozenTrial):
    return get_engine(trial.user_attrs.get("engine", study.user_attrs.get("engine", "sglang")))


def launch_command(study: optuna.Study, engine) -> list[str]:
    """How to start the engine the study measured: its recorded server command, or for a simulated study
    (whose server was tuner.sim) the engine's own launcher."""
    recorded = study.user_attrs.get("server_command")
    if not recorded or study.user_attrs.get("simulate"):
        return list(engine.display_command)
    return redact_argv(recorded)


def launch_argv(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> list[str]:
    """The whole command line of the trial's server, less host and port: what `best.sh` runs."""
    attrs = trial.user_attrs
    engine = _engine(study, trial)
    return [*launch_command(study, engine), engine.model_flag, attrs.get("model_path", ""),
            *flag_argv(dict(attrs.get("flags", {})))]


def _spelled(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> tuple[dict[str, Any], dict[str, Any]]:
    """The trial's flags as its server version's --config takes them, and those that must stay on the launch
    line. Which flags are deprecated comes from that server's --help, recorded by `run`."""
    engine = _engine(study, trial)
    deprecated = study.user_attrs.get("deprecated_flags")
    if deprecated is None:
        deprecated = engine.deprecated_in(trial.user_attrs.get("server_version"))
    in_file, launch_line = engine.respell(trial.user_attrs.get("flags", {}), frozenset(deprecated))
    in_file, refused = engine.config_spellings(in_file, trial.user_attrs.get("server_version"))
    return in_file, {**launch_line, **refused}


def needs_script(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
    """Whether a --config file alone cannot reproduce the trial: the server has no --config (sglang-jax), a
    deprecated flag without another spelling must stay on the command line, or the server needs environment
    variables (a --config file cannot set them)."""
    return (not study.user_attrs.get("server_takes_config", True) or bool(_spelled(study, trial)[1])
            or bool(_env(study, trial)))


def _env(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> dict[str, str]:
    """The space's server.env and the trial's environment parameters, secrets masked."""
    return redact_env({**study.user_attrs.get("server_env", {}), **trial.user_attrs.get("env", {})})


# The address the printed launch commands serve on: every interface, as a deployed server does (the tuner's own
# trial servers bind to 127.0.0.1). The same in the file's header and on the screen.
DEPLOY_ADDRESS = ["--host", "0.0.0.0", "--port", "30000"]


def render(study: optuna.Study, best: Winner, fmt: str, script: str | None = None,
           config_name: str = "best.yaml", certainty: list[str] | None = None) -> str:
    trial = best.trial
    attrs = trial.user_attrs
    engine = _engine(study, trial)
    env = _env(study, trial)
    model = attrs.get("model_path", "")
    if fmt == "json":
        metric = objective_metric(study)
        # The value every screen names: the median of confirm's runs where it crowned this trial (as best.yaml
        # says), else the one measurement; "values" stays the trial's as Optuna recorded it.
        record = {"study": study.study_name, "number": trial.number, "state": trial.state.name,
                  "metric": metric, "value": best.figures.get(metric),
                  "value_from": f"median of {len(best.runs)} fresh servers" if best.confirmed else "one run",
                  "values": trial.values, "params": trial.params, "user_attrs": attrs,
                  "confirmed": best.confirmed, "figures": best.figures, "confirm_runs": list(best.runs),
                  "confirm_rivals": [{"number": r.number, "median": r.median, "runs": r.runs, **r.versus.to_attr(),
                                      "within_noise": r.versus.within_noise} for r in best.rivals]}
        return json.dumps(_rounded(record), indent=2, default=str) + "\n"
    if fmt == "cmd":
        return " ".join([f"{k}={shlex.quote(v)}" for k, v in sorted(env.items())]
                        + [shlex.join(launch_argv(study, trial))]) + "\n"
    in_file, launch_line = _spelled(study, trial)
    body = yaml.safe_dump(engine.config_file(in_file, model), sort_keys=False, default_flow_style=False)
    return _header(study, best, env, launch_command(study, engine), flag_argv(launch_line), script,
                   config_name, certainty or []) + body


def _rounded(value: Any) -> Any:
    """Floats to 12 significant digits: a stepped float parameter is stored as 0.8700000000000001, which is
    0.87 to anyone reading it, and no figure the tuner measures has 12 digits that mean anything."""
    if isinstance(value, float):
        return float(f"{value:.12g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(v) for v in value]
    return value


def _written_for(path: Path) -> str | None:
    """The study an earlier export wrote `path` for (the first line of its YAML header, or its JSON's "study"),
    else None: no such file, or not one the tuner wrote."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None
    first = text.split("\n", 1)[0]
    prefix = "# Best configuration of study '"
    if first.startswith(prefix) and "':" in first:
        return first[len(prefix):first.index("':", len(prefix))]
    try:
        record = json.loads(text)
    except ValueError:
        return None
    return record.get("study") if isinstance(record, dict) and isinstance(record.get("study"), str) else None


def render_script(study: optuna.Study, trial: optuna.trial.FrozenTrial, config: Path) -> str:
    """A launch script that alone starts the measured server: the --config file plus the flags it cannot
    carry, or the whole command line for a server without --config. Extra arguments (--host, --port) follow."""
    env = _env(study, trial)
    engine = _engine(study, trial)
    if study.user_attrs.get("server_takes_config", True):
        kept = _spelled(study, trial)[1]
        command = (f'{shlex.join(launch_command(study, engine))} --config "$(dirname "$0")/{config.name}" '
                   f'{shlex.join(flag_argv(kept))}')
    else:
        command = shlex.join(launch_argv(study, trial))
    lines = ["#!/bin/sh", f"# Trial {trial.number} of study '{study.study_name}', exported by tuner: the server as it "
             "was measured.", "# Extra arguments are passed on, e.g.: --host 0.0.0.0 --port 30000"]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items())]
    lines.append(f'exec {command} "$@"')
    return "\n".join(lines) + "\n"


def _header(study: optuna.Study, best: Winner, env: dict[str, str], command: list[str],
            launch_argv: list[str], script: str | None, config_name: str, certainty: list[str]) -> str:
    a = best.trial.user_attrs
    metric = objective_metric(study)
    metrics = ", ".join(f"{k} {v:.1f}" for k, v in best.figures.items())
    lines = [
        f"Best configuration of study '{study.study_name}': {best.describe(metric)}",
        *(f"  {line}" for line in certainty),
        f"{'medians' if best.confirmed else 'metrics'} at concurrency {a.get('concurrency', '?')}: {metrics}",
        *_rate_lines(a.get("rate_search")),
        f"correctness gate passed: {', '.join(a.get('gate_checks', [])) or 'none run'}; re-checked after load",
        f"server version: {a.get('server_version') or 'unknown'}; hardware: {_hardware(study)}",
        f"exported {dt.datetime.now(dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')} by tuner",
    ]
    if env:
        lines += ["", "Environment this configuration needs (a --config file cannot set it):"]
        lines += [f"  export {k}={shlex.quote(v)}" for k, v in sorted(env.items())]
    if launch_argv:
        lines += ["", f"{' '.join(launch_argv)} must stay on the command line: SGLang's --config refuses it"]
    if study.user_attrs.get("server_takes_config", True):
        launch = [*command, "--config", config_name, *launch_argv, *DEPLOY_ADDRESS]
        lines += ["", f"Launch: {shlex.join(launch)}"]
        if script:
            lines.append(f"  (or: sh {script} {shlex.join(DEPLOY_ADDRESS)}, which does the same)")
    else:
        lines += ["", f"Launch: sh {script} {shlex.join(DEPLOY_ADDRESS)}",
                  "  (this server has no --config: the script holds the whole command line)"]
    return "".join(f"# {line}\n" if line else "#\n" for line in lines)


def _hardware(study: optuna.Study) -> str:
    """The GPUs of the study's context, as `show` names them (a trial records none of its own)."""
    gpus = (study.user_attrs.get(CONTEXT_ATTR) or {}).get("gpus") or {}
    return describe_gpus(gpus) or f"unknown ({gpus.get('source') or 'not recorded'})"


def _rate_lines(search: dict | None) -> list[str]:
    """max_rate_under_slo: the SLO and the rate this configuration sustained under it."""
    if not search or search.get("rate") is None:
        return []
    passed = max((s for s in search["steps"] if s["passed"]), key=lambda s: s["rate"])
    return [f"SLO: {slo_text(search['slo_ms'])} for {search['attainment_target']:.1%} of requests "
            f"(SGLang's goodput definitions)",
            f"sustained {search['rate']:.3g} requests/s under it (attainment {passed['slo_attainment']:.1%}, "
            f"p99 TTFT {passed.get('p99_ttft_ms', 0):.0f} ms)"
            + (f"; the lowest rate tested that did not: {search['upper']:.3g}/s" if search.get("upper") else "")]


def export(storage: str, study_name: str | None, out: str | None, fmt: str, number: int | None,
           notes: Sequence[str] = (), force: bool = False) -> Path | None:
    """Write the winner (or trial `number`) to `out`, or to stdout. The first line on stderr names the study and
    the trial, so that nobody deploys another study's winner unawares; how sure confirm is of it (certainty_lines)
    and `notes` (how the study was chosen) follow it.
    The command that launches it goes to stdout where the file went elsewhere, else to stderr: stdout then holds
    the file and nothing else."""
    study = load_study(storage, study_name)
    best = winner(study, number)
    trial = best.trial
    path = None if out == "-" or (out is None and fmt != "yaml") else Path(out or "best.yaml")
    previous = _written_for(path) if path is not None else None
    if previous is not None and previous != study.study_name and not force:
        # A second study in the same storage: a plain export replaced the deployed study's best.yaml with the
        # other study's winner, and said so only in a line nobody reads.
        raise UsageError(f"{path} holds the winner of study '{previous}', and this is study '{study.study_name}'",
                         f"pass --study {shlex.quote(previous)} to refresh it, --out another file, or --force to replace it")
    script = path.with_suffix(".sh") if path is not None and fmt == "yaml" and needs_script(study, trial) else None
    certainty = certainty_lines(study, best, shlex.join(target_args(storage, study)))
    text = render(study, best, fmt, script.name if script else None, path.name if path else "best.yaml", certainty)
    described = best.describe(objective_metric(study))
    origin = f"study '{study.study_name}' ({redact_url(storage)})"
    if path is None:
        print(f"{origin}: {described}; written to stdout", *(f"  {line}" for line in certainty), *notes, sep="\n",
              file=sys.stderr)
        _pareto_lines(study, number)
        if fmt != "cmd":  # the command line itself is what stdout gets
            print(f"launch it with: {_launch_line(study, trial, fmt, script, 'FILE')}"
                  + (" (FILE: where you saved this)" if fmt == "yaml" else ""), file=sys.stderr, flush=True)
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return None
    write_atomically(path, text)
    if script is not None:
        write_atomically(script, render_script(study, trial, path))
        script.chmod(0o755)
    print(f"{origin}: wrote {path}{f' and {script}' if script else ''}: {described}",
          *(f"  {line}" for line in certainty), *notes, sep="\n", file=sys.stderr)
    _pareto_lines(study, number)
    print("launch it with:", file=sys.stderr, flush=True)
    print(_launch_line(study, trial, fmt, script, str(path)), flush=True)
    return path


def _launch_line(study: optuna.Study, trial: optuna.trial.FrozenTrial, fmt: str, script: Path | None,
                 config: str) -> str:
    """The command that starts the exported server on the deployed address: the script where there is one, the
    --config file (with what it cannot carry, environment first), or for cmd and json the whole command line."""
    if script is not None:
        return shlex.join(["sh", str(script), *DEPLOY_ADDRESS])
    env = [f"{k}={shlex.quote(v)}" for k, v in sorted(_env(study, trial).items())]  # assignments, not quoted words
    if fmt == "yaml" and study.user_attrs.get("server_takes_config", True):
        argv = [*launch_command(study, _engine(study, trial)), "--config", config,
                *flag_argv(_spelled(study, trial)[1]), *DEPLOY_ADDRESS]
    else:
        argv = [*launch_argv(study, trial), *DEPLOY_ADDRESS]
    return " ".join([*env, shlex.join(argv)])


def _pareto_lines(study: optuna.Study, number: int | None) -> None:
    """Two objectives: the front the exported trial was picked from, and how to pick another."""
    if len(study.directions) > 1 and number is None:
        print("Pareto front (exporting the one with the best first objective; --trial N picks another):",
              file=sys.stderr)
        for t in sorted(pareto_front(study), key=lambda t: t.number):
            print(f"  trial {t.number}: {', '.join(f'{v:.1f}' for v in t.values)}", file=sys.stderr)

