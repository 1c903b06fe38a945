# Two entry points: `make demo` and `make test`. Both create .venv if needed.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_DATA := results/demo/data

.PHONY: demo test test-gpu test-extended lint install clean

$(STAMP): setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	test -d $(DEMO_DATA) || $(PY) -m dsanalyze.cli make-dataset $(DEMO_DATA) --images 512 --classes 8 --size 500x375 --size-jitter 0.3 --seed 0
	$(PY) harness.py --config configs/demo.toml

lint: $(STAMP)
	$(VENV)/bin/ruff check .

test: lint
	$(PY) -m pytest -q -ra

test-gpu: $(STAMP)
	$(PY) -m pytest -q -ra -m gpu tests/test_gpu.py

test-extended: $(STAMP)
	$(PY) -m pytest -q -ra -m extended

clean:
	rm -rf $(VENV) results/demo
