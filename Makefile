# Two entry points: `make demo` and `make test`. Both create .venv if needed.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_DATA := results/demo/data

SERVE_DIR ?= $(DEMO_DATA)
SERVE_BACKEND ?= http

.PHONY: demo test test-long test-gpu test-extended lint install clean servers system-packages

# The remote-data runs need ip and tc (iproute2) for their namespaces and links, and curl
# for webdataset's http:// shards.
system-packages:
	command -v ip >/dev/null && command -v tc >/dev/null && command -v curl >/dev/null || \
		(apt-get update -q && apt-get install -y -q iproute2 curl)

$(STAMP): setup.cfg pyproject.toml | system-packages
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	# mosaicml-streaming pins transformers<5 and numpy<2.2 (and cloud SDKs it imports only
	# for their URL schemes); it runs with this project's pins: installed without its
	# dependencies, with the compressors and registry it imports at start-up.
	$(PY) -m pip install -q --no-deps 'mosaicml-streaming==0.13.0'
	$(PY) -m pip install -q 'Brotli==1.2.1' 'python-snappy==0.7.3' 'zstd==1.5.7.2' 'catalogue==2.0.10'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	test -d $(DEMO_DATA) || $(PY) -m dsanalyze.cli make-dataset $(DEMO_DATA) --images 512 --classes 8 --size 500x375 --size-jitter 0.3 --seed 0
	$(PY) harness.py --config configs/demo.toml

# A directory served behind a shaped link until Ctrl-C: prints the endpoint a job needs.
# make servers SERVE_DIR=DIR SERVE_BACKEND=s3 NET_BW=4M NET_LATENCY=20ms
servers: $(STAMP)
	$(PY) -m dsanalyze.remote $(SERVE_DIR) --backend $(SERVE_BACKEND) \
		--net-bw $(or $(NET_BW),none) --net-latency $(or $(NET_LATENCY),0)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports  # the declared layers: pyproject.toml's [tool.importlinter]

# Two phases: the tests that fit a share of the CPUs on two pytest-xdist workers (each
# pinned to its own CPUs, tests/conftest.py), then those that need every CPU, alone (from
# the files that name the mark: collecting every file again costs 10 CPU-s; none found,
# every file). `make test` (within 10 minutes on 2 cores) leaves out the end-to-end runs
# marked long; `make test-long` runs those, the same two ways; CI (.ci/run) runs both.
WHOLE_MACHINE_TESTS = $(shell grep -l whole_machine tests/test_*.py)
LONG_WHOLE_MACHINE_TESTS = $(shell grep -l 'mark.long' $(WHOLE_MACHINE_TESTS))
test: lint
	$(PY) -m pytest -q -ra -n 2 --dist loadscope --no-loadscope-reorder -m 'not extended and not long and not whole_machine'
	$(PY) -m pytest -q -ra -m 'whole_machine and not extended and not long' $(WHOLE_MACHINE_TESTS)

test-long: $(STAMP)
	$(PY) -m pytest -q -ra -n 2 --dist loadscope --no-loadscope-reorder -m 'long and not extended and not whole_machine'
	$(PY) -m pytest -q -ra -m 'long and whole_machine and not extended' $(LONG_WHOLE_MACHINE_TESTS)

test-gpu: $(STAMP)
	$(PY) -m pytest -q -ra -m gpu tests/test_gpu.py

test-extended: $(STAMP)
	$(PY) -m pytest -q -ra -m extended

clean:
	rm -rf $(VENV) results/demo
