"""SGLang's command line as tuner/flags/ rebuilds it (the simulator parses with it) against SGLang's own parser and
--config merger.

Needs the reference environments of scripts/setup_sglang_ref.sh (.venv-sglang: 0.5.23, .venv-sglang0517: 0.5.17,
.venv-sglang056: 0.5.6);
without one, its version's tests are skipped, or fail when TUNER_TEST_SGLANG_REF=1.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tuner.engines import SGLang
from tuner.flags import build_parser, merge_config

REPO = Path(__file__).resolve().parents[2]
VENVS = {"0.5.23": REPO / ".venv-sglang", "0.5.17": REPO / ".venv-sglang0517", "0.5.6": REPO / ".venv-sglang056"}
SETUP = {"0.5.23": "bash scripts/setup_sglang_ref.sh",
         "0.5.17": "SGLANG_VERSION=0.5.17 bash scripts/setup_sglang_ref.sh",
         "0.5.6": "SGLANG_VERSION=0.5.6 bash scripts/setup_sglang_ref.sh"}
REGEN = {"0.5.23": ".venv-sglang/bin/python scripts/gen_sim_flags.py",
         "0.5.17": ".venv-sglang0517/bin/python scripts/gen_sim_flags.py",
         "0.5.6": ".venv-sglang056/bin/python scripts/gen_sim_flags.py"}

_spec = importlib.util.spec_from_file_location("gen_sim_flags", REPO / "scripts" / "gen_sim_flags.py")
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)

PREFIXES = ["--pp", "--kv", "--trust", "--mem-frac", "--tp", "--dp", "--ep", "--cuda-graph-max-bs",
            "--attention", "--disable-cuda", "--model", "--tensor-parallel", "--enable-dp", "--max-run",
            "--chunked", "--schedule-pol", "--nsa-decode", "--dsa-decode", "--sampling", "--quant", "--dtype",
            "--load-f", "--spec", "--speculative-algo", "--moe-dp", "--max-queued", "--cuda-graph-config",
            "--enable-tf32", "--no-enable-tf32", "--lora-paths", "--monokernel", "--config"]


def _value_for(prefix: str) -> list[str]:
    return [] if prefix.startswith(("--trust", "--disable", "--enable", "--no-", "--monokernel")) else ["1"]


# Parallel layouts in each spelling the parser takes: what the tuner counts as GPUs for a trial (test (e)).
LAYOUTS = [
    {"tensor-parallel-size": 2, "data-parallel-size": 2},
    {"tp-size": 2, "pipeline-parallel-size": 2, "dp-size": 2},
    {"tp-size": 4, "data-parallel-size": 2, "attention-data-parallel-size": 2},
    {"tp-size": 4, "dp-size": 4, "enable-dp-attention": True},
    {"tp-size": 4, "dp-size": 2, "attn-dp-size": 1},
]


def _layout_argv(flags: dict) -> list[str]:
    argv = ["--model-path", "m"]
    for name, value in flags.items():
        argv += [f"--{name}"] if value is True else [f"--{name}", str(value)]
    return argv


def argv_cases() -> list[list[str]]:
    cases = [["--model-path", "m", prefix, *_value_for(prefix)] for prefix in PREFIXES]
    cases += [_layout_argv(flags) for flags in LAYOUTS]
    cases += [
        ["--model-path", "m", "--tp-size", "8", "--mem-fraction-static", "0.8", "--kv-cache-dtype", "fp8_e4m3"],
        ["--model", "m", "--max-total-tokens", "64k", "--context-length", "1Mi", "--max-prefill-tokens", "1.5k"],
        ["--model-path", "m", "--max-total-tokens", "1.5Ki"],
        ["--model-path", "m", "--attention-backend", "bogus"],
        ["--model-path", "m", "--dtype", "bfloat16", "--quantization", "fp8", "--load-format", "dummy"],
        ["--model-path", "m", "--cuda-graph-config", '{"decode": {"backend": "full", "max_bs": 8}}'],
        ["--model-path", "m", "--cuda-graph-config", '{"verify": {}}'],
        ["--model-path", "m", "--cuda-graph-backend-decode", "tc_piecewise"],
        ["--model-path", "m", "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3"],
        ["--model-path", "m", "--enable-tf32-matmul", "--no-lora-strict-loading"],
        ["--model-path", "m", "--lora-paths", "a=/x", '{"lora_name": "b", "lora_path": "/y"}'],
        ["--model-path", "m", "--monokernel-backend", "--disable-cuda-graph", "--enable-dp-attention"],
        ["--model-path", "m", "--cuda-graph-bs", "1", "2", "4", "--disable-cuda-graph"],
        ["--model-path", "m", "--json-model-override-args", '{"a": 1}', "--quantization-param-path", "None"],
        ["--model-path", "m", "--max-queued-requests", "x"],
        ["--model-path", "m", "--no-such-flag"],
        ["--tp-size", "2"],
        ["--model-path", "m", "--port=31000", "--host=0.0.0.0"],
    ]
    return cases


CONFIGS = {
    "booleans.yaml": "tp-size: 2\nmem-fraction-static: 0.85\ntrust-remote-code: true\nenable-torch-compile: false\n"
                     "disable-radix-cache: true\nattention-backend: triton\n",
    "lists.yaml": "cuda-graph-bs-decode: [1, 2, 4]\ncuda-graph-bs: [1, 2, 8]\nlora-paths: []\n"
                  "json-model-override-args: {rope_theta: 10000}\n",
    "deprecated.yaml": "disable-cuda-graph: true\n",
    "deprecated_false.yaml": "enable-dp-attention: false\n",
    "boolean_optional.yaml": "enable-tf32-matmul: true\n",
    "alias.yaml": "tensor-parallel-size: 4\nmodel: /from/config\n",
    "bool_for_store.yaml": "skip-tokenizer-init: true\nlog-requests: false\nrevision: true\n",
    "empty.yaml": "",
    "not_a_mapping.yml": "- a\n- b\n",
    "bad.json": "{}",
}


def config_cases(tmp: Path) -> list[list[str]]:
    cases = []
    for name, text in CONFIGS.items():
        path = tmp / name
        path.write_text(text)
        cases.append(["--model-path", "m", "--config", str(path)])
    cases.append(["--config", str(tmp / "booleans.yaml"), "--model-path", "m", "--tp-size", "8"])  # CLI wins
    cases.append(["--model-path", "m", "--config", str(tmp / "booleans.yaml"), "--config", str(tmp / "empty.yaml")])
    cases.append(["--model-path", "m", "--config"])
    cases.append(["--model-path", "m", "--config", str(tmp / "missing.yaml")])
    return cases


def _ref_python(version: str) -> Path:
    python = VENVS[version] / "bin" / "python"
    if not python.exists():
        reason = (f"no SGLang {version} reference environment ({VENVS[version].name}); make it with: "
                  f"{SETUP[version]}")
        if os.environ.get("TUNER_TEST_SGLANG_REF") == "1":
            pytest.fail(reason + " (TUNER_TEST_SGLANG_REF=1 makes this a failure)")
        pytest.skip(reason)
    return python


@pytest.fixture(scope="module", params=["0.5.23", "0.5.17", "0.5.6"])
def ref(request, tmp_path_factory):
    version = request.param
    python = _ref_python(version)
    tmp = tmp_path_factory.mktemp(f"cfg-{version}")
    req = {"argv": argv_cases(), "configs": config_cases(tmp)}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_", "PYTHONPATH"))}
    env.update(PYTHONHASHSEED="0", COLUMNS="120")
    proc = subprocess.run([str(python), str(Path(__file__).with_name("_ref_dump.py"))], input=json.dumps(req),
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout)
    out["version"], out["request"] = version, req
    return out


def _sim_parse(parser: argparse.ArgumentParser, argv: list[str]) -> dict:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns = parser.parse_args(argv)
    except SystemExit as e:
        lines = [l for l in err.getvalue().splitlines() if ": error: " in l]
        return {"status": e.code, "error": lines[0] if lines else err.getvalue().strip().splitlines()[:1]}
    return {"status": 0, "namespace": {k: gen.encode(v) for k, v in sorted(vars(ns).items())}}


_COMPARED = ("option_strings", "dest", "action", "type", "choices", "default", "const", "nargs", "required",
             "metavar", "help", "group", "extra")


# (a) the simulator's parser equals the real one, field by field
def test_parser_equals_real_parser(ref):
    version = ref["version"]
    real = ref["table"]
    sim = gen.dump_parser(build_parser(version))
    assert sim["parser"] == real["parser"]
    real_by_opts = {tuple(a["option_strings"]): a for a in real["actions"]}
    sim_by_opts = {tuple(a["option_strings"]): a for a in sim["actions"]}
    missing = sorted(set(real_by_opts) - set(sim_by_opts))
    extra = sorted(set(sim_by_opts) - set(real_by_opts))
    assert not missing and not extra, f"flags only in SGLang {version}: {missing}; only in the simulator: {extra}"
    assert [a["option_strings"] for a in sim["actions"]] == [a["option_strings"] for a in real["actions"]]
    diffs = []
    for opts, want in real_by_opts.items():
        have = sim_by_opts[opts]
        for key in _COMPARED:
            w, h = want.get(key), have.get(key)
            if key == "choices" and want.get("choices_unordered") and w is not None and h is not None:
                w, h = sorted(map(str, w)), sorted(map(str, h))
            if w != h:
                diffs.append(f"{opts[0]} {key}: SGLang {w!r}, simulator {h!r}")
    assert not diffs, f"{len(diffs)} differences:\n" + "\n".join(diffs[:40])


def test_help_text_equals_real_help(ref, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    assert build_parser(ref["version"]).format_help() == ref["help"]


# (b) the data file is what SGLang's parser gives today
def test_data_file_is_fresh(ref):
    version = ref["version"]
    path = REPO / "tuner" / "flags" / f"sglang-{version}.json"
    assert path.read_text() == ref["fresh"], (
        f"{path.relative_to(REPO)} is stale against the installed SGLang {version}; regenerate it with: "
        f"{REGEN[version]}")


# (c) prefixes (abbreviations), bad values, unknown flags: same exit status, same error line, same values
def test_argv_outcomes_equal_real(ref):
    parser = build_parser(ref["version"])
    diffs = []
    for argv, want in zip(ref["request"]["argv"], ref["argv"]):
        have = _sim_parse(parser, argv)
        if have != want:
            if have.get("status") != want.get("status") or have.get("error") != want.get("error"):
                diffs.append(f"{argv}: SGLang {want.get('status')} {want.get('error')!r}, "
                             f"simulator {have.get('status')} {have.get('error')!r}")
            else:
                ns_w, ns_h = want["namespace"], have["namespace"]
                keys = sorted(k for k in set(ns_w) | set(ns_h) if ns_w.get(k, "<absent>") != ns_h.get(k, "<absent>"))
                diffs.append(f"{argv}: namespace differs at {[(k, ns_w.get(k), ns_h.get(k)) for k in keys[:5]]}")
    assert not diffs, "\n".join(diffs)


def test_abbreviations_are_exercised(ref):
    # The sample must hold both outcomes, or it proves nothing about abbreviation handling.
    statuses = {tuple(a): o["status"] for a, o in zip(ref["request"]["argv"], ref["argv"])}
    prefix_outcomes = [statuses[("--model-path", "m", p, *_value_for(p))] for p in PREFIXES]
    assert 0 in prefix_outcomes and 2 in prefix_outcomes


# (d) --config: SGLang's own merger (inside prepare_server_args) and the simulator's give the same argv
def test_config_merge_equals_real(ref):
    version = ref["version"]
    parser = build_parser(version)
    diffs = []
    for argv, want in zip(ref["request"]["configs"], ref["configs"]):
        try:
            merged = merge_config(list(argv), parser, version)
        except ValueError as e:
            have = {"error": str(e)}
        else:
            have = {"argv": merged, "parsed": _sim_parse(parser, merged)}
        if have != want:
            diffs.append(f"{argv[-1] if argv else argv}:\n  SGLang    {want}\n  simulator {have}")
    assert not diffs, "\n".join(diffs)


# (e) the tuner's GPU count reads every spelling of the parallel sizes, as SGLang's parser resolves them: tp x pp
# GPUs per replica, times dp-size replicas unless `--dp-size N --enable-dp-attention` puts them on the tp GPUs
def test_gpu_count_reads_each_spelling_of_the_sizes(ref):
    outcomes = {tuple(a): o for a, o in zip(ref["request"]["argv"], ref["argv"])}
    checked = 0
    for flags in LAYOUTS:
        real = outcomes[tuple(_layout_argv(flags))]
        if real["status"] != 0:  # 0.5.6 has no attn-dp-size
            continue
        ns = real["namespace"]
        # 0.5.6 names the sizes' dests in full (tensor_parallel_size ...), 0.5.23 short (tp_size ...).
        tp, pp, dp = (ns.get(short, ns.get(full)) for short, full in (
            ("tp_size", "tensor_parallel_size"), ("pp_size", "pipeline_parallel_size"),
            ("dp_size", "data_parallel_size")))
        dp_on_tp_gpus = bool(ns.get("enable_dp_attention")) and int(ns.get("attn_dp_size") or 1) == 1
        want = tp * pp * (1 if dp_on_tp_gpus else dp)
        assert SGLang().gpus_needed(flags) == want, (flags, tp, pp, dp)
        checked += 1
    assert checked >= 3
