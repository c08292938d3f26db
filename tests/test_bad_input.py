"""Bad input: one line naming the problem and the fix, exit status 2, nothing written to the storage."""

from __future__ import annotations

import importlib.util
import socket
import sys

import pytest

from conftest import FAULT_SPACE

SPACES = {
    "malformed-yaml": ("name: [unclosed\n", "not valid YAML"),
    "wrong-type": (FAULT_SPACE.replace("low: 0.1", "low: lots"), "must be a number"),
    "unknown-key": (FAULT_SPACE.replace("warmup: 0", "warmpu: 0"), "did you mean 'warmup'"),
    "missing-key": (FAULT_SPACE.replace("  model-path: /models/instant\n", ""), "server.model-path: is required"),
    "empty": ("", "is empty"),
    "low-above-high": (FAULT_SPACE.replace("low: 0.1, high: 2.0", "low: 3.0, high: 2.0"), "greater than high"),
    "when-unknown": (FAULT_SPACE.replace("step: 0.01}", "step: 0.01, when: {cuda-graph: true}}"),
                     "names no parameter"),
    "unsatisfiable": (FAULT_SPACE + "constraints:\n  - product: [tp-size]\n    max: 0\n", "no configuration"),
    "baseline-outside": (FAULT_SPACE.replace("baseline: {schedule-conservativeness: 1.0}",
                                             "baseline: {schedule-conservativeness: 9.0}"), "outside the space"),
    "version-a-number": (FAULT_SPACE + "sglang-version: 0.6\n", 'sglang-version: must be a string, got the number 0.6; quote it: "0.6"'),
    "unknown-flag": (FAULT_SPACE.replace("  schedule-conservativeness:", "  schedule-conservativness:")
                     .replace("baseline: {schedule-conservativeness: 1.0}", ""), "did you mean"),
}


def assert_refused(done, expected: str, tuner) -> None:
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert expected in lines[0]
    assert not (tuner.folder / "trials.db").exists()
    assert not (tuner.folder / "runs").exists()


@pytest.mark.parametrize("name", SPACES)
def test_bad_space_file(tuner, name):
    text, expected = SPACES[name]
    path = tuner.space(text)
    done = tuner.run("run", "--trials", "3", "--space", str(path), "--simulate", "instant")
    assert_refused(done, expected, tuner)


def test_a_yaml_error_names_the_line_to_fix(tuner):
    """An unclosed bracket on line 32 was reported on line 33, where PyYAML noticed it."""
    lines = FAULT_SPACE.strip("\n").splitlines()
    lines += [f"# filler {i}" for i in range(31 - len(lines))] + ["extra: [1, 2", "more: 3"]
    assert lines[31] == "extra: [1, 2"
    done = tuner.run("run", "--trials", "3", "--space", str(tuner.space("\n".join(lines) + "\n")),
                     "--simulate", "instant")
    assert_refused(done, "space.yaml is not valid YAML at line 32, column 8: while parsing a flow sequence, expected "
                   "',' or ']', but got ':' (on line 33)", tuner)


def test_space_file_that_does_not_exist(tuner):
    assert_refused(tuner.run("run", "--trials", "3", "--space", "nope.yaml"), "does not exist", tuner)


@pytest.mark.parametrize("trials", ["0", "-4"])
def test_trials_must_be_positive(tuner, trials):
    path = tuner.space(FAULT_SPACE)
    assert_refused(tuner.run("run", "--trials", trials, "--space", str(path), "--simulate", "instant"),
                   "--trials must be at least 1", tuner)


def test_model_path_that_does_not_exist(tuner):
    path = tuner.space(FAULT_SPACE.replace("model-path: /models/instant", "model-path: ./no-such-model")
                       .replace("server:\n", "server:\n  command: [python3, -m, tuner.sim]\n"))
    assert_refused(tuner.run("run", "--trials", "3", "--space", str(path)), "model path", tuner)


def test_server_command_not_found(tuner):
    path = tuner.space(FAULT_SPACE.replace("server:\n", "server:\n  command: [/no/such/sglang-server]\n")
                       .replace("model-path: /models/instant", "model-path: ."))
    assert_refused(tuner.run("run", "--trials", "3", "--space", str(path)), "server command not found", tuner)


@pytest.mark.parametrize("url, expected", [
    ("trials.db", "is not a URL"),
    ("nosuchdb://x/y", "malformed"),
    # SQLite is a file: no word of a database server; a missing folder is named (SQLite makes the file only).
    ("sqlite:////no/such/folder/trials.db", "the folder /no/such/folder of the SQLite file"),
    ("sqlite:///nope/x.db", "the folder nope ("),
    ("sqlite:///space.yaml", "cannot be opened: file is not a database"),
    ("postgresql+psycopg2://tuner:secret@127.0.0.1:1/tuner", "unreachable"),
])
def test_bad_storage_url(tuner, url, expected):
    path = tuner.space(FAULT_SPACE)
    done = tuner.run("run", "--trials", "3", "--space", str(path), "--simulate", "instant", "--storage", url)
    assert_refused(done, expected, tuner)
    assert "secret" not in done.stderr
    assert ("database server" in done.stderr) == url.startswith("postgresql"), done.stderr
    assert "mkdir -p" in done.stderr or "folder" not in expected


def test_missing_engine_is_named_before_a_missing_model_folder(tuner):
    """Without SGLang installed, `check` says so first, not that the model folder is missing (it said only that
    until a folder existed)."""
    if importlib.util.find_spec("sglang") is not None:
        pytest.skip("this Python has SGLang: the case is a Python without it")
    path = tuner.space(FAULT_SPACE.replace("server:\n", f"server:\n  command: [{sys.executable}, -m, sglang.launch_server]\n")
                       .replace("model-path: /models/instant", "model-path: ./no-such-model"))
    for command in ("check", "run"):
        done = tuner.run(command, *(["--trials", "1"] if command == "run" else []), "--space", str(path))
        assert_refused(done, "has no module sglang", tuner)
        assert "model path" not in done.stderr and "pip install -e '.[gpu]'" in done.stderr


def test_study_with_a_changed_space_is_refused_unless_told(tuner):
    path = tuner.space(FAULT_SPACE)
    assert tuner.run("run", "--trials", "1", "--space", str(path), "--simulate", "instant").returncode == 0
    path.write_text(path.read_text().replace("high: 2.0", "high: 3.0"))
    done = tuner.run("run", "--trials", "2", "--space", str(path), "--simulate", "instant")
    assert done.returncode == 2 and "different search space" in done.stderr and "--fresh" in done.stderr
    assert len(tuner.study("faults").trials) == 1  # nothing written
    assert tuner.run("run", "--trials", "2", "--space", str(path), "--simulate", "instant",
                     "--continue").returncode == 0
    assert len(tuner.study("faults").trials) == 2
    assert tuner.run("run", "--trials", "1", "--space", str(path.with_name("space.yaml")), "--simulate",
                     "instant", "--fresh").returncode == 0


def test_export_and_confirm_without_eligible_trial(tuner):
    path = tuner.space(FAULT_SPACE)
    assert tuner.run("run", "--trials", "1", "--space", str(path), "--simulate", "instant",
                     env={"TUNER_SIM_FAULTS": "crash_at_start"}).returncode == 0
    for args in (["export"], ["confirm", "--top", "1", "--repeats", "1"]):
        done = tuner.run(*args)
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip().count("\n") == 0 and "no trial that passed every gate" in done.stderr
    assert not (tuner.folder / "best.yaml").exists()


def test_missing_storage_and_unknown_study(tuner):
    for args in (["show"], ["export"]):
        done = tuner.run(*args)
        assert done.returncode == 2 and "no study" in done.stderr, done.stderr
    path = tuner.space(FAULT_SPACE)
    assert tuner.run("run", "--trials", "1", "--space", str(path), "--simulate", "instant").returncode == 0
    done = tuner.run("show", "--study", "nope")
    assert done.returncode == 2 and "no study named 'nope'" in done.stderr


def test_dashboard_on_a_busy_port(tuner):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        path = tuner.space(FAULT_SPACE)
        assert tuner.run("run", "--trials", "1", "--space", str(path), "--simulate", "instant").returncode == 0
        done = tuner.run("dashboard", "--port", str(port), timeout=30)
    assert done.returncode == 2 and f"port {port} is in use" in done.stderr
