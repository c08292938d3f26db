#!/usr/bin/env bash
# Create a CPU-only reference environment holding SGLang's own command-line code, for the simulator's
# contract tests and for scripts/gen_sim_flags.py (no server runs from it: it has no GPU stack).
#
#   SGLANG_VERSION  0.5.23 (default), 0.5.17 (the lent GPU machine's: scripts/gpu_sglang.sh) or 0.5.6
#   SGLANG_VENV     where the environment goes (default: .venv-sglang for 0.5.23, .venv-sglang0517 for
#                   0.5.17, .venv-sglang056 for 0.5.6, in the repository root)
#   PYTHON          the interpreter to build it from (default: python3.11, else python3)
#
#   bash scripts/setup_sglang_ref.sh                       # .venv-sglang     (0.5.23)
#   SGLANG_VERSION=0.5.17 bash scripts/setup_sglang_ref.sh # .venv-sglang0517 (0.5.17)
#   SGLANG_VERSION=0.5.6 bash scripts/setup_sglang_ref.sh  # .venv-sglang056  (0.5.6)
#
# Idempotent: an environment that already passes the checks below for the wanted version is left alone.
#
# What it holds: `sglang==X --no-deps`, and only the packages that these import at module level:
#   * `sglang.srt.server_args` (ServerArgs.add_cli_args, prepare_server_args), as `launch_server` builds it,
#   * the `--config` merger (0.5.23: sglang/srt/utils/server_args_config_parser.py;
#     0.5.17 and 0.5.6: sglang/srt/server_args_config_parser.py),
#   * `python -m sglang.bench_serving --help`.
# torch is the CPU build on this machine's disk (torch==2.13.0+cpu, /opt/wheels); SGLang pins another torch
# (0.5.23: 2.14.1, 0.5.17: 2.11.0, 0.5.6: 2.9.1) but its parser and client do not care. triton is real (0.5.23's
# sglang/srt/utils/common.py, imported by `import sglang`, does `import triton` at module level).
#
# The one shim: a torchvision stand-in. The registry's torchvision wheels are CUDA builds whose `_C.so`
# needs libtorch_cuda.so, so `import torchvision` dies beside CPU torch ("operator torchvision::nms does
# not exist"), and no CPU build is reachable. SGLang imports torchvision at module level only on paths the
# parser does not use: sglang/srt/multimodal/internvl_utils.py (`torchvision.transforms`,
# `InterpolationMode`), reached through sglang/srt/configs/__init__.py; 0.5.6's server_args.py reaches it
# (server_args -> utils/hf_transformers_utils -> configs -> nano_nemotron_vl -> internvl_utils), 0.5.23's
# server_args does not (only bench_serving does, through its datasets). transformers, once it finds a
# `torchvision` module, imports a few more names (torchvision.io, transforms.v2.functional, ...).
# The stand-in lives in $venv/sglang-ref-shims/torchvision (one `.pth` line puts that folder on sys.path;
# no dist-info, so pip and importlib.metadata do not list it): InterpolationMode and ImageReadMode are the
# real enums; every other name is a placeholder that raises RuntimeError when called or touched. Nothing
# in any parser reads torchvision (the contract tests build 0.5.23's table with torchvision blocked and
# compare); image/video processing in this environment fails loudly, which nothing here needs.
set -euo pipefail

SGLANG_VERSION="${SGLANG_VERSION:-0.5.23}"
PIP_VERSION="26.3"
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

die() { echo "setup_sglang_ref: error: $*" >&2; exit 1; }
log() { echo "setup_sglang_ref: $*" >&2; }

case "$SGLANG_VERSION" in
    0.5.23) default_venv="$repo_root/.venv-sglang" ;;
    0.5.17) default_venv="$repo_root/.venv-sglang0517" ;;
    0.5.6) default_venv="$repo_root/.venv-sglang056" ;;
    *) die "SGLANG_VERSION=$SGLANG_VERSION is not supported (0.5.23, 0.5.17 or 0.5.6)" ;;
esac
venv="${SGLANG_VENV:-$default_venv}"
case "$venv" in /*) ;; *) venv="$repo_root/$venv" ;; esac

check_env() {
    # Prints sglang's version and exits 0 when the parser, the config merger and bench_serving import.
    "$venv/bin/python" - "$SGLANG_VERSION" <<'EOF' || return 1
import argparse, importlib, importlib.metadata as md, runpy, sys, contextlib, io
want = sys.argv[1]
from sglang.srt.server_args import ServerArgs, prepare_server_args  # noqa: F401
parser = argparse.ArgumentParser()
ServerArgs.add_cli_args(parser)
importlib.import_module("sglang.srt.utils.server_args_config_parser" if want == "0.5.23"
                        else "sglang.srt.server_args_config_parser")
sys.argv = ["bench_serving", "--help"]
with contextlib.redirect_stdout(io.StringIO()):
    try:
        runpy.run_module("sglang.bench_serving", run_name="__main__")
    except SystemExit as e:
        if e.code not in (0, None):
            raise
print(md.version("sglang"))
EOF
}

if [ -x "$venv/bin/python" ] && have="$(check_env 2>/dev/null)"; then
    if [ "$have" = "$SGLANG_VERSION" ]; then
        log "$venv already holds sglang $have (parser, --config merger, bench_serving import); nothing to do"
        exit 0
    fi
    log "$venv has sglang $have, want $SGLANG_VERSION; rebuilding it"
fi

py="${PYTHON:-}"
if [ -z "$py" ]; then
    py="$(command -v python3.11 || command -v python3 || true)"
fi
[ -n "$py" ] || die "no python3 found (set PYTHON)"
command -v "$py" >/dev/null 2>&1 || die "python interpreter $py not found (set PYTHON)"
"$py" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' \
    || die "$py is not Python 3.11 (the torch CPU wheel on disk is cp311; set PYTHON)"

start=$(date +%s)
if [ -f "$venv/pyvenv.cfg" ]; then
    log "recreating $venv with $py (it exists but does not pass the checks for sglang $SGLANG_VERSION)"
    "$py" -m venv --clear "$venv" || die "could not recreate the virtual environment $venv"
elif [ -e "$venv" ] && [ -n "$(ls -A "$venv" 2>/dev/null)" ]; then
    die "$venv exists and is not a virtual environment; remove it or set SGLANG_VENV elsewhere"
else
    log "creating $venv with $py"
    "$py" -m venv "$venv" || die "could not create the virtual environment $venv"
fi
# Keep git away from it without touching the repository's .gitignore (Python 3.13's venv does the same).
echo '*' > "$venv/.gitignore"

pins="$(mktemp)"
trap 'rm -f "$pins"' EXIT
# The packages each version's parser, --config merger and bench_serving import (module level), and
# every package of a working environment, pinned: `pip freeze` of one this script made (2026-12), less
# pip, setuptools and sglang itself. To refresh: drop the -c below, install, run the checks, paste
# `$venv/bin/python -m pip freeze` here.
case "$SGLANG_VERSION" in
0.5.23)
    # Where sglang 0.5.23 pins a version, that version (transformers, tokenizers, compressed-tensors, ...).
    packages=(torch==2.13.0 triton numpy orjson psutil pybase64 requests packaging pillow starlette msgspec
              pydantic pyzmq tqdm IPython aiohttp PyYAML transformers==5.19.0 tokenizers==0.23.2 datasets
              apache-tvm-ffi==0.1.11 sentencepiece==0.2.1 compressed-tensors==0.18.0 gguf)
    cat > "$pins" <<'PINS'
aiohappyeyeballs==2.7.1
aiohttp==3.14.5
aiosignal==1.4.0
annotated-doc==0.0.7
annotated-types==0.8.0
anyio==4.16.0
apache-tvm-ffi==0.1.11
asttokens==3.0.2
attrs==26.1.0
certifi==2026.10.19.post1
charset-normalizer==3.5.3
click==8.5.1
compressed-tensors==0.18.0
datasets==5.2.0
dill==0.4.1
executing==2.3.0
filelock==4.3.2
frozenlist==1.8.0
fsspec==2026.9.0
gguf==0.19.0
h11==0.16.0
hf-xet==1.8.0
httpcore==1.0.9
httpx==0.29.0
huggingface_hub==1.33.0
idna==3.20
ipython==9.18.1
ipython_pygments_lexers==1.1.1
jedi==0.20.1
Jinja2==3.1.6
loguru==0.7.3
markdown-it-py==4.3.0
MarkupSafe==3.0.4
matplotlib-inline==0.2.2
mdurl==0.1.2
mpmath==1.3.0
msgspec==0.23.0
multidict==7.2.1
multiprocess==0.70.19
networkx==3.6.1
numpy==2.4.6
orjson==3.13.0
packaging==26.4
pandas==3.1.1
parso==0.8.7
pexpect==4.9.0
pillow==13.0.0
prompt_toolkit==3.0.53
propcache==0.5.4
psutil==7.2.2
ptyprocess==0.7.0
pure_eval==0.2.4
pyarrow==26.0.1
pybase64==1.5.1
pydantic==2.14.4
pydantic_core==2.50.5
Pygments==2.21.0
python-dateutil==4.0.0
PyYAML==6.0.4
pyzmq==27.3.0
regex==2026.11.19
requests==2.34.2
rich==15.0.0
safetensors==0.8.0
sentencepiece==0.2.1
shellingham==1.5.4
stack-data==0.6.3
starlette==1.10.0
sympy==1.14.0
tokenizers==0.23.2
torch==2.13.0+cpu
tqdm==4.70.1
traitlets==5.16.1
transformers==5.19.0
triton==3.9.0
typer==0.29.2
typing-inspection==0.4.5
typing_extensions==4.16.0
tzdata==2026.6
urllib3==2.8.0
wcwidth==0.9.4
xxhash==4.1.0
yarl==1.25.1
PINS
    ;;
0.5.17)
    # Where sglang 0.5.17 pins a version, that version (transformers 5.12.1 and the tokenizers it takes).
    # openai, partial_json_parser and xgrammar: its server_args imports them through the function-call
    # parsers and the grammar backend, einops through bench_serving (0.5.23 imports none of them there).
    packages=(torch==2.13.0 triton numpy orjson psutil pybase64 requests packaging pillow starlette msgspec
              pydantic pyzmq tqdm IPython aiohttp PyYAML transformers==5.12.1 tokenizers==0.22.2 datasets
              apache-tvm-ffi==0.1.11 sentencepiece compressed-tensors gguf openai==2.6.1 partial_json_parser
              xgrammar==0.2.1 einops)
    cat > "$pins" <<'PINS'
aiohappyeyeballs==2.7.1
aiohttp==3.14.5
aiosignal==1.4.0
annotated-doc==0.0.7
annotated-types==0.8.0
anyio==4.16.0
apache-tvm-ffi==0.1.11
asttokens==3.0.2
attrs==26.1.0
certifi==2026.10.19.post1
charset-normalizer==3.5.3
click==8.5.1
compressed-tensors==0.20.1
datasets==5.2.0
einops==0.8.2
dill==0.4.1
distro==1.9.0
executing==2.3.0
filelock==4.3.2
frozenlist==1.8.0
fsspec==2026.9.0
gguf==0.19.0
h11==0.16.0
hf-xet==1.8.0
httpcore==1.0.9
httpx==0.29.0
huggingface_hub==1.33.0
idna==3.21
ipython==9.19.1
ipython_pygments_lexers==1.1.1
jedi==0.20.1
Jinja2==3.1.6
jiter==0.19.0
loguru==0.7.3
markdown-it-py==4.3.0
MarkupSafe==3.0.4
matplotlib-inline==0.2.2
mdurl==0.1.2
mpmath==1.3.0
msgspec==0.23.0
multidict==7.2.1
multiprocess==0.70.19
networkx==3.6.1
numpy==2.4.6
openai==2.6.1
orjson==3.13.0
packaging==26.4
pandas==3.1.1
parso==0.8.7
partial-json-parser==0.2.1.1.post7
pexpect==4.9.0
pillow==13.0.0
prompt_toolkit==3.0.53
propcache==0.5.4
psutil==7.2.2
ptyprocess==0.7.0
pure_eval==0.2.4
pyarrow==26.0.1
pybase64==1.5.1
pydantic==2.14.4
pydantic_core==2.50.5
Pygments==2.21.0
python-dateutil==4.0.0
PyYAML==6.0.4
pyzmq==27.3.0
regex==2026.12.2
requests==2.34.2
rich==15.0.0
safetensors==0.8.0
sentencepiece==0.2.3
shellingham==1.5.4
sniffio==1.3.1
stack-data==0.6.3
starlette==1.10.0
sympy==1.14.0
tokenizers==0.22.2
torch==2.13.0+cpu
tqdm==4.70.1
traitlets==5.16.1
transformers==5.12.1
triton==3.9.0
typer==0.29.2
typing-inspection==0.4.5
typing_extensions==4.16.0
tzdata==2026.6
urllib3==2.8.0
wcwidth==0.9.5
xgrammar==0.2.1
xxhash==4.1.0
yarl==1.25.1
PINS
    ;;
0.5.6)
    # Where sglang 0.5.6 pins a version, that version (transformers 4.57.1: 5.x breaks its configs).
    packages=(torch==2.13.0 triton numpy orjson pybase64 requests packaging pillow pydantic pyzmq tqdm IPython
              aiohttp PyYAML safetensors fastapi openai==2.6.1 partial_json_parser huggingface_hub
              transformers==4.57.1 dill sentencepiece datasets)
    cat > "$pins" <<'PINS'
aiohappyeyeballs==2.7.1
aiohttp==3.14.5
aiosignal==1.4.0
annotated-doc==0.0.7
annotated-types==0.8.0
anyio==4.16.0
asttokens==3.0.2
attrs==26.1.0
certifi==2026.10.19.post1
charset-normalizer==3.5.3
datasets==5.0.1
dill==0.4.1
distro==1.9.0
executing==2.3.0
fastapi==0.165.0
filelock==4.3.2
frozenlist==1.8.0
fsspec==2026.6.0
h11==0.16.0
hf-xet==1.8.0
httpcore==1.0.9
httpx==0.29.0
huggingface_hub==0.36.2
idna==3.20
ipython==9.18.1
ipython_pygments_lexers==1.1.1
jedi==0.20.1
Jinja2==3.1.6
jiter==0.19.0
MarkupSafe==3.0.4
matplotlib-inline==0.2.2
mpmath==1.3.0
multidict==7.2.1
multiprocess==0.70.19
networkx==3.6.1
numpy==2.4.6
openai==2.6.1
opentelemetry-api==1.45.2
orjson==3.13.0
packaging==26.4
pandas==3.1.1
parso==0.8.7
partial-json-parser==0.2.1.1.post7
pexpect==4.9.0
pillow==13.0.0
prompt_toolkit==3.0.53
propcache==0.5.4
psutil==7.2.2
ptyprocess==0.7.0
pure_eval==0.2.4
pyarrow==26.0.1
pybase64==1.5.1
pydantic==2.14.4
pydantic_core==2.50.5
Pygments==2.21.0
python-dateutil==4.0.0
PyYAML==6.0.4
pyzmq==27.3.0
regex==2026.11.19
requests==2.34.2
safetensors==0.8.0
sentencepiece==0.2.3
sniffio==1.3.1
stack-data==0.6.3
starlette==1.10.0
sympy==1.14.0
tokenizers==0.22.2
torch==2.13.0+cpu
tqdm==4.70.1
traitlets==5.16.1
transformers==4.57.1
triton==3.9.0
typing-inspection==0.4.5
typing_extensions==4.16.0
tzdata==2026.6
urllib3==2.8.0
wcwidth==0.9.4
xxhash==4.1.0
yarl==1.25.1
PINS
    ;;
esac

vpip=("$venv/bin/python" -m pip --disable-pip-version-check)
"${vpip[@]}" install -q "pip==$PIP_VERSION" >/dev/null || die "could not install pip $PIP_VERSION in $venv"
log "installing sglang==$SGLANG_VERSION --no-deps"
"${vpip[@]}" install -q -c "$pins" --no-deps "sglang==$SGLANG_VERSION" \
    || die "pip install --no-deps sglang==$SGLANG_VERSION failed"
log "installing what its parser, --config merger and bench_serving import: ${packages[*]}"
"${vpip[@]}" install -q -c "$pins" "${packages[@]}" \
    || die "pip install of sglang $SGLANG_VERSION's parser dependencies failed (torch==2.13.0+cpu must be reachable: it lies in /opt/wheels here)"

# -- the torchvision stand-in (see the header) ---------------------------------------------------------
shims="$venv/sglang-ref-shims"
rm -rf "$shims"
mkdir -p "$shims/torchvision/transforms/v2" "$shims/torchvision/io" "$shims/torchvision/ops"
cat > "$shims/torchvision/_standin.py" <<'EOF'
"""torchvision stand-in of scripts/setup_sglang_ref.sh: the registry's torchvision cannot load beside CPU
torch, and SGLang's parser never uses it; SGLang and transformers only import it at module level."""


class Unavailable:
    def __init__(self, name):
        self._name = name

    def _fail(self, *args, **kwargs):
        raise RuntimeError(f"{self._name} is not available: torchvision here is an import-only stand-in "
                           "(scripts/setup_sglang_ref.sh)")

    __call__ = _fail

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        self._fail()

    def __mro_entries__(self, bases):
        self._fail()


def module_getattr(module):
    def __getattr__(name):
        if name.startswith("__"):
            raise AttributeError(name)
        return Unavailable(f"{module}.{name}")
    return __getattr__
EOF
cat > "$shims/torchvision/__init__.py" <<'EOF'
"""Import-only torchvision stand-in (scripts/setup_sglang_ref.sh); not a real torchvision."""
from torchvision._standin import module_getattr
from torchvision import io, ops, transforms  # noqa: F401

__version__ = "0.0.0+standin"
__getattr__ = module_getattr("torchvision")
EOF
cat > "$shims/torchvision/transforms/__init__.py" <<'EOF'
from torchvision._standin import module_getattr
from torchvision.transforms import functional, v2  # noqa: F401
from torchvision.transforms.functional import InterpolationMode  # noqa: F401

__getattr__ = module_getattr("torchvision.transforms")
EOF
cat > "$shims/torchvision/transforms/functional.py" <<'EOF'
from enum import Enum

from torchvision._standin import module_getattr


class InterpolationMode(Enum):  # torchvision's own values
    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


__getattr__ = module_getattr("torchvision.transforms.functional")
EOF
cat > "$shims/torchvision/transforms/v2/__init__.py" <<'EOF'
from torchvision._standin import module_getattr
from torchvision.transforms.v2 import functional  # noqa: F401

__getattr__ = module_getattr("torchvision.transforms.v2")
EOF
cat > "$shims/torchvision/transforms/v2/functional.py" <<'EOF'
from torchvision._standin import module_getattr

__getattr__ = module_getattr("torchvision.transforms.v2.functional")
EOF
cat > "$shims/torchvision/io/__init__.py" <<'EOF'
from enum import Enum

from torchvision._standin import module_getattr


class ImageReadMode(Enum):  # torchvision's own values
    UNCHANGED = 0
    GRAY = 1
    GRAY_ALPHA = 2
    RGB = 3
    RGB_ALPHA = 4
    RGBA = RGB_ALPHA


__getattr__ = module_getattr("torchvision.io")
EOF
cat > "$shims/torchvision/ops/__init__.py" <<'EOF'
from torchvision._standin import module_getattr
from torchvision.ops import boxes  # noqa: F401

__getattr__ = module_getattr("torchvision.ops")
EOF
cat > "$shims/torchvision/ops/boxes.py" <<'EOF'
from torchvision._standin import module_getattr

__getattr__ = module_getattr("torchvision.ops.boxes")
EOF
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$shims" > "$site/sglang-ref-shims.pth"

torch_version="$("$venv/bin/python" -c 'import torch; print(torch.__version__)')" \
    || die "torch does not import in $venv"
have="$(check_env)" || die "sglang $SGLANG_VERSION's parser, --config merger or bench_serving does not import in $venv (see the traceback above)"
[ "$have" = "$SGLANG_VERSION" ] || die "installed sglang $have, wanted $SGLANG_VERSION"

log "ok: sglang $have, torch $torch_version in $venv ($(du -sh "$venv" | cut -f1), $(( $(date +%s) - start )) s)"
