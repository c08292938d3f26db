"""The README's GPU-host `check` and `space upgrade` against SGLang's own parsers.

The reference environments of scripts/setup_sglang_ref.sh stand in for `pip install -e '.[gpu]'`: the same
SGLang, without its GPU stack, which `--help` and `import sglang` do not need. Their bin/ goes first on PATH,
so that the spaces' `server.command: [python, -m, sglang.launch_server]` runs that SGLang, as it would run the
one the gpu extra installs; the tuner itself runs from this interpreter.
"""

from __future__ import annotations

import os
import re
import shlex
import tomllib

from conftest import REPO

from .test_flags_contract import VENVS, _ref_python

SEED = "search_spaces/glm5-nvfp4-sm120.yaml"  # SGLang 0.5.6
SEED_0523 = "search_spaces/glm5-nvfp4-sm120-0.5.23.yaml"
MODEL = "/models/GLM-5-NVFP4"  # the README's model folder: a folder made here stands in for it


def _with_sglang(version: str) -> dict[str, str]:
    _ref_python(version)  # skipped, or failed under TUNER_TEST_SGLANG_REF=1, without the environment
    return {"PATH": f"{VENVS[version] / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}


def _gpu_host_block() -> list[str]:
    readme = (REPO / "README.md").read_text()
    block = re.search(r"## On a GPU host\n\n```bash gpu\n(.*?)```", readme, re.S)  # gpu: the docs check does not run it
    assert block, "README.md has no ```bash gpu block under '## On a GPU host'"
    return [line.split("  #")[0].strip() for line in block.group(1).splitlines()]


def test_readme_gpu_host_check_runs_as_written_against_the_pinned_sglang(tuner):
    """`pip install -e '.[gpu]'` installs the SGLang of .venv-sglang, and the README's `check` line passes its
    own parser as written (the model folder aside)."""
    lines = _gpu_host_block()
    assert "pip install -e '.[gpu]'" in lines
    gpu = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["gpu"]
    assert "sglang==0.5.23" in gpu, gpu  # the version of .venv-sglang (scripts/setup_sglang_ref.sh)
    check = next(line for line in lines if line.startswith("python -m tuner check"))
    run = next(line for line in lines if line.startswith("python -m tuner run"))
    space = shlex.split(check)[shlex.split(check).index("--space") + 1]
    assert space == shlex.split(run)[shlex.split(run).index("--space") + 1]
    (tuner.folder / "GLM-5-NVFP4").mkdir()
    argv = [arg.replace(MODEL, str(tuner.folder / "GLM-5-NVFP4")) for arg in shlex.split(check)[3:]]
    done = tuner.run(*argv, env=_with_sglang("0.5.23"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "error" not in done.stdout and "(SGLang 0.5.23)" in done.stdout, done.stdout


def test_seed_space_against_sglang_0523_names_the_rewrite_and_the_rewrite_goes_back_to_056(tuner):
    """The 0.5.6 seed against 0.5.23's parser: refused, with the version read from the installed package and the
    command that rewrites it; that command's output (the shipped 0.5.23 space, tests/versions/test_versions.py)
    rewritten back to 0.5.6 passes 0.5.6's parser."""
    (tuner.folder / "model").mkdir()
    done = tuner.run("check", "--space", SEED, "--model", "model", env=_with_sglang("0.5.23"))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "error: --nsa-decode-backend is not accepted by this version (renamed)" in done.stdout
    assert "error: --cuda-graph-max-bs is ambiguous in this version" in done.stdout
    assert (f"hint: {SEED} is written for SGLang 0.5.6 and the server is SGLang 0.5.23: rewrite it with: "
            f"python -m tuner space upgrade --to 0.5.23 {SEED} > glm5-nvfp4-sm120-0.5.23.yaml") in done.stdout

    back = tuner.run("space", "upgrade", "--to", "0.5.6", SEED_0523, "--out", "back.yaml")
    assert back.returncode == 0, back.stderr
    done = tuner.run("check", "--space", "back.yaml", "--model", "model", env=_with_sglang("0.5.6"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "(SGLang 0.5.6)" in done.stdout, done.stdout
