"""The command line: SGLang's flags per emulated version, argparse's own errors, --help, --config."""

from __future__ import annotations

import pytest

from tuner.flags import parse_argv

from .simproc import run_cli


def test_help_056_lists_nsa_flags_with_choices():
    out = run_cli("--help")
    assert out.returncode == 0
    assert out.stdout.startswith("usage: launch_server.py")
    assert "--nsa-decode-backend {flashmla_sparse,flashmla_kv,flashmla_auto,fa3,tilelang,aiter}" in out.stdout
    for flag in ("--disable-cuda-graph", "--cuda-graph-max-bs", "--cuda-graph-bs", "--enable-nan-detection",
                 "--tensor-parallel-size TENSOR_PARALLEL_SIZE, --tp-size TENSOR_PARALLEL_SIZE",
                 "--mem-fraction-static", "--enable-dp-attention"):
        assert flag in out.stdout


def test_help_0523_lists_dsa_and_phase_graph_flags():
    out = run_cli("--help", profile="llama3-8b-h200")
    assert out.returncode == 0
    assert out.stdout.startswith("usage: sglang serve")
    assert "trtllm" in out.stdout.split("--dsa-decode-backend")[1].split("]")[0]
    for flag in ("--cuda-graph-max-bs-decode", "--cuda-graph-bs-prefill", "--cuda-graph-backend-decode {full,breakable,disabled}",
                 "--disable-decode-cuda-graph", "--attn-dp-size", "--fp4-gemm-backend", "Deprecated. Use --attn-dp-size"):
        assert flag in out.stdout
    assert "--nsa-decode-backend" not in out.stdout
    assert "--enable-nan-detection" not in out.stdout


def test_unknown_flag_exits_2_with_argparse_message():
    out = run_cli("--model-path", "m", "--no-such-flag")
    assert out.returncode == 2
    assert "launch_server.py: error: unrecognized arguments: --no-such-flag" in out.stderr


def test_invalid_choice_exits_2():
    out = run_cli("--model-path", "m", "--attention-backend", "bogus")
    assert out.returncode == 2
    assert "argument --attention-backend: invalid choice: 'bogus' (choose from" in out.stderr


def test_missing_model_path_exits_2():
    out = run_cli("--tp-size", "8")
    assert out.returncode == 2
    assert "the following arguments are required: --model-path/--model" in out.stderr


def test_0523_rejects_nsa_flags_as_unknown():
    out = run_cli("--model-path", "m", "--nsa-decode-backend", "flashmla_kv", profile="llama3-8b-h200")
    assert out.returncode == 2
    assert "sglang serve: error: unrecognized arguments: --nsa-decode-backend flashmla_kv" in out.stderr


def test_0523_cuda_graph_max_bs_is_an_ambiguous_prefix():
    out = run_cli("--model-path", "m", "--cuda-graph-max-bs", "64", profile="llama3-8b-h200")
    assert out.returncode == 2
    assert ("ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, "
            "--cuda-graph-max-bs-prefill") in out.stderr


def test_0523_human_readable_ints_and_aliases():
    values = parse_argv(["--model", "m", "--max-total-tokens", "64k", "--tensor-parallel-size", "2",
                         "--ep", "2"], "0.5.23")
    assert values["max_total_tokens"] == 64000
    assert values["tp_size"] == 2 and values["ep_size"] == 2
    values = parse_argv(["--model-path", "m", "--tp-size", "4", "--cuda-graph-bs", "1", "2", "4"], "0.5.6")
    assert values["tp_size"] == 4 and values["cuda_graph_bs"] == [1, 2, 4]


# -- --config ---------------------------------------------------------------------------------------------------

def test_config_values_and_cli_precedence(tmp_path):
    cfg = tmp_path / "server.yaml"
    cfg.write_text("tp-size: 8\nmem-fraction-static: 0.85\ndisable-cuda-graph: true\nenable-torch-compile: false\n"
                   "cuda-graph-bs: [1, 2, 4]\nattention-backend: triton\n")
    values = parse_argv(["--model-path", "m", "--config", str(cfg), "--attention-backend", "trtllm_mla"], "0.5.6")
    assert values["tp_size"] == 8
    assert values["mem_fraction_static"] == 0.85
    assert values["disable_cuda_graph"] is True
    assert values["enable_torch_compile"] is False
    assert values["cuda_graph_bs"] == [1, 2, 4]
    assert values["attention_backend"] == "trtllm_mla"  # the command line wins over the file


def test_config_bad_extension_fails(tmp_path):
    cfg = tmp_path / "server.json"
    cfg.write_text("{}")
    out = run_cli("--model-path", "m", "--config", str(cfg))
    assert out.returncode != 0
    assert "Config file must be YAML format, got: .json" in out.stderr


def test_config_must_be_a_mapping(tmp_path):
    cfg = tmp_path / "server.yaml"
    cfg.write_text("- tp-size\n- 8\n")
    out = run_cli("--model-path", "m", "--config", str(cfg))
    assert out.returncode != 0
    assert "Config file must contain a dictionary at root level" in out.stderr


def test_config_0523_refuses_unsupported_actions(tmp_path):
    cfg = tmp_path / "server.yaml"
    cfg.write_text("disable-cuda-graph: true\n")
    with pytest.raises(ValueError, match="Unsupported config option 'disable_cuda_graph' with action "
                                         "'DeprecatedStoreTrueAction'"):
        parse_argv(["--model-path", "m", "--config", str(cfg)], "0.5.23")
    cfg.write_text("disable-decode-cuda-graph: true\ncuda-graph-bs-decode: [1, 8]\n")
    values = parse_argv(["--model-path", "m", "--config", str(cfg)], "0.5.23")
    assert values["disable_decode_cuda_graph"] is True and values["cuda_graph_bs_decode"] == [1, 8]


def test_config_unknown_key_is_an_argparse_error(tmp_path):
    cfg = tmp_path / "server.yml"
    cfg.write_text("no-such-flag: 3\n")
    out = run_cli("--model-path", "m", "--config", str(cfg))
    assert out.returncode == 2
    assert "unrecognized arguments: --no-such-flag 3" in out.stderr


def test_deprecated_flags_warn_and_still_work(start_sim):
    sim = start_sim("--disable-cuda-graph", "--enable-dp-attention", "--dp-size", "2", "--tp-size", "2")
    log = sim.log()
    assert "'--disable-cuda-graph' is deprecated and will be removed in a future release." in log
    assert "'--enable-dp-attention' is deprecated" in log
    info = sim.client().get("/server_info").json()
    assert info["cuda_graph_config"]["decode"]["backend"] == "disabled"
    assert info["attn_dp_size"] == 2 and info["version"] == "0.5.23"
