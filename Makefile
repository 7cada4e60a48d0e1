# The README's commands. Each target sets up what it needs, so a fresh clone runs with one command.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
NODE_STAMP := node_modules/.installed
HOST   ?= 127.0.0.1
PORT   ?= 8000

.PHONY: run test test-unit test-load test-stress lint fmt bench bundle bundle-check clean tools-schema chromium

# Some shells export PYTHONDONTWRITEBYTECODE: every run would then compile (and pytest
# assertion-rewrite) every module again, which doubled the suite's start-up.
unexport PYTHONDONTWRITEBYTECODE

$(STAMP): requirements.txt requirements-dev.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements-dev.txt
	$(BIN)/pip install --quiet --no-deps -e .
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/python -m aircoach serve --host $(HOST) --port $(PORT)

test: $(STAMP) $(BIN)/uv $(NODE_STAMP) chromium
	$(BIN)/python -m pytest -n 2

# tests/deploy runs the pinned npm tools (serverless package, vercel build) and Vercel's Python
# builder, which needs uv on PATH (its own pin: @vercel/python's UV_VERSION).
$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund
	touch $(NODE_STAMP)

$(BIN)/uv: $(STAMP)
	$(BIN)/pip install --quiet uv==0.10.11

# tests/browser drives Debian's chromium (`playwright install` cannot download a browser
# here): installed with apt when missing; CHROMIUM_PATH names another binary instead. If
# this fails, the browser tests fail with one line saying what is missing.
chromium:
	@if [ -z "$$CHROMIUM_PATH" ] && [ ! -x /usr/bin/chromium ]; then \
		echo "installing Debian's chromium for tests/browser"; \
		sudo=$$( [ "$$(id -u)" = 0 ] || command -v sudo ); \
		{ $$sudo apt-get update -qq && $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
			|| echo "could not install chromium: tests/browser will fail (or set CHROMIUM_PATH)"; \
	fi

# The unit tests' temporary files (a SQLite database or two and a key per test: about 3,000
# files, 80 MB a run; pytest keeps the last three runs) go to /dev/shm when it has a GiB free:
# on a disk, creating them and deleting an old run's cost about 4 s of a run's 50 s on one
# core. `make test-unit TEST_TMPDIR=` keeps them in the usual place.
TEST_TMPDIR ?= $(shell df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 && $$4 > 1048576 { print "/dev/shm" }')

test-unit: $(STAMP)
	$(if $(TEST_TMPDIR),TMPDIR=$(TEST_TMPDIR) )$(BIN)/python -m pytest -n 2 -m "not integration"

test-stress: $(STAMP)
	bash .ci/stress

test-load: $(STAMP)
	$(BIN)/python -m pytest -n 2 -m load -s

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy aircoach
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict
	$(BIN)/lint-imports

fmt: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

tools-schema: $(STAMP)
	$(BIN)/python -m aircoach.tools

# The Lambda zip (dist/aircoach-lambda.zip): the app, run.sh at its root (the streaming
# function's handler) and python3.12 manylinux wheels from the package index. serverless.yml
# ships this zip; tests/deploy builds its own copy (in a temporary folder) and runs it.
bundle: $(STAMP)
	$(BIN)/python deploy/bundle.py build

bundle-check: $(STAMP)
	$(BIN)/python deploy/bundle.py check

bench: $(STAMP)
	@for b in bench/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache dist
