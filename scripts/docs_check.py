"""Check every command and path the README and docs/ name, so that a renamed flag or a moved file fails CI.

    python scripts/docs_check.py            # README.md and docs/**/*.md of this repository
    python scripts/docs_check.py --no-run   # paths and flags only (seconds): what tests/test_docs_check.py runs

What it checks, per fenced block:
- ```bash: every command is run for real (`bash -euo pipefail -c`), in order, in one temporary copy of the
  repository's files per document, with this Python first on PATH; each must exit 0 within --timeout.
  Set-up and test lines (`python3 -m venv`, `pip install`, `python -m pytest`) are skipped: CI runs them itself.
  `python -m tuner run --trials N` runs with at most --max-trials trials: the check proves the command, not
  the study.
- ```bash gpu, ```bash long (GPU hosts, long benchmarks) and ```bash device (calls of the device machine,
  `run(command="...")`): nothing is run but each command's program is checked: a `python -m MOD` must be
  importable or a known GPU-only module, a script must exist, and every `--option` it passes must appear in
  the program's `--help` (a shell script's own text).
- Every repository path in backticks (`tuner/...`, `benchmarks/...`, `scripts/...`, `search_spaces/...`,
  `docs/...`, `tests/...`) and every relative Markdown link must exist.

One line per failure, `file:line: command: why`; exit 1 when any fails.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUN, STATIC = "run", "static"
STATIC_TAGS = {"gpu", "long", "device"}
# Modules that only a GPU host (or an engine's own environment) has: their existence cannot be checked here.
GPU_ONLY_MODULES = ("sglang", "vllm", "sgl_jax")
PATH_ROOTS = ("tuner", "benchmarks", "scripts", "search_spaces", "docs", "tests")
SKIPPED = (  # (pattern, why), matched at the start of a command
    (re.compile(r"python3? -m venv\b"), "set-up: CI creates its own environment"),
    (re.compile(r"(python3? -m )?pip install\b"), "set-up: CI installs the project itself"),
    (re.compile(r"python3? -m pytest\b"), "the tests: CI runs them itself"),
)
SHELL_WORDS = {"cd", ".", "source", "export", "echo", "ls", "cat", "sh", "true"}


@dataclasses.dataclass(frozen=True)
class Command:
    """One command of a fenced block, with where it stands."""

    doc: Path
    line: int
    text: str
    mode: str  # RUN or STATIC


@dataclasses.dataclass(frozen=True)
class Failure:
    doc: str
    line: int
    what: str
    why: str

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}: {self.what}: {self.why}"


def blocks(doc: Path) -> list[Command]:
    """The commands of a document's ```bash blocks, continuation lines joined, comments dropped."""
    commands: list[Command] = []
    mode: str | None = None
    pending, start = "", 0
    in_fence = False
    for number, raw in enumerate(doc.read_text().splitlines(), 1):
        stripped = raw.strip()
        if stripped.startswith("```"):
            if in_fence:
                in_fence, mode = False, None
                continue
            in_fence = True
            words = stripped[3:].split()
            if words and words[0] == "bash":
                tags = set(words[1:])
                unknown = tags - STATIC_TAGS
                if unknown:
                    raise SystemExit(f"{doc}:{number}: unknown info string {' '.join(words)!r}: "
                                     f"use ```bash or ```bash {'|'.join(sorted(STATIC_TAGS))}")
                mode = STATIC if tags else RUN
            continue
        if mode is None:
            continue
        if not pending:
            start = number
        line = raw.strip() if pending else raw
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1].rstrip() + " "
            continue
        text = _without_comment(pending + line).strip()
        pending = ""
        if text:
            commands.append(Command(doc, start, text, mode))
    return commands


def _without_comment(line: str) -> str:
    """The line up to a `#` that starts a shell comment (not one inside a word or quotes, as in `db#study`)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def _device_command(text: str) -> str | None:
    """The command of a device-machine call written as `run(command="...", ...)`."""
    match = re.match(r'run\(command="((?:[^"\\]|\\.)*)"', text)
    return match.group(1) if match else None


# --- running ---------------------------------------------------------------------------------------------

def copy_repo(root: Path, dest: Path) -> None:
    """The repository's tracked and not-ignored files (all files where root is no git work tree)."""
    listed = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], capture_output=True)
    if listed.returncode == 0:
        names = [n for n in listed.stdout.decode().split("\0") if n]
    else:
        names = [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()]
    for name in names:
        source = root / name
        if not source.is_file():
            continue  # deleted in the work tree, or a submodule
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)


def _capped(text: str, max_trials: int) -> tuple[str, str | None]:
    match = re.search(r"python3? -m tuner run\b.*?--trials[ =](\d+)", text)
    if not match or int(match.group(1)) <= max_trials:
        return text, None
    start, end = match.span(1)
    return text[:start] + str(max_trials) + text[end:], f"--trials {max_trials} (the doc says {match.group(1)})"


def run_commands(root: Path, doc: Path, commands: list[Command], args: argparse.Namespace,
                 say) -> list[Failure]:
    failures: list[Failure] = []
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("VIRTUAL_ENV", None)
    rel = _rel(root, doc)
    with tempfile.TemporaryDirectory(prefix="docs-check-") as tmp:
        copy_repo(root, Path(tmp))
        for command in commands:
            skip = next((why for pattern, why in SKIPPED if pattern.match(command.text)), None)
            if skip:
                say(f"{rel}:{command.line}: skipped ({skip}): {command.text}")
                continue
            text, note = _capped(command.text, args.max_trials)
            started = time.monotonic()
            try:
                done = subprocess.run(["bash", "-euo", "pipefail", "-c", text], cwd=tmp, env=env,
                                      stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                      timeout=args.timeout)
            except subprocess.TimeoutExpired:
                failures.append(Failure(rel, command.line, command.text, f"ran past {args.timeout} s"))
                continue
            seconds = time.monotonic() - started
            if done.returncode != 0:
                tail = (done.stderr.strip() or done.stdout.strip()).splitlines()[-1:] or ["no output"]
                failures.append(Failure(rel, command.line, command.text,
                                        f"exit {done.returncode}: {tail[0][:200]}"))
            else:
                say(f"{rel}:{command.line}: ran in {seconds:.1f} s"
                    + (f" with {note}" if note else "") + f": {command.text}")
    return failures


# --- static checks ---------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Program:
    """What a command runs: how to ask it for --help (None: read the file's text), and a label."""

    label: str
    help_argv: list[str] | None
    text_file: Path | None = None
    known_help: str | None = None  # its options, where known without running it
    unchecked: str | None = None  # why its flags cannot be checked here


def _sglang_options(root: Path) -> str | None:
    """SGLang's launch_server options, from the parser tables the tuner ships (every version's)."""
    tables = sorted((root / "tuner" / "flags").glob("sglang-*.json"))
    if not tables:
        return None
    return "\n".join(option for table in tables for action in json.loads(table.read_text())["actions"]
                     for option in action["option_strings"])


def _simple_commands(text: str) -> list[list[str]]:
    """The simple commands of a line (split at &&, ||, ;, |), redirections and env assignments dropped."""
    try:
        lexer = shlex.shlex(text, posix=True, punctuation_chars="&|;<>")
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:
        return [text.split()]
    commands, current, skip_next = [], [], False
    for token in tokens:
        if skip_next:
            skip_next = False
            continue
        if token in {"&&", "||", ";", "|", "&"}:
            commands.append(current)
            current = []
        elif token in {">", ">>", "<", "2>", "&>"} or set(token) <= set("<>&"):
            skip_next = True
        elif not current and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", token):
            continue
        else:
            current.append(token)
    commands.append(current)
    return [c for c in commands if c]


def _program(root: Path, argv: list[str]) -> tuple[Program | None, list[str], str | None]:
    """(program, its arguments after the program, why it does not exist)."""
    head = argv[0]
    if head in SHELL_WORDS:
        return None, [], None
    if re.search(r"(^|/)python[0-9.]*$", head):
        if len(argv) > 2 and argv[1] == "-m":
            module = argv[2]
            if module == "sglang.launch_server" and (options := _sglang_options(root)):
                return Program(f"python -m {module} (SGLang's parser tables)", None, known_help=options), argv[3:], None
            if module.split(".")[0] in GPU_ONLY_MODULES:
                return Program(module, None, unchecked="a GPU-only module"), argv[3:], None
            sys.path.insert(0, str(root))  # as `python -m` in the root would see it
            try:
                found = importlib.util.find_spec(module) is not None
            except (ImportError, ValueError):
                found = False
            finally:
                sys.path.remove(str(root))
            if not found:
                return None, [], f"no module {module!r}"
            return Program(f"python -m {module}", [sys.executable, "-m", module]), argv[3:], None
        if len(argv) > 1 and argv[1].endswith(".py"):
            script = root / argv[1]
            if not script.is_file():
                return None, [], f"no script {argv[1]}"
            return Program(argv[1], [sys.executable, str(script)]), argv[2:], None
        return None, [], None
    if head in {"bash", "sh"} and len(argv) > 1:
        script = root / argv[1]
        if not script.is_file():
            return None, [], f"no script {argv[1]}"
        return Program(argv[1], None, text_file=script), argv[2:], None
    if head in {"pip", "pip3"}:
        return None, [], None
    if shutil.which(head, path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"):
        return Program(head, [shutil.which(head, path=f"{Path(sys.executable).parent}{os.pathsep}"
                                                  f"{os.environ.get('PATH', '')}")]), argv[1:], None
    return None, [], f"no program {head!r} on PATH"


def _help_text(root: Path, program: Program, words: list[str], cache: dict) -> tuple[str | None, str]:
    """The program's --help, of its subcommand where the leading words name one (`tuner knowledge export`)."""
    if program.known_help is not None:
        return program.known_help, program.label
    if program.text_file is not None:
        return program.text_file.read_text(errors="replace"), program.label
    for n in range(len(words), -1, -1):
        argv = program.help_argv + words[:n] + ["--help"]
        key = tuple(argv)
        if key not in cache:
            try:
                done = subprocess.run(argv, cwd=root, capture_output=True, text=True, timeout=120,
                                      stdin=subprocess.DEVNULL)
                cache[key] = done.stdout if done.returncode == 0 else None
            except subprocess.TimeoutExpired:
                cache[key] = None
        if cache[key] is not None:
            return cache[key], " ".join([program.label, *words[:n]])
    return None, program.label


def check_static(root: Path, doc: Path, commands: list[Command], cache: dict, say) -> list[Failure]:
    failures: list[Failure] = []
    rel = _rel(root, doc)
    for command in commands:
        text = command.text
        if text.startswith("run("):
            inner = _device_command(text)
            if inner is None:
                failures.append(Failure(rel, command.line, text, "a device call not written as run(command=\"...\")"))
                continue
            text = inner
        for argv in _simple_commands(text):
            program, rest, missing = _program(root, argv)
            if missing:
                failures.append(Failure(rel, command.line, text, missing))
                continue
            if program is None:
                continue
            options = [a.split("=")[0] for a in rest if re.match(r"^--[A-Za-z]", a)]
            if not options:
                continue
            if program.unchecked:
                say(f"{rel}:{command.line}: flags not checked ({program.label} is {program.unchecked}): {text}")
                continue
            words = []
            for a in rest:
                if a.startswith("-") or "/" in a or "." in a:
                    break
                words.append(a)
            help_text, asked = _help_text(root, program, words, cache)
            if help_text is None:
                failures.append(Failure(rel, command.line, text, f"{program.label} --help failed"))
                continue
            for option in options:
                if not re.search(re.escape(option) + r"(?![A-Za-z0-9-])", help_text):
                    failures.append(Failure(rel, command.line, text, f"{asked} has no {option}"))
    return failures


_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_REPO_PATH = re.compile(r"(?<![\w./-])((?:%s)/[\w.*<>/-]*[\w*>])" % "|".join(PATH_ROOTS))
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def check_paths(root: Path, doc: Path) -> tuple[list[Failure], int]:
    """Backticked repository paths (relative to the root) and relative links (relative to the document)."""
    failures, count = [], 0
    rel = _rel(root, doc)
    in_fence = False
    for number, line in enumerate(doc.read_text().splitlines(), 1):
        if line.strip().startswith("```"):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        for span in _CODE_SPAN.finditer(line):
            for match in _REPO_PATH.finditer(span.group(2)):
                path = match.group(1).split("::")[0]
                count += 1
                pattern = re.sub(r"<[^>]*>", "*", path)
                if not glob.glob(str(root / pattern)):
                    failures.append(Failure(rel, number, f"`{path}`", "no such path in the repository"))
        for match in _LINK.finditer(line):
            target = match.group(1).split("#")[0]
            if not target or re.match(r"^[a-z]+:", target):
                continue
            count += 1
            if not (doc.parent / target).exists():
                failures.append(Failure(rel, number, f"link {target}", f"no such file beside {rel}"))
    return failures, count


def _rel(root: Path, doc: Path) -> str:
    try:
        return str(doc.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(doc)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("docs", nargs="*", type=Path, help="documents (default: README.md and docs/**/*.md)")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent,
                        help="the repository the commands and paths belong to")
    parser.add_argument("--no-run", action="store_true", help="check paths and flags only; run nothing")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per run command (default 300)")
    parser.add_argument("--max-trials", type=int, default=4,
                        help="trials of a `python -m tuner run` that is run (default 4)")
    parser.add_argument("--quiet", action="store_true", help="print only failures and the summary")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    docs = args.docs or [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    say = (lambda line: None) if args.quiet else (lambda line: print(line, flush=True))
    started = time.monotonic()
    failures: list[Failure] = []
    counts = {RUN: 0, STATIC: 0, "paths": 0}
    cache: dict = {}
    for doc in docs:
        commands = blocks(doc)
        found, paths = check_paths(root, doc)
        failures += found
        counts["paths"] += paths
        static = [c for c in commands if c.mode == STATIC]
        to_run = [c for c in commands if c.mode == RUN]
        if args.no_run:
            static, to_run = commands, []  # a command that would run still has its program and flags checked
        failures += check_static(root, doc, static, cache, say)
        counts[STATIC] += len(static)
        if to_run:
            failures += run_commands(root, doc, to_run, args, say)
            counts[RUN] += len(to_run)
    for failure in sorted(failures, key=lambda f: (f.doc, f.line)):
        print(failure, flush=True)
    print(f"docs check: {len(docs)} documents, {counts[RUN]} commands run, {counts[STATIC]} checked without "
          f"running, {counts['paths']} paths and links; {len(failures)} failed; "
          f"{time.monotonic() - started:.0f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
