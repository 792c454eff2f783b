# The two quick-start commands are `make demo` and `make test`; everything else
# here is what they are made of.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
TOOLS  := .venv-tools
VENV   := .venv
export PATH := $(abspath $(TOOLS))/bin:$(PATH)

.PHONY: demo test wheels dev lint bench bench-peers clean release-check capi capi-header capi-test

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

## libriftco, the C ABI: the shared and static library, riftco.h, riftco.pc and the C
## examples, staged in build/capi/{lib,include,lib/pkgconfig,bin}.
CAPI     := build/capi
CC       ?= cc
CXX      ?= c++
CAPI_LIBS := -pthread -ldl -lm
capi:
	cargo build --release -p riftco-capi
	mkdir -p $(CAPI)/lib/pkgconfig $(CAPI)/include $(CAPI)/bin
	cp target/release/libriftco.so target/release/libriftco.a $(CAPI)/lib/
	cp packages/capi/include/riftco.h $(CAPI)/include/
	v=$$(sed -n 's/^#define RIFTCO_ABI_VERSION_MAJOR \([0-9]*\)/\1/p' packages/capi/include/riftco.h).$$(sed -n 's/^#define RIFTCO_ABI_VERSION_MINOR \([0-9]*\)/\1/p' packages/capi/include/riftco.h).0; \
	  sed "s/@VERSION@/$$v/" packages/capi/riftco.pc.in > $(CAPI)/lib/pkgconfig/riftco.pc
	$(CC) -std=c11 -O2 -Wall -Wextra -Werror -I$(CAPI)/include examples/c/chat.c $(CAPI)/lib/libriftco.a $(CAPI_LIBS) -o $(CAPI)/bin/chat
	$(CXX) -std=c++17 -O2 -Wall -Wextra -Werror -I$(CAPI)/include examples/c/hello.cpp $(CAPI)/lib/libriftco.a $(CAPI_LIBS) -o $(CAPI)/bin/hello
	$(CC) -std=c11 -O2 -Wall -Wextra -Werror -I$(CAPI)/include bench/bench_capi.c $(CAPI)/lib/libriftco.a $(CAPI_LIBS) -o $(CAPI)/bin/bench_capi

## Rewrite packages/capi/include/riftco.h from the sources (cargo test checks it).
capi-header:
	RIFTCO_WRITE_HEADER=1 cargo test -q -p riftco-capi --test header

## The C tests against the static library, once plain and once under AddressSanitizer
## (LeakSanitizer included), then the header check and the ctypes parity tests.
capi-test: capi
	$(CC) -std=c11 -O1 -g -Wall -Wextra -Werror -I$(CAPI)/include packages/capi/tests/c/test_capi.c $(CAPI)/lib/libriftco.a $(CAPI_LIBS) -o $(CAPI)/bin/test_capi
	$(CC) -std=c11 -O1 -g -fsanitize=address -fno-omit-frame-pointer -I$(CAPI)/include packages/capi/tests/c/test_capi.c $(CAPI)/lib/libriftco.a $(CAPI_LIBS) -o $(CAPI)/bin/test_capi_asan
	mkdir -p $(CAPI)/scratch
	for f in packages/capi/tests/fixtures/*.rift; do \
	  $(CAPI)/bin/test_capi $$f $(CAPI)/scratch || exit 1; \
	  ASAN_OPTIONS=detect_leaks=1 $(CAPI)/bin/test_capi_asan $$f $(CAPI)/scratch || exit 1; \
	done
	$(CC) -std=c11 -O1 -g -Wall -Wextra -Werror -I$(CAPI)/include packages/capi/tests/c/test_tokenizer.c $(CAPI)/lib/libriftco.a $(CAPI_LIBS) -o $(CAPI)/bin/test_tokenizer
	$(CC) -std=c11 -O1 -g -fsanitize=address -fno-omit-frame-pointer -I$(CAPI)/include packages/capi/tests/c/test_tokenizer.c $(CAPI)/lib/libriftco.a $(CAPI_LIBS) -o $(CAPI)/bin/test_tokenizer_asan
	$(CAPI)/bin/test_tokenizer && ASAN_OPTIONS=detect_leaks=1 $(CAPI)/bin/test_tokenizer_asan
	cargo test -q -p riftco-capi
	RIFTCO_CAPI_REQUIRED=1 RIFTCO_CAPI_LIB=$(abspath $(CAPI))/lib/libriftco.so $(VENV)/bin/python -m pytest -q packages/capi/tests -p no:cacheprovider
