#!/usr/bin/env bash
# The tuner as a user installs it, not as the repository runs it: build the wheel, install it with its
# dependencies into a fresh virtual environment, and dry-run from an empty folder (no search_spaces/ there: the
# package must carry its spaces and profiles). CI runs it (.ci/run). Downloads go through pip's cache, so a
# second run is quick.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The tracked files only (a copy): the build writes build/ and *.egg-info where it runs, and the wheel must
# not pick up what happens to lie in the working tree.
mkdir "$work/src"
git -C "$repo" ls-files -z | (cd "$repo" && tar --null -T - -cf -) | tar -xf - -C "$work/src"
python3 -m pip wheel -q --no-deps -w "$work/dist" "$work/src"

python3 -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q "$work"/dist/tuner-*.whl

mkdir "$work/empty"
cd "$work/empty"
"$work/venv/bin/python" -m tuner run --trials 3 --simulate
echo "wheel check: ok ($(basename "$work"/dist/tuner-*.whl) dry-ran 3 trials from an empty folder)"
