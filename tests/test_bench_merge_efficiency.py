"""benchmarks/merge_efficiency.py: one set's figures from search_efficiency.py outputs run in parts."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "merge_efficiency.py"
PARTS = sorted((REPO / "benchmarks" / "results" / "search_efficiency_test_7000-7029_anchors_2026-12-06").glob("se_*.txt"))


def _merge(*paths: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, paths)], capture_output=True, text=True, timeout=60)


def _table(text: str, head: str) -> dict[str, list[str]]:
    """Strategy label -> the figures of its row, from the lines after `head`."""
    lines = text.split(head, 1)[1].splitlines()[1:]
    rows = {}
    for line in lines:
        match = re.match(r"^\s+(\S.*?\S)\s{2,}(\S.*)$", line)
        if not match or line.startswith("(") or not line.startswith("   "):
            break
        rows[match.group(1)] = match.group(2).replace(" / ", "/").split()
    return rows


@pytest.mark.parametrize("part", PARTS, ids=lambda p: p.name)
def test_one_part_merged_gives_the_figures_the_benchmark_printed_for_it(part: Path) -> None:
    done = _merge(part)
    assert done.returncode == 0, done.stderr
    printed = _table(part.read_text(), "test: per strategy")
    merged = _table(done.stdout, "merged: per strategy")
    assert len(printed) == 6 and merged == printed  # tpe and the five anchors, figure for figure


def test_parts_merge_into_the_whole_set() -> None:
    done = _merge(*PARTS)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("30 landscapes (gen-7000 ... gen-7029)")


def test_a_missing_file_is_named() -> None:
    done = _merge(REPO / "no-such-output.txt")
    assert done.returncode == 2 and "no such file" in done.stderr and "no-such-output.txt" in done.stderr
