#!/usr/bin/env bash
# Create the virtual environment that serves sglang-jax on CPU (sglang-jax 0.0.1.post1, JAX 0.6.2).
#
#   SGLJAX_VENV   where the environment goes (default: .venv-sgljax in the repository root)
#   PYTHON        the interpreter to build it from (default: python3.11, else python3)
#
# Idempotent: an environment that already imports sglang-jax 0.0.1.post1 with the CPU patch applied is
# left as it is; one with the right version but without the patch only gets the patch.
# No torch and no CUDA build: sglang-jax needs only JAX (jax[tpu] pulls libtpu, ~340 MB, which stays
# unused with JAX_PLATFORMS=cpu), and transformers 4.55 runs without torch. The script checks that
# neither torch nor an nvidia-*/jax-cuda* wheel came in.
#
# Then scripts/patches/sglang-jax-0.0.1.post1-cpu.patch is applied to site-packages (`patch -p1`); its
# header says why each hunk exists. In short:
#   1. srt/models/qwen3.py: Qwen3ForCausalLM.__call__ computes the logits and the runner does it again
#      (TypeError "missing 1 required positional argument: 'mesh'" on the first request); it returns the
#      hidden states instead.
#   2. srt/mem_cache/memory_pool.py: the KV-cache write is a TPU-only Pallas kernel ("Only interpret mode
#      is supported on CPU backend"); off TPU it becomes `.at[idx].set(..., mode="drop")`, with the
#      padding index -1 sent out of bounds (a bare -1 would overwrite the pool's last slot, a live one).
#   3. srt/managers/schedule_batch.py: decode gives the new token position seq_len instead of seq_len - 1,
#      so decode and a re-prefill of the same tokens disagree (not CPU-specific; fixed upstream later).
# No launch flag or environment variable of 0.0.1.post1 avoids any of the three.
#
# Serve with:
#   JAX_PLATFORMS=cpu .venv-sgljax/bin/python -m sgl_jax.launch_server --model-path DIR --device cpu \
#       --host 127.0.0.1 --port 30000 --max-total-tokens 8192
# (without --max-total-tokens the KV pool is sized from host memory, ~11 GB here, and every step
# gathers over it).
set -euo pipefail

SGLJAX_VERSION="0.0.1.post1"
PIP_VERSION="26.3"
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
patch_file="$repo_root/scripts/patches/sglang-jax-$SGLJAX_VERSION-cpu.patch"
venv="${SGLJAX_VENV:-$repo_root/.venv-sgljax}"
case "$venv" in /*) ;; *) venv="$repo_root/$venv" ;; esac

die() { echo "setup_sglang_jax: error: $*" >&2; exit 1; }
log() { echo "setup_sglang_jax: $*" >&2; }

[ -f "$patch_file" ] || die "patch file $patch_file is missing"
command -v patch >/dev/null 2>&1 || die "the 'patch' program is not installed (apt-get install patch)"

check_import() {
    # Prints sglang-jax's version and exits 0 when the environment imports the server on CPU.
    JAX_PLATFORMS=cpu "$venv/bin/python" - <<'PY'
import importlib.metadata as md
import sgl_jax.launch_server  # noqa: F401
print(md.version("sglang-jax"))
PY
}

site_packages() {
    "$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'
}

# patch_state: prints "applied", "applicable" or "conflict" for the environment's site-packages.
patch_state() {
    local sp
    sp="$(site_packages)" || { echo conflict; return; }
    if patch -p1 --fuzz=0 -R --dry-run -s -f -d "$sp" <"$patch_file" >/dev/null 2>&1; then
        echo applied
    elif patch -p1 --fuzz=0 -N --dry-run -s -f -d "$sp" <"$patch_file" >/dev/null 2>&1; then
        echo applicable
    else
        echo conflict
    fi
}

apply_patch() {
    local sp state
    sp="$(site_packages)" || die "cannot find site-packages of $venv"
    state="$(patch_state)"
    case "$state" in
        applied) log "CPU patch already applied in $sp" ;;
        applicable)
            log "applying $(basename "$patch_file") to $sp"
            patch -p1 --fuzz=0 -N -s -f --no-backup-if-mismatch -d "$sp" <"$patch_file" \
                || die "patch $patch_file failed to apply to $sp"
            [ "$(patch_state)" = applied ] || die "patch $patch_file did not apply cleanly to $sp"
            ;;
        *) die "patch $patch_file neither applies to nor is applied in $sp (files of sglang-jax changed?); recreate the environment (rm -r $venv)" ;;
    esac
}

if [ -x "$venv/bin/python" ] && have="$(check_import 2>/dev/null)"; then
    if [ "$have" = "$SGLJAX_VERSION" ]; then
        state="$(patch_state)"
        if [ "$state" = applied ]; then
            log "$venv already imports sglang-jax $have with the CPU patch applied; nothing to do"
            exit 0
        fi
        if [ "$state" = applicable ]; then
            apply_patch
            log "ok: sglang-jax $have in $venv (patch applied now)"
            exit 0
        fi
        log "$venv has sglang-jax $have but its files do not match the patch; rebuilding it"
    else
        log "$venv has sglang-jax $have, want $SGLJAX_VERSION; rebuilding it"
    fi
fi

py="${PYTHON:-}"
if [ -z "$py" ]; then
    py="$(command -v python3.11 || command -v python3 || true)"
fi
[ -n "$py" ] || die "no python3 found (set PYTHON)"
command -v "$py" >/dev/null 2>&1 || die "python interpreter $py not found (set PYTHON)"
"$py" -c 'import sys; sys.exit(0 if sys.version_info[:2] >= (3, 10) else 1)' \
    || die "$py does not run or is older than Python 3.10"

start=$(date +%s)
if [ -f "$venv/pyvenv.cfg" ]; then
    # A broken, partial or outdated environment (e.g. an interrupted install): start it afresh.
    log "recreating $venv with $py (it exists but does not import sglang-jax $SGLJAX_VERSION)"
    "$py" -m venv --clear "$venv" || die "could not recreate the virtual environment $venv"
elif [ -e "$venv" ] && [ -n "$(ls -A "$venv" 2>/dev/null)" ]; then
    die "$venv exists and is not a virtual environment; remove it or set SGLJAX_VENV elsewhere"
else
    log "creating $venv with $py"
    "$py" -m venv "$venv" || die "could not create the virtual environment $venv"
fi

# Every package of a working environment, pinned (`pip freeze` of one made by this script, 2026-12,
# less pip itself): the same versions on every machine. sglang-jax's own ranges (`~=`) and its unpinned
# dependencies (httpx, openai, pandas, aiohttp, ...) would otherwise let pip pick newer releases over time.
# To refresh: drop the -c below, install, apply the patch, check that a server starts and answers, and
# paste `.venv-sgljax/bin/python -m pip freeze` here.
pins="$(mktemp)"
trap 'rm -f "$pins"' EXIT
cat > "$pins" <<'PINS'
absl-py==2.5.1
aiofiles==25.1.0
aiohappyeyeballs==2.7.1
aiohttp==3.14.5
aiosignal==1.4.0
annotated-types==0.8.0
anyio==4.14.2
attrs==26.1.0
certifi==2026.10.19.post1
charset-normalizer==3.5.3
click==8.5.1
etils==1.15.0
fastapi==0.116.2
filelock==4.3.2
flax==0.10.7
frozenlist==1.8.0
fsspec==2026.9.0
h11==0.16.0
hf-xet==1.8.0
httpcore==1.0.9
httpcore2==2.16.2
httpx==0.29.0
httpx2==2.16.2
huggingface-hub==0.34.6
humanize==4.17.0
idna==3.20
jax==0.6.2
jaxlib==0.6.2
Jinja2==3.1.6
jiter==0.19.0
libtpu==0.0.17.1
markdown-it-py==4.3.0
MarkupSafe==3.0.4
mdurl==0.1.2
ml_dtypes==0.7.0
modelscope==1.28.2
msgpack==1.2.4
msgpack-python==0.5.6
multidict==7.2.1
numpy==2.2.6
openai==3.60.0
opt_einsum==3.4.0
optax==0.2.8
orbax-checkpoint==0.12.8
orjson==3.11.9
packaging==26.4
pandas==3.1.1
pillow==11.3.0
prometheus_client==0.26.0
propcache==0.5.4
protobuf==7.36.2
psutil==7.0.0
pybase64==1.5.1
pydantic==2.11.10
pydantic_core==2.33.2
Pygments==2.21.0
python-dateutil==4.0.0
python-multipart==0.0.34
PyYAML==6.0.4
pyzmq==27.0.2
regex==2026.11.19
requests==2.32.5
rich==15.0.0
safetensors==0.6.2
scipy==1.17.1
setproctitle==1.3.8
sglang-jax==0.0.1.post1
simplejson==4.3.0
sniffio==1.3.1
starlette==0.48.0
tensorstore==0.1.86
tiktoken==0.14.0
tokenizers==0.21.4
tqdm==4.70.1
transformers==4.55.4
treescope==0.1.10
truststore==0.10.5
typing-inspection==0.4.2
typing_extensions==4.14.1
tzdata==2026.6
urllib3==2.8.0
uvicorn==0.35.0
uvloop==0.21.0
yarl==1.25.1
zipp==4.1.2
PINS

vpip=("$venv/bin/python" -m pip --disable-pip-version-check)
log "installing sglang-jax==$SGLJAX_VERSION (1-3 minutes, ~1.5 GB)"
"${vpip[@]}" install -q "pip==$PIP_VERSION" || die "could not install pip $PIP_VERSION in $venv"
"${vpip[@]}" install -q -c "$pins" "sglang-jax==$SGLJAX_VERSION" \
    || die "pip install sglang-jax==$SGLJAX_VERSION failed (see pip's output above)"

# No torch and no CUDA: transformers would hand sglang-jax torch dtypes (and a GPU build is gigabytes).
unwanted="$("${vpip[@]}" list --format=freeze 2>/dev/null | grep -iE '^(torch|nvidia-|jax-cuda|jax_cuda|jaxlib-cuda)' || true)"
[ -z "$unwanted" ] || die "unexpected packages in $venv: $(echo "$unwanted" | tr '\n' ' ')"

apply_patch

have="$(check_import)" || die "sgl_jax.launch_server does not import in $venv (see the traceback above)"
[ "$have" = "$SGLJAX_VERSION" ] || die "installed sglang-jax $have, wanted $SGLJAX_VERSION"
devices="$(JAX_PLATFORMS=cpu "$venv/bin/python" -c 'import jax; print(",".join(d.platform for d in jax.devices()))')" \
    || die "jax does not start on CPU in $venv"
[ "$devices" = cpu ] || die "JAX_PLATFORMS=cpu gave devices '$devices' in $venv, want one cpu device"
jax_version="$("$venv/bin/python" -c 'import jax; print(jax.__version__)')"

log "ok: sglang-jax $have (patched), jax $jax_version on cpu in $venv ($(du -sh "$venv" | cut -f1), $(( $(date +%s) - start )) s)"
