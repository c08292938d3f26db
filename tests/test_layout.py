"""The layout: tuner/ in packages by concept, drawn from its imports by scripts/import_graph.py, with no circle
(between packages, nor between the modules of one package), no module reaching into another package's private
modules, and no engine importing the simulator."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import REPO

GRAPH = REPO / "scripts" / "import_graph.py"


def graph(root: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(GRAPH), *([str(root)] if root else [])], capture_output=True,
                          text=True, timeout=60)


def package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "pkg"


def test_tuner_is_packages_by_concept_with_no_circle_and_no_private_reach():
    result = graph()
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    for name in ("spec", "versions", "trial", "search", "results", "engines", "sim"):
        assert any(line.startswith(f"tuner/{name}/ ") for line in lines), result.stdout
    trial = next(line for line in lines if line.startswith("tuner/trial/ "))
    assert "imports _errors, _failures, _redact, engines, spec" in trial  # below the search and the results
    # The engines and the simulator both read SGLang's flag tables (tuner/flags/); neither engine needs the other.
    engines = next(line for line in lines if line.startswith("tuner/engines/ "))
    assert "flags" in engines.rpartition("; imports ")[2].split(", ")
    assert "sim" not in engines.rpartition("; imports ")[2].split(", ")
    sim = next(line for line in lines if line.startswith("tuner/sim/ "))
    assert "flags" in sim.rpartition("; imports ")[2].split(", ")


def test_a_circle_between_packages_fails(tmp_path):
    root = package(tmp_path, {
        "__init__.py": "", "a/__init__.py": "from ._x import f\n", "a/_x.py": "from ..b import g\ndef f(): pass\n",
        # A lazy import counts: it ties the packages together all the same.
        "b/__init__.py": "from ._y import g\n", "b/_y.py": "def g():\n    from ..a import f\n",
    })
    result = graph(root)
    assert result.returncode == 1
    assert "import circle: pkg.a -> pkg.b -> pkg.a" in result.stderr


def test_a_reach_into_another_packages_private_module_fails_but_the_top_is_shared(tmp_path):
    root = package(tmp_path, {
        "__init__.py": "", "_errors.py": "", "a/__init__.py": "", "a/_x.py": "from .._errors import E\n",
        "b/__init__.py": "", "b/_y.py": "from ..a._x import f\nfrom ..a import _x\n",
    })
    result = graph(root)
    assert result.returncode == 1
    problems = result.stderr.splitlines()
    assert problems == [f"pkg/b/_y.py:{n}: imports pkg.a._x, a private module of another package; import it from "
                        "pkg.a's __init__" for n in (1, 2)]


def test_a_circle_between_the_modules_of_one_package_fails(tmp_path):
    root = package(tmp_path, {
        "__init__.py": "", "a/__init__.py": "from ._x import f\n",
        "a/_x.py": "from ._y import g\ndef f(): pass\n",
        # Lazy, inside a function, as a circle is usually hidden: it counts all the same.
        "a/_y.py": "def g():\n    from ._x import f\n",
        "a/_z.py": "from ._x import f\nfrom ._y import g\n",  # importing both is no circle
    })
    result = graph(root)
    assert result.returncode == 1
    assert result.stderr.splitlines() == ["import circle: pkg.a._x -> pkg.a._y -> pkg.a._x"]


def test_a_package_whose_modules_import_in_a_line_passes(tmp_path):
    root = package(tmp_path, {
        "__init__.py": "", "a/__init__.py": "from ._x import f\nfrom ._y import g\n",
        "a/_x.py": "from ._y import g\ndef f(): pass\n", "a/_y.py": "def g(): pass\n",
    })
    result = graph(root)
    assert result.returncode == 0, result.stderr


def test_an_engine_that_imports_the_simulator_fails_but_both_may_share_a_package(tmp_path):
    root = package(tmp_path, {
        "__init__.py": "", "flags/__init__.py": "def table(): pass\n",
        "sim/__init__.py": "from ._args import parse\n", "sim/_args.py": "from ..flags import table\ndef parse(): pass\n",
        "engines/__init__.py": "from ._sglang import S\n",
        "engines/_sglang.py": "from ..flags import table\nclass S:\n    def f(self):\n        from ..sim import parse\n",
    })
    result = graph(root)
    assert result.returncode == 1
    assert result.stderr.splitlines() == ["pkg/engines/_sglang.py:4: imports pkg.sim; no engine imports the simulator"]
