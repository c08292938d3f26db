"""Run by the reference environment's python (scripts/setup_sglang_ref.sh), never by the tuner's own.

Reads a JSON request on stdin and prints, as JSON, what SGLang's own code does with it:
  table       scripts/gen_sim_flags.py's dump of the parser `python -m sglang.launch_server` builds
  help        that parser's --help text (choices given as a set are sorted first, as the data file has them)
  argv        for each argv: exit status, the `error:` line, the parsed namespace
  configs     for each argv with --config: the argv SGLang's prepare_server_args merges, then as `argv`
"""

import argparse
import contextlib
import io
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import gen_sim_flags as gen  # noqa: E402


def parse(parser, argv):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns = argparse.ArgumentParser.parse_args(parser, argv)
    except SystemExit as e:
        lines = [l for l in err.getvalue().splitlines() if ": error: " in l]
        return {"status": e.code, "error": lines[0] if lines else err.getvalue().strip().splitlines()[:1]}
    return {"status": 0, "namespace": {k: gen.encode(v) for k, v in sorted(vars(ns).items())}}


def merged_argv(argv):
    """The argv prepare_server_args hands to parse_args after its own --config merge (or its error)."""
    from sglang.srt.server_args import prepare_server_args
    seen = []
    original = argparse.ArgumentParser.parse_args

    def intercept(self, args=None, namespace=None):
        seen.append(list(args))
        raise gen._Captured

    argparse.ArgumentParser.parse_args = intercept
    try:
        prepare_server_args(list(argv))
    except gen._Captured:
        return {"argv": seen[-1]}
    except ValueError as e:
        return {"error": str(e)}
    finally:
        argparse.ArgumentParser.parse_args = original
    return {"error": "parse_args was never called"}


def main():
    request = json.load(sys.stdin)
    parser = gen.launch_server_parser()
    data = gen.dump_parser(parser)
    out = {"table": data, "fresh": gen.generate()[1]}
    for action in parser._actions:
        if isinstance(action.choices, (set, frozenset)):
            action.choices = sorted(action.choices)
    out["help"] = parser.format_help()
    out["argv"] = [parse(parser, argv) for argv in request.get("argv", [])]
    configs = []
    for argv in request.get("configs", []):
        merged = merged_argv(argv)
        if "argv" in merged:
            merged["parsed"] = parse(parser, merged["argv"])
        configs.append(merged)
    out["configs"] = configs
    json.dump(out, sys.stdout, sort_keys=True)


if __name__ == "__main__":
    main()
