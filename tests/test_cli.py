"""The command line's own surface: every option of every command explains itself in --help."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest

from conftest import REPO, Tuner, instant_space

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


def test_simulated_dry_run_from_a_folder_without_search_spaces(tuner):
    """An installed tuner, run where there is no search_spaces/ (the README's first dry run in an empty folder),
    refused with "space file search_spaces/default.yaml does not exist": the GLM-5 space run --help promises
    now comes from the package."""
    (tuner.folder / "search_spaces").unlink()
    done = tuner.run("run", "--trials", "1", "--simulate")
    assert done.returncode == 0, done.stderr[-3000:]
    assert tuner.study("glm5-nvfp4-sm120").trials


def test_a_space_that_does_not_exist_is_named_as_given(tuner):
    done = tuner.run("check", "--space", "nope/glm5.yaml", "--simulate")
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "error: space file nope/glm5.yaml does not exist; pass --space with an existing file"], done.stderr


def test_the_package_carries_the_default_and_simulated_spaces_as_the_repository_has_them():
    """tuner/spaces/ holds copies of search_spaces/ (package data, so that a wheel has them): equal, and the
    default space and the spaces of the shipped simulator profiles are all there."""
    from importlib.resources import files

    from tuner.sim import shipped_profiles

    shipped = {p.name: p.read_text() for p in (files("tuner") / "spaces").iterdir() if p.name.endswith(".yaml")}
    wanted = {"default.yaml"} | {f"{name}.yaml" for name in shipped_profiles()
                                 if (REPO / "search_spaces" / f"{name}.yaml").exists()}
    assert set(shipped) == wanted
    for name, text in shipped.items():
        assert text == (REPO / "search_spaces" / name).read_text(), f"tuner/spaces/{name} differs from search_spaces/"


def test_a_dry_run_on_a_guessed_profile_says_which_and_why(tuner):
    """The GLM-5 space in 0.5.23's flags was checked on the Llama 70B profile (the only one of 0.5.23) without a
    word: the profile named like it speaks 0.5.6. Now the screen says which profile, why, and how to choose."""
    done = tuner.run("check", "--space", "search_spaces/glm5-nvfp4-sm120-0.5.23.yaml", "--simulate")
    assert done.returncode == 0, done.stderr
    note = done.stdout.splitlines()[0]
    assert note.startswith("note: simulating glm5-nvfp4-sm120 with profile llama3-70b-8xh200 (8 x NVIDIA H200: "
                           "SGLang 0.5.23, as the space declares; glm5-nvfp4-sm120, named like the space, speaks "
                           "SGLang 0.5.6); choose another with --simulate PROFILE"), done.stdout
    # A profile named like the space, of its version, is no guess: nothing more is said.
    done = tuner.run("check", "--space", "search_spaces/glm5-nvfp4-sm120.yaml", "--simulate")
    assert done.returncode == 0 and done.stdout.startswith("ok: "), done.stdout


@pytest.mark.parametrize("args, usage, said", [
    (("run", "--trails", "3", "--simulate"), "usage: python -m tuner run ",
     "python -m tuner run: error: unrecognized argument --trails; did you mean --trials?"),
    (("show", "--sortt", "value"), "usage: python -m tuner show ",
     "python -m tuner show: error: unrecognized argument --sortt; did you mean --sort?"),
    (("knowledge", "export", "--out", "k.yaml", "--studdy", "x"), "usage: python -m tuner knowledge export ",
     "python -m tuner knowledge export: error: unrecognized argument --studdy; did you mean --study?"),
    (("report", "--bogus"), "usage: python -m tuner report ",
     "python -m tuner report: error: unrecognized arguments: --bogus"),
])
def test_a_mistyped_option_is_said_by_its_command_with_a_suggestion(tuner, args, usage, said):
    """`dashboard --study X` was refused with the top-level usage; `--trails` got no "did you mean"."""
    done = tuner.run(*args)
    assert done.returncode == 2 and done.stderr.startswith(usage), done.stderr
    assert done.stderr.strip().splitlines()[-1] == said, done.stderr


def test_help_lists_the_commands_as_a_user_meets_them():
    done = subprocess.run([sys.executable, "-m", "tuner", "--help"], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    listed = re.findall(r"^    (\w+) ", done.stdout, re.MULTILINE)
    assert listed == ["run", "show", "confirm", "export", "report", "dashboard", "check", "space", "knowledge",
                      "twin"], done.stdout
    assert "{run,show,confirm,export,report,dashboard,check,space,knowledge,twin}" in done.stdout


@pytest.mark.parametrize("command, example", [
    (["space"], "python -m tuner space upgrade search_spaces/glm5-nvfp4-sm120.yaml --to 0.5.23"),
    (["space", "upgrade"], "python -m tuner space upgrade search_spaces/glm5-nvfp4-sm120.yaml --to 0.5.23"),
    (["knowledge"], "python -m tuner knowledge export --out knowledge.yaml"),
    (["knowledge", "export"], "python -m tuner run --trials 40 --space other.yaml --learn-from knowledge.yaml"),
])
def test_space_and_knowledge_help_give_an_example(command, example):
    done = subprocess.run([sys.executable, "-m", "tuner", *command, "--help"], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 0 and "\nexample:\n  python -m tuner " in done.stdout, done.stdout
    assert f"\n  {example}" in done.stdout, done.stdout


def test_runs_last_table_says_where_each_trial_differs_from_the_winner(tuner):
    """Its rows listed every flag that varied among them, cut at one width: each ended in "+4 more". Now each
    lists where it differs from the winner, whole where the screen is no terminal, cut to COLUMNS where set."""
    names = ("max-running-requests", "cuda-graph-max-bs-decode", "chunked-prefill-size", "max-prefill-tokens",
             "schedule-conservativeness")
    params = "".join(f"  {name}: {{type: categorical, choices: [64, 128, 256]}}\n" for name in names)
    baseline = "{" + ", ".join(f"{name}: 128" for name in names) + "}"
    space = tuner.space(instant_space("wide", params=params, baseline=baseline))
    done = tuner.run("run", "--trials", "4", "--space", str(space), "--simulate", "instant")
    assert done.returncode == 0, done.stderr[-3000:]
    study = tuner.study("wide")
    best = max((t for t in study.trials if t.user_attrs["feasible"]), key=lambda t: t.value)
    lines = done.stderr.split(f"differs from trial {best.number}\n", 1)[1].split("\nnext:", 1)[0].splitlines()
    rows = {int(line.split()[0]): line.split(None, 4)[4] for line in lines}
    assert rows.pop(best.number) == "(the winner)"
    for number, flags in rows.items():
        params = study.trials[number].params
        assert flags.split() == [f"{k}={v}" for k, v in params.items() if v != best.params[k]], (number, flags)
    done = tuner.run("run", "--trials", "4", "--space", str(space), "--simulate", "instant", env={"COLUMNS": "90"})
    table = done.stderr.split(f"differs from trial {best.number}\n", 1)[1].split("\nnext:", 1)[0]
    assert all(len(line) <= 90 for line in table.splitlines()), table


def _recording_python(folder):
    """A python that notes each start (its arguments, one line) in used.log, then execs this one: as the python
    of another environment would be, with the same packages."""
    log = folder / "used.log"
    wrapper = folder / "env" / "bin" / "python"
    wrapper.parent.mkdir(parents=True)
    wrapper.write_text(f"#!/bin/sh\necho \"$*\" >> {shlex.quote(str(log))}\nexec {shlex.quote(sys.executable)} \"$@\"\n")
    wrapper.chmod(0o755)
    return wrapper, log


def test_server_python_runs_the_server_from_another_environment_and_confirm_reuses_it(tuner):
    """SGLang in another venv meant editing server.command in the space. --server-python names that python for
    check, run and confirm; run records it for confirm (and export) to launch the same server."""
    wrapper, log = _recording_python(tuner.folder)
    space = str(tuner.space(instant_space("other-env")))
    done = tuner.run("check", "--space", space, "--simulate", "instant", "--server-python", str(wrapper))
    assert done.returncode == 0 and f"'{wrapper} -m tuner.sim --help'" in done.stdout, done.stdout + done.stderr
    assert "-m tuner.sim --help" in log.read_text()

    done = tuner.run("run", "--trials", "1", "--space", space, "--simulate", "instant",
                     "--server-python", str(wrapper))
    assert done.returncode == 0, done.stderr[-3000:]
    assert tuner.study("other-env").user_attrs["server_command"] == [str(wrapper), "-m", "tuner.sim"]
    launches = [line for line in log.read_text().splitlines() if line.startswith("-m tuner.sim --model-path")]
    assert len(launches) == 1, log.read_text()

    done = tuner.run("confirm", "--trials", "0", "--repeats", "1", "--server-python", "nope/bin/python")
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [f"error: {NO_PYTHON}"], done.stderr
    assert "confirmations" not in tuner.study("other-env").user_attrs
    done = tuner.run("confirm", "--trials", "0", "--repeats", "1")  # the recorded python, without the option
    assert done.returncode == 0, done.stderr[-3000:]
    launches = [line for line in log.read_text().splitlines() if line.startswith("-m tuner.sim --model-path")]
    assert len(launches) == 2, log.read_text()


NO_PYTHON = ("--server-python nope/bin/python does not exist; pass the python of the environment that has SGLang, "
             "e.g. --server-python /opt/sglang/bin/python")


@pytest.mark.parametrize("command", [("run", "--trials", "1"), ("check",)])
def test_a_server_python_that_does_not_exist_is_refused_in_one_line_and_nothing_is_written(tuner, command):
    space = str(tuner.space(instant_space("no-python")))
    before = sorted(p.name for p in tuner.folder.iterdir())
    done = tuner.run(*command, "--space", space, "--simulate", "instant", "--server-python", "nope/bin/python")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [f"error: {NO_PYTHON}"], done.stderr
    assert done.stdout == "" and sorted(p.name for p in tuner.folder.iterdir()) == before


def test_server_python_refuses_a_server_command_that_is_no_python_module(tuner):
    space = tuner.space(instant_space("script", server="  command: [bash, serve.sh]\n"))
    done = tuner.run("check", "--space", str(space), "--server-python", sys.executable)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: --server-python replaces the python of a 'PYTHON -m MODULE' server command; this one is "
        "'bash serve.sh'; drop --server-python and set server.command in the space file"], done.stderr
