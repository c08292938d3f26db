"""SGLang versions: `check` names the server's version and a space written for another one, with the command
that rewrites it; `space upgrade` rewrites a space between 0.5.6 and 0.5.23. Against the simulator's parser,
which tests/contract holds to SGLang's own; tests/contract/test_versions_contract.py does the same against the
real parsers."""

from __future__ import annotations

import shlex

import yaml

from conftest import REPO, instant_space

SEED = "search_spaces/glm5-nvfp4-sm120.yaml"  # SGLang 0.5.6
SEED_0523 = "search_spaces/glm5-nvfp4-sm120-0.5.23.yaml"


def _hint(stdout: str) -> str:
    lines = [line for line in stdout.splitlines() if line.startswith("hint: ")]
    assert len(lines) == 1, stdout
    return lines[0]


def test_check_names_a_space_of_another_version_and_the_command_that_rewrites_it(tuner):
    done = tuner.run("check", "--space", SEED, "--simulate", "llama3-8b-h200")
    assert done.returncode == 2 and done.stderr == "", done.stderr
    assert "error: --nsa-decode-backend is not accepted by this version (renamed)" in done.stdout
    hint = _hint(done.stdout)
    assert hint == (f"hint: {SEED} is written for SGLang 0.5.6 and the server is SGLang 0.5.23 (simulator profile "
                    "llama3-8b-h200): pass --simulate NAME with a profile of SGLang 0.5.6 (glm5-nvfp4-sm120), or "
                    f"rewrite it with: python -m tuner space upgrade --to 0.5.23 {SEED} > glm5-nvfp4-sm120-0.5.23.yaml")
    # The command it names, run as it says, writes a space that this server takes.
    argv, out = hint.split("rewrite it with: ")[1].split(" > ")
    upgraded = tuner.run(*shlex.split(argv)[3:])
    assert upgraded.returncode == 0, upgraded.stderr
    (tuner.folder / out).write_text(upgraded.stdout)
    done = tuner.run("check", "--space", out, "--simulate", "llama3-8b-h200")
    assert done.returncode == 0 and "hint" not in done.stdout, done.stdout
    assert "(simulator profile llama3-8b-h200, SGLang 0.5.23)" in done.stdout
    # A `run` refuses the old one in one line that says the same.
    run = tuner.run("run", "--trials", "1", "--space", SEED, "--simulate", "llama3-8b-h200")
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "space upgrade --to 0.5.23" in run.stderr
    assert not (tuner.folder / "trials.db").exists()


def test_a_space_of_another_version_whose_flags_all_pass_is_a_warning(tuner):
    space = tuner.space(instant_space("older") + 'sglang-version: "0.5.6"\n')
    done = tuner.run("check", "--space", str(space), "--simulate", "instant")
    assert done.returncode == 0, done.stdout
    assert done.stdout.startswith(f"warning: {space} is written for SGLang 0.5.6 and the server is SGLang 0.5.23")


def test_a_typo_under_simulate_gets_its_did_you_mean_and_no_word_about_profiles(tuner):
    """A typo is no reason to pick another simulator profile: no hint says so (one did), whether the profile was
    named, found by the space's name, or chosen for the space."""
    typo = (REPO / "search_spaces/llama3-8b-h200.yaml").read_text().replace("schedule-conservativeness:",
                                                                             "schedule-conservativness:")
    named_like_a_profile = tuner.space(typo, "llama3-8b-h200.yaml")
    unnamed = tuner.space(typo.replace("name: llama3-8b-h200", "name: mine"), "mine.yaml")
    for space, simulate in ((named_like_a_profile, ["--simulate", "llama3-8b-h200"]),
                            (named_like_a_profile, ["--simulate"]), (unnamed, ["--simulate"])):
        done = tuner.run("check", "--space", str(space), *simulate)
        assert done.returncode == 2, done.stdout + done.stderr
        assert done.stdout == ("error: --schedule-conservativness is not a flag of this server; "
                               "did you mean 'schedule-conservativeness'?\n"), done.stdout
    run = tuner.run("run", "--trials", "1", "--space", str(unnamed), "--simulate")
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert "did you mean 'schedule-conservativeness'?" in run.stderr and "--simulate NAME" not in run.stderr


def test_upgrade_of_the_seed_is_the_shipped_0523_space_and_goes_back(tuner):
    done = tuner.run("space", "upgrade", "--to", "0.5.23", SEED)
    assert done.returncode == 0, done.stderr
    # The shipped file is this command's output: regenerate it with the README's command when the seed changes.
    assert done.stdout == (REPO / SEED_0523).read_text()
    changed = [line for line in done.stderr.splitlines() if line.startswith("changed: ")]
    assert changed == [
        "changed: params.cuda-graph-bs: --cuda-graph-bs -> --cuda-graph-bs-decode (SGLang 0.5.23 has no --cuda-graph-bs)",
        "changed: params.cuda-graph-max-bs: --cuda-graph-max-bs -> --cuda-graph-max-bs-decode "
        "(SGLang 0.5.23 has no --cuda-graph-max-bs)",
        "changed: params.disable-cuda-graph: --disable-cuda-graph -> --disable-decode-cuda-graph "
        "(SGLang 0.5.23 calls --disable-cuda-graph deprecated)",
        "changed: params.nsa-decode-backend: --nsa-decode-backend -> --dsa-decode-backend "
        "(SGLang 0.5.23 has no --nsa-decode-backend)"]
    assert "note: --disable-decode-cuda-graph for --disable-cuda-graph: SGLang 0.5.23 also captures prefill" in done.stderr
    # Comments stay; the names move wherever they stand (when, up-to, baseline).
    assert "# what worked by hand" in done.stdout and "up-to: cuda-graph-max-bs-decode" in done.stdout
    # Back to 0.5.6 (--out): the seed's data again.
    back = tuner.run("space", "upgrade", "--to", "0.5.6", SEED_0523, "--out", "back.yaml")
    assert back.returncode == 0 and back.stdout == "", back.stderr
    assert yaml.safe_load((tuner.folder / "back.yaml").read_text()) == yaml.safe_load((REPO / SEED).read_text())


def test_upgrade_names_what_it_cannot_map_and_writes_nothing(tuner):
    space = tuner.space("""
        name: newer
        sglang-version: "0.5.23"
        server:
          model-path: /m
          fixed: {tp-size: 4, attn-dp-size: 2}
        params:
          dsa-decode-backend: {type: categorical, choices: [flashmla_kv, trtllm]}
          disable-prefill-cuda-graph: {type: bool}
          cuda-graph-max-bs-decode: {type: categorical, choices: [32, 64]}
        """)
    done = tuner.run("space", "upgrade", "--to", "0.5.6", str(space), "--out", "old.yaml")
    assert done.returncode == 2 and done.stdout == "", done.stdout
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(
        f"error: {space} cannot be rewritten for SGLang 0.5.6 automatically: "), done.stderr
    for item in ("server.fixed.attn-dp-size: SGLang 0.5.6 has no --attn-dp-size (added after 0.5.6)",
                 "params.disable-prefill-cuda-graph: SGLang 0.5.6 has no --disable-prefill-cuda-graph",
                 "params.dsa-decode-backend.choices: trtllm is not a choice of --nsa-decode-backend in SGLang 0.5.6"):
        assert item in done.stderr
    assert not (tuner.folder / "old.yaml").exists()
    assert "error: --to 0.5.7: the tuner has the flags of SGLang 0.5.6, 0.5.17 and 0.5.23 only" in \
        tuner.run("space", "upgrade", "--to", "0.5.7", str(space)).stderr


def test_upgrade_respells_fixed_deprecated_flags_as_export_does(tuner):
    space = tuner.space("""
        name: fixed-flags
        server:
          model-path: /m
          fixed: {tp-size: 4, dp-size: 4, enable-dp-attention: true, enable-nan-detection: true}
        params:
          mem-fraction-static: {type: float, low: 0.8, high: 0.9, step: 0.01}
        """)
    done = tuner.run("space", "upgrade", "--to", "0.5.23", str(space))
    assert done.returncode == 0, done.stderr
    data = yaml.safe_load(done.stdout)
    assert data["sglang-version"] == "0.5.23"
    assert data["server"]["fixed"] == {"tp-size": 4, "attn-dp-size": 4}  # --dp-size N --enable-dp-attention
    assert data["server"]["env"] == {"SGLANG_ENABLE_NAN_LOGITS_CHECK": "1"}
    assert "comments are not kept" in done.stdout
    up = tuner.space(done.stdout, "up.yaml")
    assert tuner.run("check", "--space", str(up), "--simulate", "instant").returncode == 0
