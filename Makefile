# The two quick-start commands are `make demo` and `make test`; everything else
# here is what they are made of.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
TOOLS  := .venv-tools
VENV   := .venv
export PATH := $(abspath $(TOOLS))/bin:$(PATH)

.PHONY: demo test wheels dev lint bench bench-peers clean release-check

$(TOOLS)/.ready: tools/requirements.txt
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/python -m pip install --quiet --upgrade pip
	$(TOOLS)/bin/python -m pip install --quiet -r tools/requirements.txt
	touch $@

wheels: $(TOOLS)/.ready
	$(TOOLS)/bin/python tools/build_wheels.py

$(VENV)/.ready:
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	touch $@

## The main job: build, install the `riftco` command, and run its demo.
demo: wheels $(VENV)/.ready
	$(VENV)/bin/python tools/install_package.py riftco
	$(VENV)/bin/riftco demo

## Every test: lint, cargo fmt + test + clippy, and one tox env per package.
test: wheels
	$(TOOLS)/bin/tox run

## An environment with every package and its test extras, for day-to-day work.
dev: wheels $(VENV)/.ready
	$(VENV)/bin/python tools/install_package.py --all --extra test
	$(VENV)/bin/python -m pip install --quiet hatchling editables
	for p in packages/*/; do grep -q 'hatchling.build' $$p/pyproject.toml && \
	  $(VENV)/bin/python -m pip install --quiet --no-deps --no-build-isolation -e $$p; done; true

bench: dev
	for b in bench/*.py; do $(VENV)/bin/python "$$b" || exit 1; done

## Decode and prefill side by side with llama.cpp (built once into
## ~/.cache/riftco/llamacpp from the llama-cpp-python sdist; minutes of compiling).
bench-peers: dev
	$(VENV)/bin/python -m pip install --quiet gguf
	$(VENV)/bin/python bench/bench_decode.py --build-peer

## Every sdist and wheel into dist/, checked as PyPI and a user would (twine, auditwheel,
## check-wheel-contents), then installed with no Rust and no index into a fresh venv
## that runs the quick demo and serves one request (tools/release_check.py).
RELEASE := .venv-release
$(RELEASE)/.ready: tools/requirements-release.txt
	$(PYTHON) -m venv $(RELEASE)
	$(RELEASE)/bin/python -m pip install --quiet --upgrade pip
	$(RELEASE)/bin/python -m pip install --quiet -r tools/requirements-release.txt
	touch $@

release-check: $(RELEASE)/.ready
	$(RELEASE)/bin/python tools/release_check.py

clean:
	rm -rf build target dist site .tox $(VENV) $(TOOLS) $(RELEASE) $(DOCS)

## The documentation site (mkdocs.yml): `make docs` builds it strictly into site/
## (open site/index.html); `make docs-serve` serves it on 127.0.0.1:8000, rebuilt on edits.
DOCS := .venv-docs
.PHONY: docs docs-serve

$(DOCS)/.ready: docs/requirements.txt
	$(PYTHON) -m venv $(DOCS)
	$(DOCS)/bin/python -m pip install --quiet --upgrade pip
	$(DOCS)/bin/python -m pip install --quiet -r docs/requirements.txt
	touch $@

docs: $(DOCS)/.ready
	NO_MKDOCS_2_WARNING=1 $(DOCS)/bin/mkdocs build --strict

docs-serve: $(DOCS)/.ready
	NO_MKDOCS_2_WARNING=1 $(DOCS)/bin/mkdocs serve
