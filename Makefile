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

.PHONY: install demo test lint services chromium clean

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

demo: install
	scripts/demo.sh

services:
	scripts/services.sh

chromium:
	@test -x /usr/bin/chromium || scripts/apt-install.sh chromium

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy flywheel trainer

test: install services chromium lint
	DATABASE_URL="$(TEST_DATABASE_URL)" CELERY_BROKER_URL="$(TEST_BROKER_URL)" \
		$(PY) -m pytest $(PYTEST_ARGS)

clean:
	rm -rf var static/vendor
