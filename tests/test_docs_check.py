"""scripts/docs_check.py: its verdicts on a small doc, and the project's own docs (paths and flags)."""

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CHECK = REPO / "scripts" / "docs_check.py"

TOOL = '''\
import argparse
parser = argparse.ArgumentParser()
parser.add_argument("--rounds", type=int, default=1)
args = parser.parse_args()
print("rounds", args.rounds)
'''

DOC = '''\
# A doc

Run it:

```bash
python scripts/tool.py --rounds 2
python3 -m pip install -e .   # set-up
python -c 'import sys; sys.exit(3)'
```

On a big machine:

```bash long
python scripts/tool.py --rounds 2
python scripts/tool.py --laps 9
bash scripts/gone.sh
```

The tool is `scripts/tool.py`; the old one was `scripts/old_tool.py`. See [the tool](scripts/tool.py).
'''


def _check(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "tool.py").write_text(TOOL)
    (tmp_path / "doc.md").write_text(DOC)
    return subprocess.run([sys.executable, str(CHECK), "--root", str(tmp_path), str(tmp_path / "doc.md"), *extra],
                          capture_output=True, text=True, timeout=300)


def test_the_checker_runs_good_commands_and_names_each_broken_one(tmp_path):
    done = _check(tmp_path)
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    failures = [line for line in out.splitlines() if line.startswith("doc.md:") and
                not any(word in line for word in ("ran in", "skipped"))]  # printed after the progress lines
    assert failures == [
        "doc.md:8: python -c 'import sys; sys.exit(3)': exit 3: no output",
        "doc.md:15: python scripts/tool.py --laps 9: scripts/tool.py has no --laps",
        "doc.md:16: bash scripts/gone.sh: no script scripts/gone.sh",
        "doc.md:19: `scripts/old_tool.py`: no such path in the repository",
    ], out
    assert "doc.md:6: ran in" in out  # the good command, run for real
    assert "doc.md:7: skipped (set-up: CI installs the project itself)" in out
    assert "1 commands run" not in out and "3 commands run, 3 checked without running" in out
    assert "4 failed" in out


def test_no_run_checks_the_flags_of_commands_it_would_run(tmp_path):
    done = _check(tmp_path, "--no-run")
    assert done.returncode == 1
    assert "ran in" not in done.stdout
    assert "0 commands run, 6 checked without running" in done.stdout


def test_the_project_docs_name_existing_paths_programs_and_flags():
    """The quick half of CI's docs check: a moved module or a renamed flag fails here too."""
    done = subprocess.run([sys.executable, str(CHECK), "--no-run", "--quiet"], capture_output=True, text=True,
                          timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
