"""`tuner export`: the winner as a file SGLang's `--config` loads, with where it came from."""

from __future__ import annotations

import datetime as dt
import json
import os
import shlex
import sys
import tempfile
from pathlib import Path

import optuna
import yaml

from ._ratesearch import slo_text
from ._redact import redact_argv, redact_env
from ._results import CONFIRMED_ATTR, best_trial, load_study, pareto_front
from .engines import flag_argv, get_engine


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
    engine = get_engine(attrs.get("engine", study.user_attrs.get("engine", "sglang")))
    return [*launch_command(study, engine), engine.model_flag, attrs.get("model_path", ""),
            *flag_argv(dict(attrs.get("flags", {})))]


def needs_script(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
    """Whether a --config file alone cannot reproduce the trial: the server has no --config (sglang-jax),
    or a flag must stay on the command line (deprecated booleans SGLang's --config refuses)."""
    engine = get_engine(trial.user_attrs.get("engine", study.user_attrs.get("engine", "sglang")))
    flags = trial.user_attrs.get("flags", {})
    return not study.user_attrs.get("server_takes_config", True) or any(
        k in engine.launch_line_flags and v not in (None, False) for k, v in flags.items())


def _env(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> dict[str, str]:
    """The space's server.env and the trial's environment parameters, secrets masked."""
    return redact_env({**study.user_attrs.get("server_env", {}), **trial.user_attrs.get("env", {})})


def render(study: optuna.Study, trial: optuna.trial.FrozenTrial, fmt: str, script: str | None = None) -> str:
    attrs = trial.user_attrs
    engine = get_engine(attrs.get("engine", study.user_attrs.get("engine", "sglang")))
    flags = dict(attrs.get("flags", {}))
    env = _env(study, trial)
    model = attrs.get("model_path", "")
    if fmt == "json":
        record = {"study": study.study_name, "number": trial.number, "state": trial.state.name,
                  "values": trial.values, "params": trial.params, "user_attrs": attrs,
                  "confirmed": study.user_attrs.get(CONFIRMED_ATTR) == trial.number}
        return json.dumps(record, indent=2, default=str) + "\n"
    if fmt == "cmd":
        return " ".join([f"{k}={shlex.quote(v)}" for k, v in sorted(env.items())]
                        + [shlex.join(launch_argv(study, trial))]) + "\n"
    launch_line = {k: v for k, v in flags.items() if k in engine.launch_line_flags}
    in_file = {k: v for k, v in flags.items() if k not in launch_line}
    body = yaml.safe_dump(engine.config_file(in_file, model), sort_keys=False, default_flow_style=False)
    return _header(study, trial, env, launch_command(study, engine), flag_argv(launch_line), script) + body


def render_script(study: optuna.Study, trial: optuna.trial.FrozenTrial, config: Path) -> str:
    """A launch script that alone starts the measured server: the --config file plus the flags it cannot
    carry, or the whole command line for a server without --config. Extra arguments (--host, --port) follow."""
    env = _env(study, trial)
    engine = get_engine(trial.user_attrs.get("engine", study.user_attrs.get("engine", "sglang")))
    if study.user_attrs.get("server_takes_config", True):
        kept = {k: v for k, v in trial.user_attrs.get("flags", {}).items() if k in engine.launch_line_flags}
        command = (f'{shlex.join(launch_command(study, engine))} --config "$(dirname "$0")/{config.name}" '
                   f'{shlex.join(flag_argv(kept))}')
    else:
        command = shlex.join(launch_argv(study, trial))
    lines = ["#!/bin/sh", f"# Trial {trial.number} of study '{study.study_name}', exported by tuner: the server as it "
             "was measured.", "# Extra arguments are passed on, e.g.: --host 0.0.0.0 --port 30000"]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items())]
    lines.append(f'exec {command} "$@"')
    return "\n".join(lines) + "\n"


def _header(study: optuna.Study, trial: optuna.trial.FrozenTrial, env: dict[str, str], command: list[str],
            launch_argv: list[str], script: str | None) -> str:
    a = trial.user_attrs
    confirmed = study.user_attrs.get(CONFIRMED_ATTR) == trial.number
    metrics = ", ".join(f"{k} {a[k]:.1f}" for k in ("output_throughput", "total_throughput", "p99_ttft_ms",
                                                    "p99_itl_ms") if isinstance(a.get(k), (int, float)))
    lines = [
        f"Best configuration of study '{study.study_name}': trial {trial.number}"
        + (" (confirmed by re-measurement)" if confirmed else ""),
        f"metrics at concurrency {a.get('concurrency', '?')}: {metrics}",
        *_rate_lines(a.get("rate_search")),
        f"correctness gate passed: {', '.join(a.get('gate_checks', [])) or 'none run'}; re-checked after load",
        f"server version: {a.get('server_version') or 'unknown'}; hardware: {a.get('hardware', 'unknown')}",
        f"exported {dt.datetime.now(dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')} by tuner",
    ]
    if env:
        lines += ["", "Environment this configuration needs (a --config file cannot set it):"]
        lines += [f"  export {k}={shlex.quote(v)}" for k, v in sorted(env.items())]
    if launch_argv:
        lines += ["", f"{' '.join(launch_argv)} must stay on the command line: SGLang's --config refuses it"]
    if study.user_attrs.get("server_takes_config", True):
        launch = [*command, "--config", "THIS_FILE", *launch_argv, "--host", "127.0.0.1", "--port", "30000"]
        lines += ["", f"Launch: {shlex.join(launch)}"]
        if script:
            lines.append(f"  (or: sh {script} --host 127.0.0.1 --port 30000, which does the same)")
    else:
        lines += ["", f"Launch: sh {script} --host 127.0.0.1 --port 30000",
                  "  (this server has no --config: the script holds the whole command line)"]
    return "".join(f"# {line}\n" if line else "#\n" for line in lines)


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


def export(storage: str, study_name: str | None, out: str | None, fmt: str, number: int | None) -> Path | None:
    study = load_study(storage, study_name)
    trial = best_trial(study, number)
    if len(study.directions) > 1 and number is None:
        front = pareto_front(study)
        print("Pareto front (exporting the one with the best first objective; --trial N picks another):",
              file=sys.stderr)
        for t in sorted(front, key=lambda t: t.number):
            print(f"  trial {t.number}: {', '.join(f'{v:.1f}' for v in t.values)}", file=sys.stderr)
    path = None if out == "-" or (out is None and fmt != "yaml") else Path(out or "best.yaml")
    script = path.with_suffix(".sh") if path is not None and fmt == "yaml" and needs_script(study, trial) else None
    text = render(study, trial, fmt, script.name if script else None)
    if path is None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return None
    _write_atomically(path, text)
    if script is not None:
        _write_atomically(script, render_script(study, trial, path))
        script.chmod(0o755)
        print(f"wrote {path} and {script} (trial {trial.number}); launch with: sh {script} --port 30000",
              file=sys.stderr)
    else:
        print(f"wrote {path} (trial {trial.number})", file=sys.stderr)
    return path


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise

