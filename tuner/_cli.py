"""Command line: `python -m tuner run|check|export|show|twin ...`."""

from __future__ import annotations

import argparse
import difflib
import os
import re
import signal
import sys
from collections.abc import Sequence

from ._errors import TunerError, UsageError
from .results import DEFAULT_STORAGE, Target, choose
from .search import CARRY_MEASURED, CARRY_PARTS, DEFAULT_PARTS, SAMPLERS, parse_parts
from .versions import AUTO, DEFAULT_PROFILE

# --help's order of the commands: as a user meets them.
COMMAND_ORDER = ("run", "show", "confirm", "export", "report", "dashboard", "check", "space", "knowledge", "twin")
SPACE_EXAMPLE = """example:
  python -m tuner space upgrade search_spaces/glm5-nvfp4-sm120.yaml --to 0.5.23 --out glm5-0.5.23.yaml"""
KNOWLEDGE_EXAMPLE = """example:
  python -m tuner knowledge export --out knowledge.yaml
  python -m tuner run --trials 40 --space other.yaml --learn-from knowledge.yaml"""

# The commands that only read a study: without --storage they follow the last run in this folder.
READERS = ("export", "confirm", "dashboard", "report", "show")


class _Parser(argparse.ArgumentParser):
    """argparse, with a "did you mean" for a mistyped option (Python 3.12's suggest_on_error covers choices,
    not options, and this is 3.11), said by the command that was given, with its usage."""

    def parse_known_args(self, args=None, namespace=None):
        # What this (sub)command was given, for error(): a subcommand's parser is called with its own part.
        self.given = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str):
        known = [o for o in self._option_string_actions if o.startswith("--")]
        for token in getattr(self, "given", ()):
            name = token.split("=", 1)[0]
            if name.startswith("--") and name not in self._option_string_actions and not re.match(r"-\d", name):
                # argparse takes a unique prefix (--tri for --trials): that is no typo.
                if any(option.startswith(name) for option in known):
                    continue
                # Compared without the dashes, which every option shares: --bogus is not near --out.
                close = difflib.get_close_matches(name[2:], [option[2:] for option in known], n=1, cutoff=0.6)
                if close:
                    message = f"unrecognized argument {name}; did you mean --{close[0]}?"
                    break
        super().error(message)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m tuner",
                     description="Find the fastest launch configuration that still answers correctly.")
    sub = parser.add_subparsers(dest="command", required=True)

    def storage_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--storage", default=DEFAULT_STORAGE, help="Optuna storage URL (default: %(default)s)")
        p.add_argument("--study", default=None, help="study name (default: the space's name)")

    def read_storage_args(p: argparse.ArgumentParser) -> None:
        # None: not given, so that the last run's record decides (an explicit sqlite:///trials.db does not follow it).
        p.add_argument("--storage", default=None, help="Optuna storage URL (default: the one the last run in this "
                       f"folder used, as runs/last-run.json records it, else {DEFAULT_STORAGE})")
        p.add_argument("--study", default=None, help="study name (default: the storage's only study, or the "
                       "one the last run in this folder used)")

    def space_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--space", default=None, help="search-space file (default: search_spaces/default.yaml, "
                       "or search_spaces/<profile>.yaml with --simulate; where this folder has none, the copy "
                       "the package carries)")
        p.add_argument("--model", default=None, help="model path (overrides server.model-path)")
        p.add_argument("--simulate", nargs="?", const=AUTO, default=None, metavar="PROFILE",
                       help="launch the simulated SGLang server (tuner.sim) instead of the real one, with this "
                       "profile (a name or a file); without one: the profile the space names (sim-profile:), "
                       "else the one named like the space, else one of the space's SGLang version; "
                       f"without --space: {DEFAULT_PROFILE} and its space")
        server_python_arg(p)

    def server_python_arg(p: argparse.ArgumentParser, recorded: str = "") -> None:
        p.add_argument("--server-python", default=None, metavar="PATH",
                       help="the python that runs the server's -m MODULE, e.g. SGLang's in another venv or conda "
                       "env: it replaces the first word of server.command (with --simulate, the python of "
                       "tuner.sim)" + recorded)

    run = sub.add_parser("run", help="run (or continue) a study")
    run.add_argument("--trials", type=int, required=True, help="total trials the study should have (a study "
                     "that has 40 and is run with --trials 60 runs 20 more)")
    space_args(run)
    storage_args(run)
    run.add_argument("--sampler", choices=SAMPLERS, default="tpe",
                     help="how configurations are proposed: tpe (learns which flags crash; the default), random, "
                     "or gp (Optuna's Gaussian-process sampler; needs scipy and torch); fixed when the study is "
                     "created")
    run.add_argument("--seed", type=int, default=0, help="the sampler's random seed, for a repeatable sequence of "
                     "proposals (default: %(default)s)")
    run.add_argument("--workdir", default="runs", help="where server logs and records go (default: %(default)s)")
    run.add_argument("--timeout", type=float, default=None, help="stop starting trials after this many seconds")
    run.add_argument("--api-key-env", default=None, metavar="NAME",
                     help="environment variable holding the server's API key")
    run.add_argument("--gpus", default=None, help="GPUs the trials may use, e.g. 0-7: trials that need fewer "
                     "run in parallel on disjoint subsets")
    run.add_argument("--parallel", type=int, default=None, help="trials at once (default: as the GPUs allow)")
    run.add_argument("--learn-from", nargs="+", default=None, metavar="SOURCE",
                     help="earlier studies to start from: a study of this storage (its name), another storage "
                     "(sqlite:///other.db, or URL#study), or a knowledge file (knowledge export); 'none' starts "
                     "cold (default: the studies of this storage on the same engine and GPU); --carry says what "
                     "carries: by default crash lessons only, not configurations")
    run.add_argument("--carry", type=_parts, default=None, metavar="PARTS",
                     help="what to carry from the studies learnt from, joined by commas: "
                     + "; ".join(f"{name}: {what} ({CARRY_MEASURED[name]})"
                                 for name, what in CARRY_PARTS.items())
                     + f". 'all' carries every part (default: {','.join(p for p in CARRY_PARTS if p in DEFAULT_PARTS)}"
                     "; docs/learning.md says why)")
    change = run.add_mutually_exclusive_group()
    change.add_argument("--continue", dest="on_space_change", action="store_const", const="continue",
                        default="refuse", help="go on with a study whose space file has changed")
    change.add_argument("--fresh", dest="on_space_change", action="store_const", const="fresh",
                        help="delete a study whose space file has changed and start over")

    check = sub.add_parser("check", help="validate a space against the server's --help")
    space_args(check)

    export = sub.add_parser("export", help="write the best configuration as a --config file")
    read_storage_args(export)
    export.add_argument("--out", default=None, help="file to write (default: best.yaml; '-' for stdout)")
    export.add_argument("--format", choices=("yaml", "cmd", "json"), default="yaml",
                        help="yaml: a --config file (and best.sh where the file alone cannot launch it); cmd: the "
                        "whole command line; json: everything recorded about the trial (default: %(default)s)")
    export.add_argument("--trial", type=int, default=None, help="export this trial instead of the best")
    export.add_argument("--force", action="store_true", help="replace an --out file that an export of another "
                        "study wrote (refused without it)")

    confirm = sub.add_parser("confirm", help="re-measure the best trials on fresh servers and rank by the median")
    read_storage_args(confirm)
    confirm.add_argument("--top", type=int, default=3, help="how many of the best distinct configurations to "
                         "re-measure (default: %(default)s)")
    confirm.add_argument("--repeats", type=int, default=3, help="fresh servers per configuration "
                         "(default: %(default)s)")
    confirm.add_argument("--trials", type=_numbers, default=(), metavar="N,M",
                         help="re-measure these trials instead of the top ones, e.g. the winner and the baseline: 6,0")
    confirm.add_argument("--workdir", default="runs", help="where their server logs go (default: %(default)s)")
    server_python_arg(confirm, " (default: the one the study's run used)")

    dashboard = sub.add_parser("dashboard", help="start optuna-dashboard on the storage, with the server logs")
    read_storage_args(dashboard)
    dashboard.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    dashboard.add_argument("--port", type=int, default=8080, help="port to listen on (default: %(default)s)")
    dashboard.add_argument("--workdir", default="runs", help="the run's --workdir, whose artifacts/ holds the "
                           "server logs (default: %(default)s)")

    report = sub.add_parser("report", help="HTML page with charts of the study (needs matplotlib)")
    read_storage_args(report)
    report.add_argument("--out", default="report", help="folder for index.html and its images (default: %(default)s)")

    space = sub.add_parser("space", help="work on a space file (space upgrade: rewrite it for another SGLang version)",
                           formatter_class=argparse.RawDescriptionHelpFormatter, epilog=SPACE_EXAMPLE)
    upgrade = space.add_subparsers(dest="space_command", required=True).add_parser(
        "upgrade", help="rewrite a space in another SGLang version's flags (renamed, deprecated, moved)",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=SPACE_EXAMPLE)
    upgrade.add_argument("file", metavar="SPACE", help="the space file to rewrite")
    upgrade.add_argument("--to", required=True, metavar="VERSION", help="the SGLang version to write it for")
    upgrade.add_argument("--from", dest="source", default=None, metavar="VERSION", help="the version it is written "
                         "for (default: its sglang-version, else the one whose flags take all of it)")
    upgrade.add_argument("--out", default=None, help="file to write (default: stdout)")

    knowledge = sub.add_parser("knowledge", help="what a study's failures showed, for later studies "
                               "(knowledge export: write it as a file that run --learn-from reads)",
                               formatter_class=argparse.RawDescriptionHelpFormatter, epilog=KNOWLEDGE_EXAMPLE)
    knowledge_export = knowledge.add_subparsers(dest="knowledge_command", required=True).add_parser(
        "export", help="write the values a study's failures blame, with their context, as YAML or JSON",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=KNOWLEDGE_EXAMPLE)
    read_storage_args(knowledge_export)
    knowledge_export.add_argument("--out", required=True, help="file to write (.json: JSON, else YAML; '-': stdout)")

    twin = sub.add_parser("twin", help="the simulator's twin of a real study (twin fit: fit a profile to its "
                          "trials and server logs)")
    fit = twin.add_subparsers(dest="twin_command", required=True).add_parser(
        "fit", help="fit a simulator profile's calibrated figures to a study's trials and server logs, write it, "
        "and judge it on held-out trials")
    fit.add_argument("--storage", required=True, help="the real study's Optuna storage URL, e.g. "
                     "sqlite:///docs/gpu-sglang-0517/trials.db (an SQLite file is read from a copy)")
    fit.add_argument("--study", default=None, help="study name (default: the storage's only study)")
    fit.add_argument("--logs", required=True, help="the study's server logs: its runs/ folder or a .tar.gz of it")
    fit.add_argument("--profile", required=True, metavar="BASE", help="the profile to start from (a shipped name "
                     "or a file): every figure the fit cannot make is copied from it")
    fit.add_argument("--out", required=True, metavar="PROFILE", help="the profile file to write")
    fit.add_argument("--trials", default="0-", metavar="RANGE", help="trials to fit on: N-M, N- or N "
                     "(default: all)")
    fit.add_argument("--held-out", default=None, metavar="RANGE", help="trials to judge the fit on (default: "
                     "those after --trials)")
    fit.add_argument("--jit-starts", type=_numbers, default=(), metavar="N,M", help="first starts that compiled "
                     "kernels (JIT): left out of the start-up fits")

    show = sub.add_parser("show", help="table of trials and failure breakdown")
    read_storage_args(show)
    show.add_argument("--sort", default="value", help="value, number, time, or a metric name")
    show.add_argument("--failed", action="store_true", help="only trials that did not qualify")
    show.add_argument("--wide", action="store_true", help="a column for every parameter, instead of the ones "
                      "in which each trial differs from the winner")
    # --help lists the commands as a user meets them, not as they are defined here.
    order = {name: i for i, name in enumerate(COMMAND_ORDER)}
    sub._choices_actions.sort(key=lambda action: order[action.dest])
    sub.metavar = "{" + ",".join(COMMAND_ORDER) + "}"
    _remember_parsers(parser)
    return parser


def _remember_parsers(parser: argparse.ArgumentParser) -> None:
    """Each (sub)command's parser in its namespace (args.parser), so that an error found after parsing is said
    with that command's usage."""
    parser.set_defaults(parser=parser)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _remember_parsers(child)


def _parts(text: str) -> frozenset[str]:
    """--carry's value: parts of a warm start (tuner/search/_warm.py PARTS)."""
    try:
        return parse_parts(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} names no part of a warm start; pass some of "
                                         f"{','.join(CARRY_PARTS)}, or all") from None


def _numbers(text: str) -> tuple[int, ...]:
    """`6,0` -> (6, 0): trial numbers."""
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of trial numbers; pass e.g. 6,0") from None


# A reader that closed the pipe early (`show | head -1`): what a process killed by SIGPIPE reports (128 + 13), as
# git and coreutils do, so that `set -o pipefail` still sees the output was cut; the rest is not said.
BROKEN_PIPE = 141


def main(argv: Sequence[str] | None = None) -> int:
    try:
        status = _main(argv)
        sys.stdout.flush()  # here, not at exit: a closed pipe found at exit prints a traceback no code can catch
        return status
    except BrokenPipeError:
        # Python would flush stdout again at exit and fail the same way: point it at /dev/null first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return BROKEN_PIPE


def _main(argv: Sequence[str] | None) -> int:
    args, extra = _parser().parse_known_args(argv)
    if extra:
        # Said by the (sub)command that was given, with its usage: parse_args had the top-level parser say it.
        args.parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.argv = list(sys.argv[1:] if argv is None else argv)  # as given, for what a command writes of itself
    try:
        return _dispatch(args)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except TunerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:
        # 128 + the signal, as a shell reports it: 130 for Ctrl-C, 143 for SIGTERM (tuner/_errors.py, Stopped).
        return 128 + getattr(exc, "signum", signal.SIGINT)


def _dispatch(args: argparse.Namespace) -> int:
    if getattr(args, "server_python", None) is not None:
        from ._server_python import resolve_python

        resolve_python(args.server_python)  # a wrong path is said alone, before any study is opened or named
    if args.command in READERS:
        target = choose(args.command, args.storage, getattr(args, "study", None), getattr(args, "workdir", "runs"))
        return _read(args, target)
    if args.command == "knowledge":
        from .search import export_knowledge

        target = choose("knowledge export", args.storage, args.study)
        export_knowledge(target.storage, target.study, args.out, target.notes)
        return 0
    if args.command == "run":
        from ._run import RunOptions, run

        run(RunOptions(trials=args.trials, space=args.space, model=args.model, storage=args.storage,
                       study=args.study, simulate=args.simulate, sampler=args.sampler, seed=args.seed,
                       workdir=args.workdir, timeout=args.timeout, on_space_change=args.on_space_change,
                       api_key_env=args.api_key_env, gpus=args.gpus, parallel=args.parallel,
                       learn_from=tuple(args.learn_from) if args.learn_from is not None else None,
                       carry=args.carry, server_python=args.server_python))
        return 0
    if args.command == "check":
        from ._run import check

        return 2 if check(args.space, args.simulate, args.model, server_python=args.server_python).errors else 0
    if args.command == "twin":
        from .twin import FitOptions, fit_command

        return fit_command(FitOptions(args.storage, args.study, args.logs, args.profile, args.out, args.trials,
                                      args.held_out, tuple(args.jit_starts), tuple(args.argv[2:])))
    if args.command == "space":
        from .versions import upgrade_command

        upgrade_command(args.file, args.to, args.source, args.out)
        return 0
    raise UsageError(f"unknown command {args.command}")


def _read(args: argparse.Namespace, target: Target) -> int:
    """A command that reads a study. Export and show name the study and its winner on their first line; the notes
    on how it was chosen follow (on stderr) once the command has done its work, so that a refusal stays one line.
    Confirm and the dashboard, which run for long, say them first."""
    def notes() -> None:
        for note in target.notes:
            print(note, file=sys.stderr, flush=True)

    if args.command == "export":
        from .results import export

        export(target.storage, target.study, args.out, args.format, args.trial, target.notes, args.force)
        return 0
    if args.command == "show":
        from .results import show

        print(show(target.storage, target.study, args.sort, args.failed, args.wide), flush=True)
        notes()
        return 0
    if args.command == "report":
        from .results import report

        path = report(target.storage, target.study, args.out)
        print(f"wrote {path}", file=sys.stderr)
        notes()
        return 0
    notes()
    if args.command == "confirm":
        from .results import confirm

        confirm(target.storage, target.study, args.top, args.repeats, args.workdir, trials=args.trials,
                server_python=args.server_python)
        return 0
    from .results import serve

    serve(target.storage, args.host, args.port, args.workdir, target.study)
    return 0
