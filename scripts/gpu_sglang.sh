#!/usr/bin/env bash
# Real SGLang 0.5.17 on the lent GPU machine: a tuner study spread over several device calls.
#
#   bash scripts/gpu_sglang.sh prepare          # here: the overlay and wheels into .whl/gpu-sglang (<= 58 MiB)
#   bash scripts/gpu_sglang.sh prepare-fa3      # here, optional: fa3 in 3 parts, .whl/fa3-1..3 (see prepare_fa3)
#   then the device tool's run, as many calls as the study needs:
#       run(command="bash scripts/gpu_sglang.sh run", carry=[".whl/gpu-sglang"], timeout_s=600)
#   after each call, here:
#       bash scripts/gpu_sglang.sh take /work/.device/<files_at>   # trials.db and the JIT caches, for the next call
#
# Why SGLang 0.5.17: it is the newest release whose torch (2.11.0) is the GPU image's (torch 2.11.0+cu130);
# ../shared/notes/sglang-gpu.md has the table. The image lacks SGLang and what it needs; `prepare` carries it.
#
# prepare (here, with network): `pip download` of cp312 manylinux wheels (sglang 0.5.17, sglang-kernel 0.4.5,
#   flashinfer-python 0.6.15.post1, transformers 5.12.1 + tokenizers 0.22.2 (SGLang 0.5.17 does not import with
#   the image's transformers 5.17), xgrammar, torchao, fastapi 0.141.1 (0.142+ imports opentelemetry), ...),
#   installed with --target into one folder, then trimmed of what the Llama/Qwen path with the triton and
#   flashinfer backends never loads: sgl_kernel's FlashAttention-3 (flash_ops, 1.1 GB: --attention-backend fa3),
#   FlashMLA, InfLLM and sm100 (Blackwell) kernels, xgrammar's static library, sglang's multimodal_gen
#   (its diffusion CLI); debug info stripped. Packed as overlay.tar.xz (~45 MiB). Beside it: the tuner's own
#   needs as wheels and the tuner itself, built from the committed HEAD (its commit in TUNER_COMMIT).
#   Checks the size and that .whl is git-ignored. Downloads are cached in .cache/gpu-sglang.
#
# run (there; budget GPU_BUDGET_S, default 570 s of the call's 600):
#   1. unpacks the overlay into /tmp/site (kept while the machine stays warm) and installs the wheels;
#   2. restores the carried state: trials.db and the JIT caches (flashinfer, tvm-ffi, triton) of earlier calls;
#   3. makes the model (scripts/make_gpu_model.py, GPU_MODEL preset, default llama3-8b) in /tmp/<preset>;
#      GPU_MODEL=known-answer trains the known-answer model instead (scripts/make_known_answer_model.py, a few
#      minutes on a fresh machine; kept while it stays warm) and defaults GPU_SPACE to its space;
#   4. `python3 -m tuner check`, then starts `python3 -m tuner run` in its own session (setsid), so that the
#      study goes on between two calls while the machine is held; a call that finds it running only waits;
#   5. near the budget's end: with GPU_FINISH=1 (or once the study has its GPU_TRIALS trials) the study is
#      interrupted (the tuner stops the server and marks the trial) and `show`, `export`, `report` run;
#   6. brings back under $OUT: trials.db (an SQLite backup, taken while the study runs), gpu_sglang.log,
#      study.log, runs.tar.gz (per-trial server logs), jit.tar.xz (where it fits), results.txt.
# Other settings: GPU_SPACE (default search_spaces/sglang-0.5.17-h100-llama3-8b.yaml, or
# search_spaces/sglang-0.5.17-h100-known-answer.yaml with GPU_MODEL=known-answer), GPU_TRIALS (24),
# GPU_CONFIRM (arguments of a `tuner confirm` that follows the study, e.g. "--top 3 --repeats 3"),
# GPU_STUDY_DB (prepare: the trials.db the study continues, or none), GPU_STUDY_DIR (prepare and run: the
# study's folder there, /tmp/gpu-<name>, default /tmp/gpu-study; the carried trials.db goes into the folder that
# prepare named; one study runs at a time; scripts/gpu_fault_studies.sh chains two),
# planted faults (a space whose server.env puts /tmp/sglang-faults first on PYTHONPATH and names a fault in
# TUNER_FAULT: scripts/sglang_faults),
# GPU_MODE=bench (bench_serving against the probe on the winner's server: see bench_there below),
# GPU_KA_SEEDS (with GPU_MODEL=known-answer: other seeds, e.g. "1 2", trained beside seed 0 as a check of the recipe).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
carry_rel=".whl/gpu-sglang"
carry="$repo/$carry_rel"
cache="$repo/.cache/gpu-sglang"

SGLANG_VERSION="0.5.17"
# name==version, one version of each (two stop the install there). What the image already has (torch, triton,
# numpy, safetensors, huggingface-hub 1.33, aiohttp, requests, uvloop, psutil, pillow, scipy, einops,
# sentencepiece, tiktoken, prometheus-client, nvidia-ml-py, cuda-bindings, ...) is not carried.
SGLANG_NEEDS=(
    "sglang==$SGLANG_VERSION" sglang-kernel==0.4.5 flashinfer-python==0.6.15.post1 apache-tvm-ffi==0.1.11
    transformers==5.12.1 tokenizers==0.22.2 xgrammar==0.2.1 torchao==0.17.0 torch_memory_saver==0.0.10
    fastapi==0.141.1 starlette==0.49.3 uvicorn==0.55.0 pydantic==2.14.4 pydantic-core==2.50.5
    annotated-types==0.8.0 annotated-doc==0.0.7 typing-inspection==0.4.5 python-multipart==0.0.34
    orjson==3.13.0 pyzmq==27.3.0 pybase64==1.5.1 msgspec==0.23.0 setproctitle==1.3.8
    openai==2.6.1 distro==1.9.0 jiter==0.19.0 sniffio==1.3.1
    jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1
    soundfile==0.13.1 cffi==2.1.1 pycparser==3.12 dill==0.4.1 compressed-tensors==0.20.1 loguru==0.7.3
    gguf==0.19.0 partial_json_parser==0.2.1.1.post7 interegular==0.3.3 easydict==1.14
)
TUNER_NEEDS=(
    optuna==5.0.0 optuna-dashboard==0.21.0 bottle==0.13.4 alembic==1.20.1 mako==1.4.3 colorlog==6.12.0
    sqlalchemy==2.1.9 tenacity==9.2.1 httpx==0.28.1 httpcore==1.0.9 h11==0.16.0
)
MAX_CARRY_MIB=58

die() { echo "gpu_sglang: error: $*" >&2; exit 1; }
say() { echo "gpu_sglang: $*" >&2; }

prepare() {
    command -v xz >/dev/null || die "xz is missing (apt-get install xz-utils)"
    git -C "$repo" check-ignore -q "$carry_rel" || die "$carry_rel is not git-ignored: it would travel twice"
    local plat=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_34_x86_64
                --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_26_x86_64
                --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
                --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 --platform any)
    local pip=(python3 -m pip --disable-pip-version-check)
    mkdir -p "$cache/dl" "$carry/wheels" "$carry/state"
    # The overlay changes only with SGLANG_NEEDS: rebuilt where it is missing, of another version, or asked
    # for (PREPARE_OVERLAY=1); its xz -9e takes minutes.
    if [ -f "$carry/overlay.tar.xz" ] && [ "$(cat "$carry/SGLANG_VERSION" 2>/dev/null)" = "$SGLANG_VERSION" ] \
            && [ -z "${PREPARE_OVERLAY:-}" ]; then
        say "overlay of SGLang $SGLANG_VERSION kept (PREPARE_OVERLAY=1 rebuilds it)"
    else
        say "downloading SGLang $SGLANG_VERSION's wheel set into .cache/gpu-sglang/dl (sglang-kernel alone is 383 MB)"
        "${pip[@]}" download -q --no-deps "${plat[@]}" -d "$cache/dl" "${SGLANG_NEEDS[@]}" || die "pip download failed"

        local site="$cache/site"
        rm -rf "$site"
        local wheels=()
        for spec in "${SGLANG_NEEDS[@]}"; do
            local name="${spec%%==*}" version="${spec##*==}" norm f
            norm="$(echo "$name" | tr 'A-Z-' 'a-z_')"
            f="$(ls "$cache/dl" | grep -i "^${norm}-${version}-" | head -1)"
            [ -n "$f" ] || die "no wheel of $spec in .cache/gpu-sglang/dl"
            wheels+=("$cache/dl/$f")
        done
        "${pip[@]}" install -q --no-deps --no-compile --target "$site" "${plat[@]}" "${wheels[@]}" \
            || die "pip install --target of the wheel set failed"
        # What the triton/flashinfer path on Llama and Qwen never loads (see the header).
        rm -f "$site"/sgl_kernel/flash_ops.abi3.so "$site"/sgl_kernel/flashmla_ops.abi3.so "$site"/sgl_kernel/infllm_ops*.so
        rm -rf "$site/sgl_kernel/sm100" "$site/sglang/multimodal_gen" "$site/xgrammar/lib/libxgrammar.a"
        [ -f "$site/sgl_kernel/sm90/common_ops.abi3.so" ] || die "sgl_kernel/sm90/common_ops.abi3.so missing: H100/H200 need it"
        find "$site" -name '*.so*' -type f -exec strip --strip-debug {} + 2>/dev/null || true
        find "$site" -name __pycache__ -prune -exec rm -rf {} +
        say "overlay: $(du -sh "$site" | cut -f1) unpacked; packing with xz"
        # -9e: a few MiB less than -6, room the JIT caches need in the 64 MiB a call carries.
        tar -C "$site" -cf - . | xz -9e -T0 >"$carry/overlay.tar.xz.tmp" && mv "$carry/overlay.tar.xz.tmp" "$carry/overlay.tar.xz"
        echo "$SGLANG_VERSION" >"$carry/SGLANG_VERSION"
    fi

    rm -f "$carry"/wheels/*.whl
    "${pip[@]}" download -q --no-deps "${plat[@]}" -d "$carry/wheels" "${TUNER_NEEDS[@]}" || die "pip download of the tuner's needs failed"
    slim_dashboard_wheel "$carry"/wheels/optuna_dashboard-*.whl
    local tmp
    tmp="$(mktemp -d)"
    git -C "$repo" archive --format=tar HEAD | tar -x -C "$tmp"
    "${pip[@]}" wheel -q --no-deps -w "$carry/wheels" "$tmp" || die "could not build the tuner wheel"
    rm -rf "$tmp"
    git -C "$repo" rev-parse HEAD >"$carry/TUNER_COMMIT"
    [ -z "$(git -C "$repo" status --porcelain -- tuner pyproject.toml scripts search_spaces)" ] \
        || say "note: uncommitted changes here; the tuner wheel holds HEAD $(cut -c1-12 "$carry/TUNER_COMMIT") without them (scripts/ and search_spaces/ travel as they are)"
    # The study goes on from where the last session left it: GPU_STUDY_DB, a committed trials.db (default
    # docs/gpu-sglang-0517/trials.db), or none for a new study in a file of its own. It is restored there into
    # the study folder GPU_STUDY_DIR (default /tmp/gpu-study) alone. A trials.db that `take` brought is kept
    # unless GPU_STUDY_DB names one.
    local db="${GPU_STUDY_DB:-docs/gpu-sglang-0517/trials.db}" dir="${GPU_STUDY_DIR:-/tmp/gpu-study}"
    if [ "$db" = none ]; then
        rm -f "$carry/state/trials.db" "$carry/state/STUDY_DIR" && say "state: no trials.db (a new study)"
    elif [ -n "${GPU_STUDY_DB:-}" ] || [ ! -f "$carry/state/trials.db" ]; then
        [ -f "$repo/$db" ] || die "GPU_STUDY_DB: no file $db (a trials.db in the repo, or none)"
        cp "$repo/$db" "$carry/state/trials.db"
        echo "$dir" >"$carry/state/STUDY_DIR"
        say "state: trials.db from $db, for the study in $dir there"
    fi
    check_size
    echo "run(command=\"bash scripts/gpu_sglang.sh run\", carry=[\"$carry_rel\"], timeout_s=600)"
}

# optuna-dashboard's web page (public/bundle.js and its .gz: 3.7 of the wheel's 3.9 MiB) is never served on the
# GPU machine, where only its save_note runs (the trials' notes). Without it, the JIT caches fit in the carry.
slim_dashboard_wheel() {
    python3 - "$1" <<'PY' || die "could not leave the web page out of $1"
import os, sys, zipfile
path = sys.argv[1]
page = ("optuna_dashboard/public/bundle.js", "optuna_dashboard/public/bundle.js.gz")
with zipfile.ZipFile(path) as src, zipfile.ZipFile(path + ".tmp", "w", zipfile.ZIP_DEFLATED) as dst:
    for item in src.infolist():
        if item.filename in page:
            continue
        data = src.read(item)
        if item.filename.endswith(".dist-info/RECORD"):
            data = b"".join(line for line in data.splitlines(True) if not line.startswith(page[0].encode()))
        dst.writestr(item, data)
os.replace(path + ".tmp", path)
PY
}

# fa3 (sgl_kernel's FlashAttention-3, SGLang's default attention backend on Hopper) does not fit in one call:
# its library is 1,122,607,032 bytes, ~135 MiB as xz. prepare-fa3 cuts the xz into FA3_PARTS folders,
# .whl/fa3-1 ... .whl/fa3-N, each under MAX_CARRY_MIB, with a MANIFEST (part, parts, sha256 of the library).
# Carried one a call (GPU_MODE=fa3) while the machine is held, they are put together there and checked.
FA3_PARTS=3
prepare_fa3() {
    local whl dir="$cache/fa3" so i
    whl="$(ls "$cache"/dl/sglang_kernel-0.4.5-*.whl 2>/dev/null | head -1)"
    [ -n "$whl" ] || die "no sglang-kernel 0.4.5 wheel in .cache/gpu-sglang/dl: run 'bash scripts/gpu_sglang.sh prepare' first"
    git -C "$repo" check-ignore -q .whl/fa3-1 || die ".whl/fa3-1 is not git-ignored: it would travel twice"
    mkdir -p "$dir"
    so="$dir/flash_ops.abi3.so"
    if [ ! -f "$dir/flash_ops.abi3.so.xz" ]; then
        python3 - "$whl" "$so" <<'PY2' || die "could not take flash_ops.abi3.so out of $whl"
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel, wheel.open("sgl_kernel/flash_ops.abi3.so") as src, \
        open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY2
        say "packing fa3 ($(du -h "$so" | cut -f1)) with xz: minutes"
        xz -6 -T0 -c "$so" >"$dir/flash_ops.abi3.so.xz.tmp" && mv "$dir/flash_ops.abi3.so.xz.tmp" "$dir/flash_ops.abi3.so.xz"
        sha256sum "$so" | cut -d' ' -f1 >"$dir/SHA256"
        rm -f "$so"
    fi
    local size part
    size="$(stat -c %s "$dir/flash_ops.abi3.so.xz")"
    part=$(( (size + FA3_PARTS - 1) / FA3_PARTS ))
    [ $(( part / 1048576 )) -lt "$MAX_CARRY_MIB" ] || die "a fa3 part would be $(( part / 1048576 )) MiB: raise FA3_PARTS"
    rm -rf "$repo"/.whl/fa3-* "$dir"/part-*
    split -b "$part" -d -a 1 "$dir/flash_ops.abi3.so.xz" "$dir/part-"
    for i in $(seq 1 "$FA3_PARTS"); do
        mkdir -p "$repo/.whl/fa3-$i"
        mv "$dir/part-$(( i - 1 ))" "$repo/.whl/fa3-$i/part"
        echo "$i $FA3_PARTS $(cat "$dir/SHA256")" >"$repo/.whl/fa3-$i/MANIFEST"
        say "ok: .whl/fa3-$i is $(du -sm "$repo/.whl/fa3-$i" | cut -f1) MiB"
        echo "run(command=\"GPU_MODE=fa3 bash scripts/gpu_sglang.sh run\", carry=[\".whl/fa3-$i\"], timeout_s=120)"
    done
}

check_size() {
    local mib
    mib="$(du -sm "$carry" | cut -f1)"
    [ "$mib" -le "$MAX_CARRY_MIB" ] || die "$carry_rel is $mib MiB, over $MAX_CARRY_MIB: the call carries 64 MiB with the tree"
    say "ok: $carry_rel is $mib MiB ($(du -sh "$carry/overlay.tar.xz" | cut -f1) overlay, $(ls "$carry"/wheels/*.whl | wc -l) wheels, state: $(ls "$carry/state" | tr '\n' ' '))"
}

# The files a call brought back, into the state the next call carries.
take() {
    local from="${1:-}"
    [ -d "$from" ] || die "usage: bash scripts/gpu_sglang.sh take DIR   (the files_at folder of the last run)"
    mkdir -p "$carry/state"
    local f
    for f in trials.db jit.tar.xz; do
        [ -f "$from/$f" ] && cp "$from/$f" "$carry/state/$f" && say "took $f ($(du -h "$from/$f" | cut -f1))"
    done
    mkdir -p "$repo/.cache/gpu-sglang/calls"
    local keep="$repo/.cache/gpu-sglang/calls/$(date -u +%Y%m%dT%H%M%S)"
    cp -r "$from" "$keep" && say "kept everything in ${keep#$repo/}"
    check_size
}

# GPU_MODE=fa3 (there): keep the carried part in /tmp/fa3-parts (for as long as the machine is held), then
# fa3_assemble. A call of this mode carries only its part: the overlay and the study are left as they are.
fa3_there() {
    local store=/tmp/fa3-parts manifest index count sum
    mkdir -p "$store"
    for manifest in "$repo"/.whl/fa3-*/MANIFEST; do
        [ -f "$manifest" ] || continue
        read -r index count sum <"$manifest"
        cp "$(dirname "$manifest")/part" "$store/part-$index"
        echo "$count $sum" >"$store/want"
        say "fa3: part $index of $count kept in $store"
    done
    [ -f "$store/want" ] || die "no fa3 part carried: bash scripts/gpu_sglang.sh prepare-fa3, then carry .whl/fa3-N"
    fa3_assemble /tmp/site
}

# Put the fa3 parts together into $1/sgl_kernel once all are here and the overlay is; checked by sha256.
fa3_assemble() {
    local site="$1" store=/tmp/fa3-parts count sum have i
    [ -f "$store/want" ] || return 0
    [ -f "$site/sgl_kernel/flash_ops.abi3.so" ] && { say "fa3: in $site already"; return 0; }
    read -r count sum <"$store/want"
    have="$(ls "$store"/part-* 2>/dev/null | wc -l)"
    if [ "$have" -lt "$count" ]; then
        say "fa3: $have of $count parts here (carry the others while this machine is held)"; return 0
    fi
    [ -d "$site/sgl_kernel" ] || { say "fa3: all $count parts here; put together once the overlay is (a study call)"; return 0; }
    if ! for i in $(seq 1 "$count"); do cat "$store/part-$i"; done | xz -dc >"$site/sgl_kernel/flash_ops.abi3.so.tmp" \
            || ! echo "$sum  $site/sgl_kernel/flash_ops.abi3.so.tmp" | sha256sum -c --quiet; then
        rm -f "$site/sgl_kernel/flash_ops.abi3.so.tmp" "$store"/part-*
        die "fa3: the parts do not unpack into prepare-fa3's library (sha256): carry them again"
    fi
    mv "$site/sgl_kernel/flash_ops.abi3.so.tmp" "$site/sgl_kernel/flash_ops.abi3.so"
    say "fa3: put together in $site/sgl_kernel ($(stat -c %s "$site/sgl_kernel/flash_ops.abi3.so") bytes, sha256 checked)"
}

run_there() {
    local t0=$SECONDS budget="${GPU_BUDGET_S:-570}"
    local out="${OUT:-/tmp/gpu-out}" work="${GPU_STUDY_DIR:-/tmp/gpu-study}" site=/tmp/site
    local preset="${GPU_MODEL:-llama3-8b}" trials="${GPU_TRIALS:-24}"
    local default_space=search_spaces/sglang-0.5.17-h100-llama3-8b.yaml
    [ "$preset" = known-answer ] && default_space=search_spaces/sglang-0.5.17-h100-known-answer.yaml
    local space="$repo/${GPU_SPACE:-$default_space}"
    mkdir -p "$out" "$work"
    exec > >(tee -a "$out/gpu_sglang.log") 2>&1
    export PYTHONUNBUFFERED=1
    date -u
    nvidia-smi --query-gpu=name,memory.used,memory.total,driver_version --format=csv || true
    if [ "${GPU_MODE:-study}" = fa3 ]; then fa3_there; return; fi
    say "tuner $(cut -c1-12 "$carry/TUNER_COMMIT" 2>/dev/null), space ${space#$repo/}, model $preset, $trials trials"

    # 1. The overlay, once per machine.
    if [ "$(cat "$site/.overlay" 2>/dev/null)" != "$(cat "$carry/SGLANG_VERSION")" ]; then
        rm -rf "$site" && mkdir -p "$site"
        xz -dc "$carry/overlay.tar.xz" | tar -C "$site" -x || die "could not unpack the overlay"
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
            "$carry"/wheels/*.whl || die "pip install of the carried wheels failed"
        cp "$carry/SGLANG_VERSION" "$site/.overlay"
        # Byte-compiled in the background while the model is made: the first import otherwise takes ~60 s.
        (python3 -m compileall -q -j 8 "$site" >/dev/null 2>&1 &)
        say "overlay unpacked into $site ($(du -sh "$site" | cut -f1)) at $(( SECONDS - t0 )) s"
    fi
    fa3_assemble "$site"
    export PYTHONPATH="$site"
    # The fault plugin (scripts/sglang_faults): a space plants a fault per trial by putting it first on the
    # server's PYTHONPATH (search_spaces/*-faults.yaml); anywhere else it is inert.
    rm -rf /tmp/sglang-faults && cp -r "$repo/scripts/sglang_faults" /tmp/sglang-faults
    # sglang/utils.py imports IPython.display (HTML, display) at module level for its notebook helpers, and
    # launch_server reaches it; the image has no IPython. An import-only stand-in, as scripts/setup_sglang_ref.sh
    # does for torchvision: HTML keeps its text, display prints it.
    if ! python3 -c 'import IPython.display' 2>/dev/null; then
        mkdir -p "$site/IPython"
        echo '"""Import-only IPython stand-in of scripts/gpu_sglang.sh (not IPython)."""' >"$site/IPython/__init__.py"
        cat >"$site/IPython/display.py" <<'PY'
"""IPython.display stand-in (scripts/gpu_sglang.sh): SGLang's notebook helpers only."""


class HTML:
    def __init__(self, data=None, *args, **kwargs):
        self.data = data


def display(*objs, **kwargs):
    for obj in objs:
        print(getattr(obj, "data", obj))
PY
    fi
    # sglang.bench_serving imports HF `datasets` at module level for its MMMU loader; the image has none, and
    # the bench (GPU_MODE=bench) sends its own prompts. A stand-in that loads nothing.
    if ! python3 -c 'import datasets' 2>/dev/null; then
        mkdir -p "$site/datasets"
        cat >"$site/datasets/__init__.py" <<'PY'
"""datasets stand-in (scripts/gpu_sglang.sh): bench_serving imports it; the bench loads nothing from it."""


def load_dataset(*args, **kwargs):
    raise RuntimeError("no Hugging Face datasets here (scripts/gpu_sglang.sh)")
PY
    fi

    # 2. The state of earlier calls (not over a study that is running here now).
    local pidfile="$work/study.pid" running=""
    if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then running=1; fi
    # A machine still held since the last call keeps the newer trials.db: the carried one is restored only on a
    # fresh machine.
    if [ -f "$work/trials.db" ]; then
        say "trials.db of this machine kept (held since the last call)"
    elif [ -f "$carry/state/trials.db" ] && [ "$work" = "$(cat "$carry/state/STUDY_DIR" 2>/dev/null || echo /tmp/gpu-study)" ]; then
        cp "$carry/state/trials.db" "$work/trials.db" && say "restored trials.db of the last call"
    fi
    if [ ! -f "$HOME/.cache/gpu-sglang-jit" ] && [ -f "$carry/state/jit.tar.xz" ]; then
        mkdir -p "$HOME/.cache"
        xz -dc "$carry/state/jit.tar.xz" | tar -C "$HOME" -x && touch "$HOME/.cache/gpu-sglang-jit" && say "restored the JIT caches"
    fi

    # 3. The model: random weights of a preset, or the known-answer model, trained here (its accuracy per prompt
    # length is printed into this log, and kept in the folder's accuracy.json).
    local model="/tmp/$preset"
    if [ "$preset" = known-answer ]; then
        # GPU_KA_SEEDS: other seeds trained at the same time, the recipe checked again on this GPU; their logs and
        # accuracy.json come back (known-answer-seed<N>.*). Only seed 0's model is served (the space's prompts).
        local s pids=()
        for s in ${GPU_KA_SEEDS:-}; do
            python3 "$repo/scripts/make_known_answer_model.py" "/tmp/known-answer-seed$s" --preset gpu --device cuda \
                --seed "$s" >"$out/known-answer-seed$s.log" 2>&1 &
            pids+=("$!")
        done
        python3 "$repo/scripts/make_known_answer_model.py" "$model" --preset gpu --device cuda \
            || die "could not make the known-answer model"
        for s in "${pids[@]}"; do wait "$s" || say "an extra known-answer seed missed its gate (its log in $out)"; done
        for s in ${GPU_KA_SEEDS:-}; do cp "/tmp/known-answer-seed$s/accuracy.json" "$out/known-answer-seed$s.json" || true; done
    else
        python3 "$repo/scripts/make_gpu_model.py" "$preset" "$model" || die "could not make the model"
    fi
    cd "$work"
    # A space's repo-relative files (probe.dataset, probe.trace.path: search_spaces/traces/...) resolve here too.
    ln -sfn "$repo/search_spaces" "$work/search_spaces"
    python3 - <<'PY' || true
import importlib.metadata as md
for name in ("sglang", "sglang-kernel", "flashinfer-python", "transformers", "tokenizers", "torch", "triton",
             "optuna", "tuner"):
    try:
        print(f"  {name} {md.version(name)}")
    except md.PackageNotFoundError:
        print(f"  {name} -")
PY

    if [ "${GPU_MODE:-study}" = bench ]; then
        if [ -n "$running" ]; then
            say "GPU_MODE=bench: interrupting the study first (one server on the GPU at a time)"
            stop_study "$(cat "$pidfile")"
        fi
        bench_there "$model" "$out" "$work"
        return
    fi

    # 4. The study, in its own session so that it outlives this call while the machine is held. Each run gets
    # --timeout: what is left of the call before its report (GPU_REPORT_S); it starts no trial whose expected
    # start-up does not fit (docs/faults.md). A run that stopped at its timeout is followed by another while
    # the call has time. With GPU_CONFIRM (e.g. "--top 3 --repeats 3"), `tuner confirm` follows in the same
    # session once the study has all its trials.
    local finish_at=$(( budget - ${GPU_REPORT_S:-90} )) pid shown=0
    if [ -z "$running" ]; then
        local other
        for other in /tmp/gpu-*/study.pid; do
            [ "$other" != "$pidfile" ] && [ -f "$other" ] && kill -0 "$(cat "$other")" 2>/dev/null \
                && die "a study is still running in $(dirname "$other") (one server on the GPU at a time): end it first"
        done
        timeout -k 10 180 python3 -m tuner check --space "$space" --model "$model" || die "check failed (above)"
        start_job "$work" "$trials" "$space" "$model" $(( finish_at - (SECONDS - t0) ))
    else
        say "study already running (pid $(cat "$pidfile")): waiting on it"
    fi
    pid="$(cat "$pidfile")"
    local runs=1
    while [ $(( SECONDS - t0 )) -lt "$finish_at" ]; do
        if ! kill -0 "$pid" 2>/dev/null; then
            if study_done "$work/trials.db" "$trials" 2>/dev/null || [ $(( finish_at - (SECONDS - t0) )) -lt 60 ] \
                    || [ "$runs" -ge 5 ]; then break; fi
            runs=$(( runs + 1 ))
            start_job "$work" "$trials" "$space" "$model" $(( finish_at - (SECONDS - t0) ))
            pid="$(cat "$pidfile")"
        fi
        sleep 5
        local n
        n="$(wc -l <"$work/study.log")"
        [ "$n" -gt "$shown" ] && sed -n "$(( shown + 1 )),${n}p" "$work/study.log" && shown=$n
    done

    # 5. Stop the study where asked, or where it ended, and report.
    if [ -n "${GPU_FINISH:-}" ] && kill -0 "$pid" 2>/dev/null; then
        say "GPU_FINISH: interrupting the study"
        stop_study "$pid"
    fi
    sed -n "$(( shown + 1 )),\$p" "$work/study.log"
    python3 - "$work/trials.db" "$out/trials.db" <<'PY' || true
import sqlite3, sys
src, dst = sqlite3.connect(sys.argv[1], timeout=30), sqlite3.connect(sys.argv[2])
src.backup(dst)
dst.close(); src.close()
PY
    local storage="sqlite:///$out/trials.db"
    {
        python3 -m tuner show --storage "$storage" 2>&1 || true
        if ! kill -0 "$pid" 2>/dev/null; then
            python3 -m tuner export --storage "$storage" --out "$out/best.yaml" 2>&1 || true
            python3 -m tuner report --storage "$storage" --out "$work/report" 2>&1 || true
        fi
        python3 "$repo/scripts/gpu_trials.py" "$out/trials.db" 2>&1 || true
    } >"$out/results.txt"
    cat "$out/results.txt"
    cp "$work/study.log" "$out/" 2>/dev/null || true
    tar -czf "$out/runs.tar.gz" -C "$work" runs $( [ -d "$work/report" ] && echo report ) 2>/dev/null || true
    # The JIT caches: a later call on a fresh machine skips nvcc with them. Only the built libraries (*.so) and
    # triton's cache travel: the object files and sources beside them are rebuilt from the overlay if needed.
    # They come back only where they fit beside the overlay, the wheels and trials.db in the 58 MiB carried.
    local jit=() room
    for d in .cache/flashinfer .cache/tvm-ffi .triton/cache .cache/sglang; do [ -d "$HOME/$d" ] && jit+=("$d"); done
    if [ "${#jit[@]}" -gt 0 ]; then
        du -sh "${jit[@]/#/$HOME/}" 2>/dev/null || true
        (cd "$HOME" && find "${jit[@]}" -type f \( -name '*.so' -o -path '.triton/*' \) -print0 \
            | tar --null -T - -cf - | xz -9 -T0 >/tmp/jit.tar.xz) || true
        room=$(( MAX_CARRY_MIB - $(du -sm "$carry/overlay.tar.xz" "$carry/wheels" | awk '{s+=$1} END {print s}') - 1 ))
        local kib=$(( $(stat -c %s /tmp/jit.tar.xz) / 1024 ))
        if [ "$kib" -le $(( room * 1024 )) ]; then cp /tmp/jit.tar.xz "$out/"; say "JIT caches: $kib KiB brought back"
        else say "JIT caches: $kib KiB as .so files and triton's cache, over the $room MiB of room: not brought back"; fi
    fi
    nvidia-smi --query-gpu=memory.used --format=csv || true
    ls -la "$out"
    say "$(( SECONDS - t0 )) s; study $(kill -0 "$pid" 2>/dev/null && echo "still running (pid $pid)" || echo ended)"
}

# `tuner run` for at most $5 seconds (then `tuner confirm` with GPU_CONFIRM once the study is done), in its own
# session; its pid in $1/study.pid.
start_job() {
    local work="$1" trials="$2" space="$3" model="$4" left="$5"
    DB="$work/trials.db" TRIALS="$trials" WORKDIR="$work/runs" GPU_CONFIRM="${GPU_CONFIRM:-}" \
        SCRIPT="$repo/scripts/gpu_sglang.sh" setsid nohup bash -c '
        python3 -m tuner run "$@" || exit
        [ -n "$GPU_CONFIRM" ] || exit 0
        bash "$SCRIPT" study-done "$DB" "$TRIALS" || exit 0
        python3 -m tuner confirm --storage "sqlite:///$DB" --workdir "$WORKDIR" $GPU_CONFIRM' \
        study --trials "$trials" --space "$space" --model "$model" --gpus 0 --seed 0 --storage "sqlite:///$work/trials.db" \
        --workdir "$work/runs" --continue --timeout "$left" >>"$work/study.log" 2>&1 </dev/null &
    echo $! >"$work/study.pid"
    say "study run started (pid $!, --timeout $left)"
}

# Whether the study in $1 has its $2 trials (COMPLETE or PRUNED: a failure counts, an interruption does not).
study_done() {
    python3 - "$1" "$2" <<'PY'
import sqlite3, sys
done = sqlite3.connect(sys.argv[1]).execute("SELECT COUNT(*) FROM trials WHERE state IN ('COMPLETE', 'PRUNED')")
sys.exit(done.fetchone()[0] < int(sys.argv[2]))
PY
}

# SIGINT, as Ctrl-C, to the study's process group (start_job's setsid made its wrapper the leader): the wrapper
# bash waits on `tuner run` and passes no signal on, so one sent to it alone left the study running (found on
# the GPU, 2026-12-07). The tuner stops the server (in a session of its own) and marks the trial; up to 60 s.
stop_study() {
    kill -INT -- "-$1" 2>/dev/null || kill -INT "$1" 2>/dev/null || true
    local w=0
    while kill -0 "$1" 2>/dev/null && [ "$w" -lt 60 ]; do sleep 1; w=$(( w + 1 )); done
}

# GPU_MODE=bench: the study's winner (the baseline where none qualified) on one real server, measured by
# SGLang 0.5.17's own bench_serving and by the tuner's probe on the same prompts, GPU_BENCH_ROUNDS rounds
# (benchmarks/probe_vs_sglang_bench.py --url; issue 34, item 6). Brings back bench.txt.
bench_there() {
    local model="$1" out="$2" work="$3" port=30000 rounds="${GPU_BENCH_ROUNDS:-3}"
    [ -f "$carry/state/trials.db" ] && [ ! -f "$work/trials.db" ] && cp "$carry/state/trials.db" "$work/trials.db"
    python3 -m tuner export --storage "sqlite:///$work/trials.db" --out "$work/best.yaml" \
        || die "no trial to measure in trials.db"
    setsid python3 -m sglang.launch_server --config "$work/best.yaml" --model-path "$model" --host 127.0.0.1 \
        --port "$port" >"$work/bench-server.log" 2>&1 </dev/null &
    local server=$! waited=0
    until python3 -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=30)" \
            "http://127.0.0.1:$port/health_generate" >/dev/null 2>&1; do
        kill -0 "$server" 2>/dev/null || { tail -40 "$work/bench-server.log"; die "the server exited"; }
        [ "$waited" -lt 600 ] || { kill -TERM -- "-$server"; die "the server was not ready in 600 s"; }
        sleep 2; waited=$(( waited + 2 ))
    done
    say "server ready after ${waited} s: $(grep -v '^#' "$work/best.yaml" | tr '\n' ' ')"
    python3 "$repo/benchmarks/probe_vs_sglang_bench.py" --url "http://127.0.0.1:$port" --tokenizer "$model" \
        --bench-python python3 --rounds "$rounds" --workload "${GPU_BENCH_WORKLOAD:-384,128,512,128}" \
        2>&1 | tee "$out/bench.txt" || true
    kill -TERM -- "-$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
    cp "$work/bench-server.log" "$out/" 2>/dev/null || true
}

# Sourced (tests/test_gpu_sglang.py), it defines the functions and runs nothing.
[ "${BASH_SOURCE[0]}" = "$0" ] || return 0

case "${1:-}" in
    prepare) prepare ;;
    prepare-fa3) prepare_fa3 ;;
    take) take "${2:-}" ;;
    run) run_there ;;
    study-done) study_done "$2" "$3" ;;
    *) echo "usage: bash scripts/gpu_sglang.sh prepare|prepare-fa3|run|take DIR   (see the header)" >&2; exit 2 ;;
esac
