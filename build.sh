#!/usr/bin/env bash
# Set-up for softmax-lab: installs only what is missing, builds the CUDA extension lab._C, and
# says what it did. Safe to run again: it does nothing when nothing changed. Works offline when
# torch and triton are already installed (as on the GPU machines). It never fails the set-up over
# what this machine cannot do (no nvcc, a CPU-only torch): it says so, and the lab runs without it.
set -uo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-$(command -v python || command -v python3)}  # the python of `python -m lab.test`
TORCH_PIN=${TORCH_PIN:-torch==2.11.0}   # the CUDA 13.0 build, as on the H200 machines

say() { printf 'build.sh: %s\n' "$*"; }
has_module() { "$PY" -c "import $1" >/dev/null 2>&1; }
pip_install() {
  say "installing $* ..."
  if "$PY" -m pip install -q "$@" >/tmp/softmax-lab-pip.log 2>&1; then say "installed $*"
  else say "could not install $* (offline?): see /tmp/softmax-lab-pip.log"; return 1; fi
}

# 1. Python packages, each only if missing.
has_module torch || pip_install "$TORCH_PIN" || { say "torch is required and could not be installed"; exit 1; }
has_module triton || pip_install triton || say "triton missing: the Triton variants will be listed as skipped"
without() {  # what the lab does without an optional package
  case "$1" in
    numpy) echo "torch and the Triton interpreter need it" ;;
    pytest) echo "\`python -m pytest\` cannot run" ;;
    ninja) echo "the extension builds one file at a time" ;;
    matplotlib) echo "results are saved without plots" ;;
    ruff) echo "the lint test is skipped" ;;
    rich) echo "a terminal gets plain tables and no progress bar" ;;
  esac
}
for pkg in numpy pytest ninja matplotlib ruff rich; do
  has_module "$pkg" || pip_install "$pkg" || say "$pkg missing: $(without "$pkg")"
done

# 2. Without a GPU the Triton kernels run under TRITON_INTERPRET=1, which in triton 3.6 needs
#    numpy < 2.3 (newer numpy breaks loops with run-time bounds). GPU machines are left alone.
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  if ! "$PY" -c "
import sys, numpy, triton
major, minor = (int(v) for v in numpy.__version__.split('.')[:2])
tv = tuple(int(v) for v in triton.__version__.split('.')[:2])
sys.exit(0 if (major, minor) < (2, 3) or tv >= (3, 9) else 1)" 2>/dev/null; then
    if has_module triton; then pip_install "numpy<2.3" || say "the Triton interpreter may fail with this numpy"; fi
  fi
fi

# 3. The package itself, installed editable (`pip install --no-build-isolation -e .`), so that `import lab`
#    and `softmax-lab` work from any folder; pip builds the CUDA extension lab._C with it where it can.
#    pip needs setuptools >= 70.1 or the wheel package for that; without either (offline), the extension
#    is built in place by setup.py alone and the package is used from this folder.
if [ -z "${CUDA_HOME:-}" ] && [ -x /usr/local/cuda/bin/nvcc ]; then export CUDA_HOME=/usr/local/cuda; fi
NVCC=${CUDA_HOME:+$CUDA_HOME/bin/}nvcc
if ! "$PY" -c "import setuptools, sys; sys.exit(0 if tuple(map(int, setuptools.__version__.split('.')[:2])) >= (70, 1) else 1)" \
    2>/dev/null && ! has_module wheel; then
  pip_install wheel || say "no wheel package: the package is not installed with pip (used from this folder)"
fi
install_package() {  # pip's editable install (builds the extension when nvcc is here), else setup.py in place
  if "$PY" -m pip install --no-build-isolation --no-deps -e . >build.log 2>&1; then return 0; fi
  say "pip install -e . failed (see build.log); building in place with setup.py instead"
  "$PY" setup.py build_ext --inplace >>build.log 2>&1
}
installed=build/softmax-lab.installed
points_here() {  # `import lab` from another folder finds this checkout (not another clone installed since)
  [ "$(cd / && "$PY" -c 'import os, lab; print(os.path.dirname(os.path.realpath(lab.__file__)))' 2>/dev/null)" \
    = "$(realpath lab)" ]
}
if ! command -v "$NVCC" >/dev/null 2>&1 || [ "$("$PY" -c 'import torch; print(torch.version.cuda or "")')" = "" ]; then
  if command -v "$NVCC" >/dev/null 2>&1; then why="torch is a CPU-only build (install a CUDA build of torch)"
  else why="no nvcc found (set CUDA_HOME to build them)"; fi
  if [ ! -f "$installed" ] || ! points_here; then
    mkdir -p build && "$PY" -m pip install --no-build-isolation --no-deps -e . >build.log 2>&1 && touch "$installed"
  fi
  say "the CUDA variants are not built: $why"; exit 0
fi

stamp=build/softmax-lab.stamp
state=$( { cat setup.py pyproject.toml; find csrc -type f | sort; find csrc -type f | sort | xargs cat; \
           echo "${CUDA_ARCH:-}|${TORCH_CUDA_ARCH_LIST:-}|${DEBUG:-}|${LAB_OPS:-}"; "$PY" -c 'import torch; print(torch.__version__)'; } \
         | sha256sum | cut -d' ' -f1)
if ls lab/_C*.so >/dev/null 2>&1 && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$state" ]; then
  if points_here; then say "lab._C is up to date ($(ls lab/_C*.so))"; exit 0; fi
  say "the installed package is another checkout's: installing this one (editable)..."
fi
say "building lab._C with $("$NVCC" --version | tail -1) (arch ${CUDA_ARCH:-${TORCH_CUDA_ARCH_LIST:-sm_90}}), installing the package..."
start=$SECONDS
export MAX_JOBS=${MAX_JOBS:-$(nproc)}
if install_package && ls lab/_C*.so >/dev/null 2>&1; then
  mkdir -p build && echo "$state" >"$stamp" && touch "$installed"
  say "built $(ls lab/_C*.so) in $((SECONDS - start)) s (log: build.log)"
else
  # The cause, not pip's or setuptools' traceback: the compiler's first error line.
  first=$(grep -m1 -E '(#error|error:|fatal error|Error:)' build.log | cut -c1-400)
  say "the CUDA extension failed to build: ${first:-no compiler error in the log; its end:}"
  [ -n "$first" ] || tail -15 build.log
  say "full log: build.log"; exit 1
fi
