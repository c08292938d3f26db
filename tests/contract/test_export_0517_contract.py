"""An SGLang 0.5.17 winner's best.yaml through 0.5.17's own --config merger and parser.

Found on a real H100: 0.5.17's merger (sglang/srt/server_args_config_parser.py) refuses any key equal to the
dest of an action that is neither store nor store_true, so `cuda-graph-max-bs-decode: 256`, the dest of the
deprecated alias --cuda-graph-max-bs, is refused ("Unsupported config option 'cuda_graph_max_bs_decode' with
action 'DeprecatedAliasStoreAction'"). export writes such a flag under the alias the merger takes.
"""

from __future__ import annotations

import json
import subprocess

from conftest import REPO

from .test_flags_contract import _ref_python

PROFILE = (REPO / "tuner" / "sim" / "profiles" / "instant.yaml").read_text().replace(
    'sglang_version: "0.5.23"', 'sglang_version: "0.5.17"').replace("name: instant\n", "name: instant-0517\n")

SPACE = """\
name: export-0517
engine: sglang
server:
  model-path: {model}
  startup-timeout: 30
  stall-timeout: 10
  fixed: {{cuda-graph-backend-decode: full, cuda-graph-max-bs-decode: 64, enable-torch-compile: true}}
params:
  page-size: {{type: categorical, choices: [1, 16]}}
baseline: {{page-size: 1}}
probe: {{concurrency: [4], requests: 8, input-len: 16, output-len: 8, warmup: 0}}
"""

# Run by the reference environment's Python: SGLang's own merger and parser, as launch_server uses them.
MERGE = """
import argparse, json, sys
from sglang.srt.server_args import ServerArgs
from sglang.srt.server_args_config_parser import ConfigArgumentMerger
parser = argparse.ArgumentParser()
ServerArgs.add_cli_args(parser)
argv = ConfigArgumentMerger(parser).merge_config_with_args(["--config", sys.argv[1]])
ns = parser.parse_args(argv)
print(json.dumps({k: getattr(ns, k) for k in ("cuda_graph_max_bs_decode", "cuda_graph_backend_decode",
                                               "enable_torch_compile", "page_size")}))
"""


def test_0517_winner_loads_through_sglang_0517s_config_merger(tuner):
    python = _ref_python("0.5.17")
    model = tuner.folder / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    profile = tuner.folder / "instant-0517.yaml"
    profile.write_text(PROFILE)
    space = tuner.space(SPACE.format(model=model))
    done = tuner.run("run", "--trials", "1", "--space", str(space), "--simulate", str(profile))
    assert done.returncode == 0, done.stderr[-3000:]
    done = tuner.run("export", "--out", "best.yaml")
    assert done.returncode == 0, done.stderr
    assert not (tuner.folder / "best.sh").exists()  # the file alone launches it
    merged = subprocess.run([str(python), "-c", MERGE, str(tuner.folder / "best.yaml")], capture_output=True,
                            text=True, timeout=300, cwd=tuner.folder)
    assert merged.returncode == 0, merged.stderr[-3000:]
    got = json.loads(merged.stdout.strip().splitlines()[-1])
    assert got == {"cuda_graph_max_bs_decode": 64, "cuda_graph_backend_decode": "full",
                   "enable_torch_compile": True, "page_size": 1}
