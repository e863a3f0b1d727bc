# One entry point for everything: `make run` (the main job, locally) and `make test`.
# Both create .venv from the pinned lock file when it is missing or stale.

PYTHON_BOOTSTRAP ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test test-launcher test-tensorflow test-xla lint bench lock clean

$(STAMP): requirements/dev.lock pyproject.toml
	test -x $(PY) || $(PYTHON_BOOTSTRAP) -m venv $(VENV)
	$(PY) -m pip install --quiet --no-cache-dir --disable-pip-version-check -r requirements/dev.lock
	$(PY) -m pip install --quiet --no-cache-dir --disable-pip-version-check --no-deps -e .
	touch $@

venv: $(STAMP)

## run: the main job locally: the launcher detects "no platform", picks the XLA CPU device
## and execs the MNIST trainer briefly (one short epoch; outputs in runs/mnist-DATE).
RUN_ARGS ?= --fake_data --num_epochs=1 --num_steps=100 --log_steps=25 --job-dir=runs/mnist-$$(date +%Y%m%d-%H%M%S)
run: $(STAMP)
	$(PY) -m launcher -- $(RUN_ARGS)

## test: the whole suite. TensorFlow and torch_xla abort when loaded into one process, so
## they never share a pytest session: launcher tests (TensorFlow only in subprocesses), the
## tests that drive TensorFlow's resolver in-process, then the trainer tests (torch_xla).
test: $(STAMP)
	$(PY) -m pytest tests/launcher -m "not tensorflow"
	$(PY) -m pytest tests/launcher -m tensorflow
	$(PY) -m pytest tests/trainer

bench: $(STAMP)
	$(PY) bench/launcher.py
	$(PY) bench/trainer.py

## lock: re-resolve requirements/dev.in into requirements/dev.lock.
lock:
	rm -rf /tmp/lock-venv && $(PYTHON_BOOTSTRAP) -m venv /tmp/lock-venv
	/tmp/lock-venv/bin/pip install --quiet --no-cache-dir -r requirements/dev.in
	( echo "# Fully pinned resolution of requirements/dev.in for Python 3.11 (\`make lock\` regenerates it)."; \
	  /tmp/lock-venv/bin/pip freeze ) > requirements/dev.lock

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
