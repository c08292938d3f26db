"""The tuner's package-level import graph, drawn from the source; exits 1 on a circle (between packages, or
between the modules of one package), on a reach into another package's private module, or on an import a
stated rule forbids (RULES: no engine imports the simulator).

    python scripts/import_graph.py [PACKAGE_DIR]    # default: the repository's tuner/

A node is a subpackage (tuner/trial/ and all it holds) or a module at the top (tuner/_cli.py). Every import
counts, those inside functions and under TYPE_CHECKING too: a lazy import still ties two packages together.
Inside each package its modules are drawn alike (a subpackage of it is one node), and may not import in a
circle either: a lazy import that hides one still makes the two modules one piece.
A module may import the private modules (`_name`) of its own package and of the packages above it (tuner/_errors.py
is everyone's); any other package it reaches through that package's `__init__`.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

DEFAULT_ROOT = Path(__file__).resolve().parent.parent / "tuner"

# (importing package, imported package, the rule), as names below the root. The engines say what differs between
# the servers the tuner launches; the simulator is one more such server, built on the same facts (tuner/flags/).
RULES = [("engines", "sim", "no engine imports the simulator")]


@dataclass(frozen=True)
class Module:
    name: str  # dotted: tuner.trial._gate
    path: Path
    is_package: bool  # an __init__.py


@dataclass(frozen=True)
class Import:
    importer: str
    target: str  # the module imported: tuner.sim._profile for `from ..sim._profile import load_profile`
    line: int


def modules(root: Path) -> dict[str, Module]:
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        out[".".join(parts)] = Module(".".join(parts), path, is_package)
    return out


def imports(module: Module, known: dict[str, Module]) -> list[Import]:
    top = module.name.split(".")[0]
    package = module.name if module.is_package else module.name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(module.path.read_text(), str(module.path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            # `from . import _x` imports the module _x; `from .x import name` imports from the module x.
            targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in known else source for a in node.names]
        else:
            continue
        found += [Import(module.name, t, node.lineno) for t in dict.fromkeys(targets)
                  if t == top or t.startswith(top + ".")]
    return found


def node_of(name: str, package: str | None = None) -> str:
    """The node that holds `name` in the graph of `package` (default: the root's):
    tuner.trial._gate -> tuner.trial; tuner._cli -> tuner._cli; tuner -> tuner; in tuner.trial's, tuner.trial._gate."""
    depth = package.count(".") + 2 if package else 2
    return ".".join(name.split(".")[:depth])


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def private_reach(imp: Import, known: dict[str, Module]) -> bool:
    """True where the target is a private module of a package other than the importer's own or one above it."""
    if imp.target not in known:
        return False
    owner, _, last = imp.target.rpartition(".")
    if not last.startswith("_") or last.startswith("__"):
        return False
    importer = known[imp.importer]
    home = imp.importer if importer.is_package else imp.importer.rpartition(".")[0]
    return not (home == owner or home.startswith(owner + "."))


def find_circle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (circle := visit(nxt)):
                return circle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (circle := visit(node)):
            return circle
    return None


def summary(module: Module) -> str:
    """The docstring's first clause: up to its first colon or full stop."""
    doc = (ast.get_docstring(ast.parse(module.path.read_text())) or "").replace("\n", " ")
    return re.split(r"[:.](?:\s|$)", doc, maxsplit=1)[0]


def short(name: str) -> str:
    """tuner.trial._gate -> gate; tuner.sim.__main__ -> __main__."""
    last = name.rpartition(".")[2]
    return last if last.startswith("__") else last.removeprefix("_")


def graph_of(package: str, known: dict[str, Module], found: list[Import]) -> dict[str, set[str]]:
    """The nodes of `package` (its modules, each subpackage as one) and who imports whom among them."""
    edges: dict[str, set[str]] = {node_of(name, package): set() for name in known if within(name, package)}
    for imp in found:
        if within(imp.importer, package) and within(imp.target, package):
            importer, target = node_of(imp.importer, package), node_of(imp.target, package)
            if importer != target:
                edges[importer].add(target)
    return edges


def broken_rules(found: list[Import], known: dict[str, Module], root: Path) -> list[str]:
    return [f"{known[i.importer].path.relative_to(root.parent)}:{i.line}: imports {i.target}; {rule}"
            for importer, target, rule in RULES for i in found
            if within(i.importer, f"{root.name}.{importer}") and within(i.target, f"{root.name}.{target}")]


def main(argv: list[str]) -> int:
    root = Path(argv[0]).resolve() if argv else DEFAULT_ROOT
    known = modules(root)
    found = [imp for m in known.values() for imp in imports(m, known)]
    edges = graph_of(root.name, known, found)

    # Packages first, then the modules at the top; one line each: what it is, what it holds, what it imports.
    for node in sorted(edges, key=lambda n: (not known[n].is_package, n)):
        mod = known[node]
        label = (mod.path.parent.relative_to(root.parent).as_posix() + "/" if mod.is_package
                 else mod.path.relative_to(root.parent).as_posix())
        held = " ".join(sorted(short(m) for m in known if node_of(m) == node and m != node))
        uses = ", ".join(sorted(n.removeprefix(root.name + ".") for n in edges[node])) or "nothing"
        print(f"{label:18} {summary(mod)}" + (f"; holds {held}" if held else "") + f"; imports {uses}")

    problems = [f"{known[i.importer].path.relative_to(root.parent)}:{i.line}: imports {i.target}, a private module "
                f"of another package; import it from {i.target.rpartition('.')[0]}'s __init__"
                for i in found if private_reach(i, known)]
    problems += broken_rules(found, known, root)
    # The root's graph (its packages and top modules) first, then each package's own, outermost first.
    for package in sorted((m.name for m in known.values() if m.is_package), key=lambda n: (n.count("."), n)):
        if circle := find_circle(edges if package == root.name else graph_of(package, known, found)):
            problems.append("import circle: " + " -> ".join(circle))
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
