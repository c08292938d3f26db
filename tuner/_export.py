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

from ._redact import redact_env
from ._results import CONFIRMED_ATTR, best_trial, load_study, pareto_front
from .engines import flag_argv, get_engine


def render(study: optuna.Study, trial: optuna.trial.FrozenTrial, fmt: str) -> str:
    attrs = trial.user_attrs
    engine = get_engine(attrs.get("engine", study.user_attrs.get("engine", "sglang")))
    flags = dict(attrs.get("flags", {}))
    env = redact_env(attrs.get("env", {}))
    model = attrs.get("model_path", "")
    if fmt == "json":
        record = {"study": study.study_name, "number": trial.number, "state": trial.state.name,
                  "values": trial.values, "params": trial.params, "user_attrs": attrs,
                  "confirmed": study.user_attrs.get(CONFIRMED_ATTR) == trial.number}
        return json.dumps(record, indent=2, default=str) + "\n"
    if fmt == "cmd":
        argv = [*engine.display_command, engine.model_flag, model, *flag_argv(flags)]
        return " ".join([f"{k}={shlex.quote(v)}" for k, v in sorted(env.items())] + [shlex.join(argv)]) + "\n"
    launch_line = {k: v for k, v in flags.items() if k in engine.launch_line_flags}
    in_file = {k: v for k, v in flags.items() if k not in launch_line}
    body = yaml.safe_dump(engine.config_file(in_file, model), sort_keys=False, default_flow_style=False)
    return _header(study, trial, env, engine, flag_argv(launch_line)) + body


def _header(study: optuna.Study, trial: optuna.trial.FrozenTrial, env: dict[str, str], engine,
            launch_argv: list[str]) -> str:
    a = trial.user_attrs
    confirmed = study.user_attrs.get(CONFIRMED_ATTR) == trial.number
    metrics = ", ".join(f"{k} {a[k]:.1f}" for k in ("output_throughput", "total_throughput", "p99_ttft_ms",
                                                    "p99_itl_ms") if isinstance(a.get(k), (int, float)))
    lines = [
        f"Best configuration of study '{study.study_name}': trial {trial.number}"
        + (" (confirmed by re-measurement)" if confirmed else ""),
        f"metrics at concurrency {a.get('concurrency', '?')}: {metrics}",
        f"correctness gate passed: {', '.join(a.get('gate_checks', [])) or 'none run'}; re-checked after load",
        f"server version: {a.get('server_version') or 'unknown'}; hardware: {a.get('hardware', 'unknown')}",
        f"exported {dt.datetime.now(dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')} by tuner",
    ]
    if env:
        lines += ["", "Environment this configuration needs (a --config file cannot set it):"]
        lines += [f"  export {k}={shlex.quote(v)}" for k, v in sorted(env.items())]
    launch = [*engine.display_command, "--config", "THIS_FILE", *launch_argv, "--host", "127.0.0.1", "--port", "30000"]
    if launch_argv:
        lines += ["", f"{' '.join(launch_argv)} must stay on the command line: SGLang's --config refuses it"]
    lines += ["", f"Launch: {shlex.join(launch)}"]
    return "".join(f"# {line}\n" if line else "#\n" for line in lines)


def export(storage: str, study_name: str | None, out: str | None, fmt: str, number: int | None) -> Path | None:
    study = load_study(storage, study_name)
    trial = best_trial(study, number)
    if len(study.directions) > 1 and number is None:
        front = pareto_front(study)
        print("Pareto front (exporting the one with the best first objective; --trial N picks another):",
              file=sys.stderr)
        for t in sorted(front, key=lambda t: t.number):
            print(f"  trial {t.number}: {', '.join(f'{v:.1f}' for v in t.values)}", file=sys.stderr)
    text = render(study, trial, fmt)
    if out == "-" or (out is None and fmt != "yaml"):
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return None
    path = Path(out or "best.yaml")
    _write_atomically(path, text)
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

