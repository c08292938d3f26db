#!/usr/bin/env bash
# sglang-jax on the lent H200, in one prepared command: a 5-trial tuner study of SGLang's JAX port serving a
# tiny random-weight Qwen3 on the GPU, through the machine image's own JAX 0.11.2 (CUDA) and flax 0.12.10.
#
#   bash scripts/h200_sglang_jax.sh prepare     # here: the wheel set into .whl/sglang-jax-h200 (~32 MB)
#   then the device tool's run, exactly:
#       run(command="bash scripts/h200_sglang_jax.sh run", carry=[".whl/sglang-jax-h200"], timeout_s=600)
#   (kind nvidia-h200; what comes back under $OUT: h200_sglang_jax.log, show.txt, handoff.txt, nvml.tsv,
#   trials.db, runs.tar.gz)
#
# prepare (here, with network): `pip download` of cp312 manylinux wheels, as the device README's Notes say:
#   sglang-jax 0.0.1.post1 --no-deps, and what it needs that the image lacks or has in another version
#   (fastapi, starlette, pydantic(-core), annotated-types, typing-inspection, uvicorn, pyzmq, orjson,
#   setproctitle, pybase64, python-multipart, transformers 4.55.4, tokenizers 0.21.4, huggingface-hub 0.34.4),
#   NOT flax or jax (the image's are used; flax 0.10.7 fails on jax 0.11); the tuner's own dependencies
#   (optuna, optuna-dashboard, bottle, alembic, Mako, colorlog, SQLAlchemy, tenacity, httpx, httpcore, h11);
#   and the tuner itself as a wheel built from the committed HEAD (not the working tree, which may hold
#   others' unfinished edits; its commit is written to TUNER_COMMIT). It also writes the tiny model into
#   .whl/sglang-jax-h200/tiny-qwen3 (~4 MB), used there only if scripts/make_tiny_qwen3.py fails there.
#   It checks that both patches apply to the pristine wheel (patch --dry-run), that the folder stays under
#   the 64 MiB a call may carry, and that .whl is git-ignored.
#
# run (there): installs the wheels into /tmp/site (`pip install --no-index --no-deps --target`), applies
#   scripts/patches/sglang-jax-0.0.1.post1-cpu.patch and -gpu.patch to it, makes the model in
#   /tmp/tiny-qwen3, then from /tmp/h200-study (outside the checkout, so that the tuner wheel is the one
#   imported): `python3 -m tuner check`, `python3 -m tuner run --trials 5 --gpus 0` with
#   search_spaces/sglang-jax-h200-tiny.yaml, `python3 -m tuner show`, while a sampler records NVML's used
#   memory every 0.1 s. At the end it prints, per trial, NVML's used memory at teardown start, at the slot's
#   release and at the next trial's slot acquisition (handoff.txt): the GPU slot must be handed on only
#   after JAX's ~108 GB preallocation is released. Everything stays inside H200_BUDGET_S (default 575 s) of
#   the call's 600: no trial starts in its last ~180 s (a trial took 60-100 s there) and the tuner is
#   interrupted (it tears the server down) if it is still running 80 s before the end.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
wheels_rel=".whl/sglang-jax-h200"
wheels="$repo/$wheels_rel"
space="$repo/search_spaces/sglang-jax-h200-tiny.yaml"
patches=("$repo/scripts/patches/sglang-jax-0.0.1.post1-cpu.patch" "$repo/scripts/patches/sglang-jax-0.0.1.post1-gpu.patch")
SGLJAX_VERSION="0.0.1.post1"

# name==version, one version of each (two stop the install there).
SGLANG_JAX_NEEDS=(
    fastapi==0.116.2 starlette==0.48.0 pydantic==2.11.10 pydantic-core==2.33.2 annotated-types==0.7.0
    typing-inspection==0.4.2 uvicorn==0.35.0 pyzmq==27.0.2 orjson==3.11.9 setproctitle==1.3.8 pybase64==1.5.1
    python-multipart==0.0.34 transformers==4.55.4 tokenizers==0.21.4 huggingface-hub==0.34.4
)
TUNER_NEEDS=(
    optuna==5.0.0 optuna-dashboard==0.21.0 bottle==0.13.4 alembic==1.20.1 mako==1.4.3 colorlog==6.12.0
    sqlalchemy==2.1.9 tenacity==9.2.1 httpx==0.28.1 httpcore==1.0.9 h11==0.16.0
)

die() { echo "h200_sglang_jax: error: $*" >&2; exit 1; }
say() { echo "h200_sglang_jax: $*" >&2; }

# Applies a unified diff with `patch` where it exists, else with a small exact-context applier (the image
# may have no `patch`; H200_PY_PATCH=1 forces it): every hunk must match its context exactly (no fuzz), at
# its line or nearby.
apply_patch() {  # apply_patch DIR PATCHFILE [--dry-run]
    local dir="$1" file="$2" dry="${3:-}"
    if command -v patch >/dev/null 2>&1 && [ -z "${H200_PY_PATCH:-}" ]; then
        patch -p1 --fuzz=0 -N -s -f --no-backup-if-mismatch ${dry:+--dry-run} -d "$dir" <"$file"
        return
    fi
    python3 - "$dir" "$file" "$dry" <<'PY'
import re, sys
from pathlib import Path
root, patch_file, dry = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3] == "--dry-run"
lines = patch_file.read_text().splitlines(keepends=True)
files, i = [], 0
while i < len(lines):
    if lines[i].startswith("--- a/") and i + 1 < len(lines) and lines[i + 1].startswith("+++ b/"):
        path, hunks, i = lines[i + 1][6:].rstrip("\n").split("\t")[0], [], i + 2
        while i < len(lines) and lines[i].startswith("@@"):
            m = re.match(r"@@ -(\d+)(?:,(\d+))? \+\d+(?:,(\d+))? @@", lines[i])
            start, n_old, n_new = int(m.group(1)), int(m.group(2) or 1), int(m.group(3) or 1)
            old, new, i = [], [], i + 1
            while len(old) < n_old or len(new) < n_new:  # the header's counts: blank context may lose its space
                tag, text = lines[i][:1], lines[i][1:]
                if tag == "\n":
                    tag, text = " ", "\n"
                if tag in (" ", "-"):
                    old.append(text)
                if tag in (" ", "+"):
                    new.append(text)
                i += 1
            hunks.append((start, old, new))
        files.append((path, hunks))
    else:
        i += 1
for path, hunks in files:
    target = root / path
    text = target.read_text().splitlines(keepends=True)
    shift = 0
    for start, old, new in hunks:
        want = start - 1 + shift
        found = next((p for d in range(0, 200) for p in (want - d, want + d)
                      if 0 <= p <= len(text) - len(old) and text[p:p + len(old)] == old), None)
        if found is None:
            sys.exit(f"apply_patch: a hunk at line {start} of {path} does not match")
        text[found:found + len(old)] = new
        shift += len(new) - len(old) + (found - want)
    if not dry:
        target.write_text("".join(text))
print(f"apply_patch: {patch_file.name}: {sum(len(h) for _, h in files)} hunks in {len(files)} files"
      + (" (dry run)" if dry else ""))
PY
}

prepare() {
    cd "$repo"
    git check-ignore -q "$wheels_rel" || die "$wheels_rel is not git-ignored (.gitignore should hold /.whl/)"
    local pip=(python3 -m pip)
    [ -x "$repo/.venv/bin/python" ] && pip=("$repo/.venv/bin/python" -m pip)
    rm -rf "$wheels" && mkdir -p "$wheels"
    local plat=(--only-binary=:all: --python-version 3.12 --implementation cp
                --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
                --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_5_x86_64)
    say "downloading the wheel set into $wheels_rel"
    "${pip[@]}" download -q --disable-pip-version-check --no-deps "${plat[@]}" -d "$wheels" \
        "sglang-jax==$SGLJAX_VERSION" "${SGLANG_JAX_NEEDS[@]}" "${TUNER_NEEDS[@]}" \
        || die "pip download failed"

    # The tuner, as committed.
    local tmp
    tmp="$(mktemp -d)"
    git -C "$repo" archive --format=tar HEAD | tar -x -C "$tmp"
    "${pip[@]}" wheel -q --disable-pip-version-check --no-deps -w "$wheels" "$tmp" || die "could not build the tuner wheel"
    git -C "$repo" rev-parse HEAD >"$wheels/TUNER_COMMIT"
    [ -z "$(git -C "$repo" status --porcelain -- tuner pyproject.toml)" ] \
        || say "note: tuner/ has uncommitted changes here; the wheel holds HEAD $(cut -c1-12 "$wheels/TUNER_COMMIT") without them"

    # Both patches against the pristine wheel, in order, before any device time is spent.
    local unpacked="$tmp/pristine"
    mkdir -p "$unpacked"
    python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
        "$(ls "$wheels"/sglang_jax-"$SGLJAX_VERSION"-*.whl)" "$unpacked"
    for p in "${patches[@]}"; do
        apply_patch "$unpacked" "$p" || die "$(basename "$p") does not apply to the pristine sglang-jax $SGLJAX_VERSION"
        say "ok: $(basename "$p") applies to the pristine wheel (after the ones before it)"
    done
    python3 -c 'import ast, pathlib, sys; [ast.parse(p.read_text(), str(p)) for p in pathlib.Path(sys.argv[1]).rglob("*.py")]' \
        "$unpacked/sgl_jax" || die "the patched sgl_jax does not parse"

    # The fallback model: made here with the same transformers/tokenizers (pure Python and abi3 wheels).
    local mk="$tmp/mk"
    if "${pip[@]}" install -q --disable-pip-version-check --target "$mk" "transformers==4.55.4" "tokenizers==0.21.4" \
            "huggingface-hub==0.34.4" safetensors ml_dtypes numpy >/dev/null 2>&1 \
        && PYTHONPATH="$mk" python3 "$repo/scripts/make_tiny_qwen3.py" "$wheels/tiny-qwen3"; then
        say "ok: fallback model in $wheels_rel/tiny-qwen3"
    else
        rm -rf "$wheels/tiny-qwen3"
        say "note: could not make the fallback model here; it will be made there only"
    fi
    rm -rf "$tmp"

    local n mib
    n="$(ls "$wheels"/*.whl | wc -l)"
    mib="$(du -sm "$wheels" | cut -f1)"
    [ "$mib" -lt 56 ] || die "$wheels_rel is $mib MiB: too much for the 64 MiB a call carries with the tree"
    local stray
    stray="$(git -C "$repo" ls-files --others --exclude-standard -z | xargs -0 -r du -ck 2>/dev/null | tail -1 | cut -f1)"
    say "ok: $n wheels, $(du -sh "$wheels" | cut -f1) in $wheels_rel; untracked-not-ignored files here: ${stray:-0} KiB"
    echo 'run(command="bash scripts/h200_sglang_jax.sh run", carry=[".whl/sglang-jax-h200"], timeout_s=600)'
}

run_there() {
    local t0=$SECONDS budget="${H200_BUDGET_S:-575}"
    local out="${OUT:-/tmp/h200-out}"
    mkdir -p "$out"
    exec > >(tee -a "$out/h200_sglang_jax.log") 2>&1
    set -x
    export PYTHONUNBUFFERED=1
    date -u; uname -a; nvidia-smi --query-gpu=name,memory.used,memory.total,driver_version --format=csv || true
    cat "$wheels/TUNER_COMMIT" || true
    ls "$wheels"/*.whl >/dev/null || die "no wheels in $wheels_rel: run 'prepare' here and carry $wheels_rel"

    local site=/tmp/site
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$wheels"/*.whl \
        || die "pip install of the carried wheels failed"
    export PYTHONPATH="$site"
    for p in "${patches[@]}"; do
        apply_patch "$site" "$p" || die "$(basename "$p") did not apply in $site"
    done
    # From outside the checkout: the tuner imported is the carried wheel's (HEAD), not the working tree's.
    local work=/tmp/h200-study
    rm -rf "$work" && mkdir -p "$work" && cd "$work"
    python3 - <<'PY'
import importlib.metadata as md, sys
print("python", sys.version.split()[0], sys.executable)
for name in ("jax", "jaxlib", "jax-cuda13-plugin", "flax", "sglang-jax", "transformers", "tokenizers", "torch",
             "optuna", "tuner", "nvidia-ml-py"):
    try:
        print(f"  {name} {md.version(name)}")
    except md.PackageNotFoundError:
        print(f"  {name} -")
import tuner, sgl_jax
print("  tuner from", tuner.__file__, "; sgl_jax from", sgl_jax.__file__)
PY
    JAX_PLATFORMS=cuda,cpu python3 -c 'import jax; print("jax devices:", jax.devices(), jax.devices("cpu"))' || true

    local model=/tmp/tiny-qwen3
    if ! python3 "$repo/scripts/make_tiny_qwen3.py" "$model"; then
        [ -d "$wheels/tiny-qwen3" ] || die "could not make the tiny model, and none was carried"
        say "using the carried model $wheels_rel/tiny-qwen3"
        rm -rf "$model" && cp -r "$wheels/tiny-qwen3" "$model"
    fi

    # NVML's used memory every 0.1 s, for the slot hand-off check.
    python3 - "$out/nvml.tsv" <<'PY' &
import sys, time, pynvml
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
with open(sys.argv[1], "w", buffering=1) as f:
    f.write("time\tused_mib\tpids\n")
    while True:
        used = pynvml.nvmlDeviceGetMemoryInfo(h).used >> 20
        try:
            pids = ",".join(str(p.pid) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h))
        except pynvml.NVMLError:
            pids = "?"
        f.write(f"{time.time():.3f}\t{used}\t{pids}\n")
        time.sleep(0.1)
PY
    local sampler=$!

    local rc_check=0 rc_run=0
    timeout -k 10 120 python3 -m tuner check --space "$space" --model "$model" || rc_check=$?
    local left=$(( budget - (SECONDS - t0) ))
    local hard=$(( left - 40 )) soft=$(( left - 140 ))
    [ "$soft" -gt 60 ] || soft=60
    timeout -s INT -k 40 "$hard" python3 -m tuner run --trials 5 --space "$space" --model "$model" --gpus 0 --seed 0 \
        --storage sqlite:///trials.db --workdir runs --timeout "$soft" || rc_run=$?
    python3 -m tuner show --storage sqlite:///trials.db --study sglang-jax-h200-tiny 2>&1 | tee "$out/show.txt" || true
    sleep 1
    kill "$sampler" 2>/dev/null || true
    wait "$sampler" 2>/dev/null || true
    nvidia-smi --query-gpu=memory.used --format=csv || true

    python3 - "$work/trials.db" "$out/nvml.tsv" 2>&1 <<'PY' | tee "$out/handoff.txt" || true
# Per trial: NVML's used memory at teardown start, at the slot's release and at the next trial's slot
# acquisition (trial attrs slot_acquired_at / slot_released_at, stage_seconds["teardown"]).
import bisect, sys
import optuna
optuna.logging.set_verbosity(optuna.logging.WARNING)
db, tsv = sys.argv[1], sys.argv[2]
ts, used = [], []
for line in list(open(tsv, errors="replace"))[1:]:
    try:
        t_, u_ = line.split("\t")[:2]
        ts.append(float(t_)); used.append(int(u_))
    except ValueError:  # a line cut short when the sampler was stopped
        pass
base = min(used[:10]) if used else 0  # before the tuner started anything
t_start = ts[0] if ts else 0.0
def at(t):  # the last sample at or before t
    i = bisect.bisect_right(ts, t) - 1
    return used[max(i, 0)]
study = optuna.load_study(study_name="sglang-jax-h200-tiny", storage=f"sqlite:///{db}")
trials = sorted((t for t in study.get_trials() if t.user_attrs.get("slot_acquired_at")),
                key=lambda t: t.user_attrs["slot_acquired_at"])
print(f"NVML baseline {base} MiB (sampler start); {len(ts)} samples every ~0.1 s; times in s since the sampler started")
print(f"{'trial':>5} {'acquired':>9} {'peak MiB':>9} {'teardown@':>9} {'MiB then':>9} {'back@':>8} {'released@':>9} "
      f"{'MiB then':>9} {'next acq@':>9} {'MiB then':>9}  outcome")
ok, notes = True, []
for k, t in enumerate(trials):
    a, r = t.user_attrs["slot_acquired_at"], t.user_attrs.get("slot_released_at")
    td = (t.user_attrs.get("stage_seconds") or {}).get("teardown")
    if r is None:
        print(f"{t.number:>5} {a - t_start:9.1f}  (no release recorded: {t.state.name})")
        continue
    lo, hi = bisect.bisect_left(ts, a), bisect.bisect_right(ts, r)
    peak = max(used[lo:hi], default=0)
    tstart = r - td if td is not None else None
    # when memory was last above baseline+512 MiB before the release, and so back at baseline
    high = [ts[i] for i in range(lo, hi) if used[i] > base + 512]
    back = (max(high) + 0.1) if high else None
    nxt = trials[k + 1].user_attrs["slot_acquired_at"] if k + 1 < len(trials) else None
    print(f"{t.number:>5} {a - t_start:9.1f} {peak:9d} "
          + (f"{tstart - t_start:9.1f} {at(tstart):9d} " if tstart else f"{'-':>9} {'-':>9} ")
          + (f"{back - t_start:8.1f} " if back else f"{'-':>8} ")
          + f"{r - t_start:9.1f} {at(r):9d} "
          + (f"{nxt - t_start:9.1f} {at(nxt):9d}" if nxt else f"{'-':>9} {'-':>9}")
          + f"  {t.state.name} {t.user_attrs.get('failure_kind', '')}")
    if at(r) > base + 512 or (nxt and at(nxt) > base + 512) or (nxt and high and max(high) > nxt):
        ok = False
    if tstart and back:
        notes.append(f"trial {t.number}: {at(tstart)} MiB at teardown start, "
                     + (f"back at baseline {back - tstart:.1f} s later" if back > tstart
                        else "already back at baseline (the server had exited)")
                     + f", slot released {r - back:.1f} s after the memory was back"
                     + (f", next trial acquired it {nxt - back:.1f} s after the memory was back" if nxt else ""))
print("\n".join(notes))
print("hand-off:", "every slot was handed on only with NVML back at its baseline (+512 MiB)" if ok
      else "FAILED: a slot was handed on while NVML still showed memory held")
print("\nper trial: params, outcome, tok/s")
for t in sorted(study.get_trials(), key=lambda t: t.number):
    u = t.user_attrs
    print(f"  trial {t.number} {t.state.name} {u.get('failure_kind', '')} {u.get('output_throughput', '')} tok/s "
          f"params={t.params} stage_seconds={u.get('stage_seconds')} logprob_diff={u.get('gate_max_logprob_diff')}")
    if u.get("failure_message"):
        print(f"    failure: {u.get('failure_stage')}: {u['failure_message'][:400]}")
PY
    cp "$work/trials.db" "$out/" 2>/dev/null || true
    tar -czf "$out/runs.tar.gz" -C "$work" runs 2>/dev/null || true
    ls -la "$out"
    say "check exit $rc_check, run exit $rc_run, $(( SECONDS - t0 )) s"
    [ "$rc_check" -eq 0 ] && [ "$rc_run" -eq 0 ]
}

case "${1:-}" in
    prepare) prepare ;;
    run) run_there ;;
    *) echo "usage: bash scripts/h200_sglang_jax.sh prepare|run   (see the header)" >&2; exit 2 ;;
esac
