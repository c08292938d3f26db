"""The command line's own surface: every option of every command explains itself in --help."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

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
