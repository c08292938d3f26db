"""Smoke test of benchmarks/transfer.py: its quick mode runs, and what it prints adds up (the figures are the
benchmark's to say, not this test's)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "benchmarks" / "transfer.py"
CELL = re.compile(r"(>?\d+(?:\.\d+)?|-) \((\d+)/(\d+)\)")
FAMILY = re.compile(r"^  on no family more than (\d+) restarts above cold \(warm from 1\): "
                    r"worst ([+-][\d.]+) \(fam\d+\) -> (met|MISSED)$", re.M)
TARGET = re.compile(r"<= ([\d.]+|1/3) x cold: ([>\d.]+)%? vs ([>\d.]+)%? = ([\d.]+|inf) -> (met|MISSED)")


def _number(text: str) -> float:
    """A median as printed; ">N" (censored: never reached within N trials) counts as N + 1, as the script does."""
    return float(text[1:]) + 1 if text.startswith(">") else float(text)


def test_quick_mode_prints_consistent_tables_and_verdicts() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick"], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert re.match(r"\d{4}-\d\d-\d\d: python benchmarks/transfer.py --quick\n", out), out[:200]
    trials = int(re.search(r"(\d+) trials", out).group(1))

    family_rows = [line for line in out.splitlines() if re.match(r"(fam\d+|all) ", line)]
    assert [row.split()[0] for row in family_rows] == ["fam0", "all"], out
    for row in family_rows:
        cells = CELL.findall(row)
        assert len(cells) == 3, row  # cold, warm from 1, warm from 3
        for median, reached, runs in cells:
            assert int(reached) <= int(runs) == 1, row  # one target, one seed
            assert median == f">{trials}" if reached == "0" else 1 <= _number(median) <= trials, row
        shares = [int(s) for s in re.findall(r"(\d+)%", row)]
        assert len(shares) == 3 and all(0 <= s <= 100 for s in shares), row
    assert CELL.findall(family_rows[0]) == CELL.findall(family_rows[1])  # one family: "all" is that family

    negative = out.split("negative transfer:")[1].split("targets")[0]
    rows = {name: line for line in negative.splitlines() for name in ("other GPU", "other version")
            if line.startswith(name)}
    assert set(rows) == {"other GPU", "other version"}, negative
    assert rows["other GPU"].split()[2] == "1"  # one warm run from another GPU, judged against its cold run

    targets = TARGET.findall(out)
    family = FAMILY.findall(out)
    judged = len(re.findall(r"^  \S.* -> (?:met|MISSED)$", out, re.M))
    assert len(family) == 1 and len(targets) + 1 == judged >= 4, out  # warm from 1 thrice, then negative transfer
    (slack, gap, verdict), = family
    assert (verdict == "met") == (float(gap) <= int(slack)), family
    for limit, warm, cold, ratio, verdict in targets:
        limit = 1 / 3 if limit == "1/3" else float(limit)
        if _number(cold) > 0:
            assert abs(_number(warm) / _number(cold) - float(ratio)) < 0.01 + 0.01 * float(ratio), (warm, cold, ratio)
        assert (verdict == "met") == (float(ratio) <= limit + 1e-9 or _number(warm) <= limit * _number(cold)), \
            (limit, warm, cold, ratio, verdict)
    met = sum(t[-1] == "met" for t in [*targets, *family])
    assert f"verdict: {met}/{judged} targets met" in out


def test_a_bad_family_range_is_one_line_naming_the_fix() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--families", "9-3"], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2
    assert "--families '9-3'" in done.stderr and "train" in done.stderr and "test" in done.stderr
    assert done.stdout == ""
