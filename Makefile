# hooklint's two entry points: `make demo` and `make test` (README, Quick start).
# Both create .venv, install CPU torch 2.13.0, hooklint and its test
# dependencies, then run hooklint on the fixtures / the whole test suite.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of torch, named explicitly: a bare `torch` requirement would
# pull the newest CUDA build (several GB).  On a machine without a local copy
# of this wheel, point pip at PyTorch's CPU index:
#   make test TORCH_INDEX=https://download.pytorch.org/whl/cpu
TORCH_SPEC ?= torch==2.13.0+cpu
TORCH_INDEX ?=
PIP_TORCH_FLAGS := $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX),)
STAMP := $(VENV)/.hooklint-installed
PYTEST_ARGS ?=

.PHONY: demo test setup docs bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check $(PIP_TORCH_FLAGS) "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e ".[test]"
	touch $(STAMP)

# Findings are expected here (the fixtures are bad on purpose): exit 1 is the
# demo working; exit 2 (an error) fails it.
demo: $(STAMP)
	$(BIN)/hooklint check fixtures/ || [ $$? -eq 1 ]

# The HTML report test (tests/integrations/test_html_report.py) opens the
# report in real headless Chromium: Debian's package, installed when missing,
# as root (CI) or through password-less sudo.  Without either, the install is
# skipped with a note and so is that one test, except on CI (CI set), where a
# missing Chromium fails.  CHROMIUM names another Chromium binary.
CHROMIUM ?= /usr/bin/chromium

test: $(STAMP) $(CHROMIUM)
	CHROMIUM=$(CHROMIUM) $(BIN)/python -m pytest $(PYTEST_ARGS)

$(CHROMIUM):
	@if [ "$$(id -u)" = 0 ]; then SUDO=; elif sudo -n true 2>/dev/null; then SUDO="sudo -n"; \
	elif [ -n "$$CI" ]; then echo "make: Chromium is missing and CI is set: install it (apt-get install chromium) as root" >&2; exit 1; \
	else echo "make: Chromium not installed (needs root or sudo: apt-get install chromium); the HTML report test will be skipped" >&2; exit 0; fi; \
	$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium

docs: $(STAMP)
	$(BIN)/python -m hooklint.docs

bench: $(STAMP)
	$(BIN)/python bench/static_throughput.py

clean:
	rm -rf $(VENV) .hooklint_cache build dist *.egg-info
