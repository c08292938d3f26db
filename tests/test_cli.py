"""The command line's own surface: every option of every command explains itself in --help."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest

from conftest import Tuner, instant_space

COMMANDS = ["run", "check", "export", "confirm", "dashboard", "report", "show"]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_has_help_text(command):
    done = subprocess.run([sys.executable, "-m", "tuner", command, "--help"], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    options = done.stdout.split("options:", 1)[1]
    # argparse prints an option's help on its line (after two spaces) or indented on the next one.
    entries = re.split(r"\n  (?=-)", "\n" + options.strip("\n"))[1:]
    assert len(entries) >= 2, options
    for entry in entries:
        invocation, _, rest = entry.partition("  ")
        assert rest.strip() or "\n" in entry.strip(), f"{command}: no help for {invocation.strip()}"


@pytest.fixture(scope="module")
def one_trial(tmp_path_factory):
    """A study of one trial of the instant profile, for the commands that read one."""
    t = Tuner(tmp_path_factory.mktemp("cli"))
    try:
        done = t.run("run", "--space", str(t.space(instant_space("cli"))), "--simulate", "instant", "--trials", "1")
        assert done.returncode == 0, done.stderr[-3000:]
        yield t
    finally:
        t.end_leftovers()


# --help is left out: argparse itself drops a write that fails.
@pytest.mark.parametrize("args", [("show",), ("show", "--wide"), ("export", "--out", "-"),
                                  ("export", "--format", "json", "--out", "-"), ("check", "--simulate")])
def test_a_reader_that_closed_the_pipe_gets_no_traceback(one_trial, args):
    """`python -m tuner show | head -1` printed a BrokenPipeError traceback and exited 1. The pipe here has no
    reader from the start (its read end closed before the tuner starts), so every write meets it closed, as a
    write after `head` has exited does."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(one_trial.argv(*args), cwd=one_trial.folder, env=one_trial.env, stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=120, stdin=subprocess.DEVNULL)
    finally:
        os.close(write)
    assert done.returncode == 141, done.stderr  # as a process killed by SIGPIPE: 128 + 13
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr


def test_head_of_show_in_a_shell_pipeline(one_trial):
    done = subprocess.run(["bash", "-c", "set -o pipefail; " + shlex.join(one_trial.argv("show")) + " | head -1"],
                          cwd=one_trial.folder, env=one_trial.env, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert done.stdout.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.returncode in (0, 141), done.stderr  # 0 where show wrote all before head closed the pipe
