"""Security, end to end: the API key reaches the server and every request, secrets never reach what the
tuner writes, the server binds to 127.0.0.1, and files go only under the work folder and the outputs named."""

from __future__ import annotations

import os
from pathlib import Path

from conftest import FAULT_SPACE

API_KEY = "sk-tuner-test-5f3a9c71"
SPACE_SECRET = "hf_space_secret_77e1"  # a secret-looking variable set in the space file for the server
TUNER_SECRET = "pw-tuner-secret-31b2"  # a secret-looking variable in the tuner's own environment

SECRET_SPACE = FAULT_SPACE.replace(
    "  stall-timeout: 3\n", "  stall-timeout: 3\n  api-key-env: TUNER_TEST_API_KEY\n"
                            f"  env: {{HF_TOKEN: {SPACE_SECRET}}}\n")


def files_under(folder: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file() and not p.is_symlink()}


def test_api_key_is_used_by_every_stage_and_no_secret_is_written_anywhere(tuner):
    space = tuner.space(SECRET_SPACE)
    env = {"TUNER_TEST_API_KEY": API_KEY, "DB_PASSWORD": TUNER_SECRET}
    outputs = [tuner.run("run", "--trials", "2", "--space", str(space), "--simulate", "instant", env=env)]
    assert outputs[0].returncode == 0, outputs[0].stderr[-3000:]
    # The simulated server answers 401 to any request without `Authorization: Bearer <key>` (other than
    # /health), so feasible trials mean the gate and the probe both sent the key.
    study = tuner.study("faults")
    assert [t.user_attrs.get("failure_kind") for t in study.trials] == ["none", "none"]
    for record in tuner.server_records():
        argv = record["argv"]
        assert argv[argv.index("--host") + 1] == "127.0.0.1"
        assert "--api-key" in argv and API_KEY not in argv  # recorded masked

    for fmt in ("yaml", "cmd", "json"):
        outputs.append(tuner.run("export", "--format", fmt, "--out", f"best.{fmt}", env=env))
        assert outputs[-1].returncode == 0, outputs[-1].stderr
    outputs.append(tuner.run("show", env=env))
    outputs.append(tuner.run("report", "--out", "report", env=env, timeout=240))
    assert outputs[-1].returncode == 0, outputs[-1].stderr[-2000:]
    assert "HF_TOKEN" in (tuner.folder / "best.cmd").read_text()  # the name is kept, the value masked

    written = files_under(tuner.folder)
    assert any(p.name == "server.log" for p in written) and any(p.suffix == ".png" for p in written)
    for secret in (API_KEY, SPACE_SECRET, TUNER_SECRET):
        leaks = [str(p.relative_to(tuner.folder)) for p, data in written.items()
                 if secret.encode() in data and p != space]  # the user's own space file holds it
        leaks += [f"output of {' '.join(o.args[3:5])}" for o in outputs if secret in o.stdout + o.stderr]
        assert not leaks, f"{secret} leaked into {leaks}"


def test_a_run_writes_only_under_its_work_folder_and_the_storage(tuner, tmp_path_factory):
    """HOME and TMPDIR point at empty folders and the tuner runs from a folder of its own: afterwards the
    only new things are the storage file, the work folder and the export named on the command line."""
    home = tmp_path_factory.mktemp("home")
    tmp = tmp_path_factory.mktemp("tmpdir")
    space = tuner.space(FAULT_SPACE)
    before = set(os.listdir(tuner.folder))
    env = {"HOME": str(home), "TMPDIR": str(tmp), "XDG_CACHE_HOME": str(home / ".cache"),
           "PYTHONDONTWRITEBYTECODE": "1"}
    done = tuner.run("run", "--trials", "2", "--space", str(space), "--simulate", "instant",
                     "--workdir", "work/here", env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    done = tuner.run("export", "--out", "out/best.yaml", env=env)
    assert done.returncode == 0, done.stderr
    assert sorted(set(os.listdir(tuner.folder)) - before) == ["out", "trials.db", "trials.db.lock", "work"]
    assert os.listdir(tuner.folder / "out") == ["best.yaml"]
    assert os.listdir(tuner.folder / "work") == ["here"]
    assert list(home.iterdir()) == [] and list(tmp.iterdir()) == []
