# plantstore: thin targets over the virtualenv in .venv.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN = $(VENV)/bin
PG_TEST_URL ?= postgresql://postgres@127.0.0.1:5432/test
PLANTSTORE_DATABASE_URL ?= sqlite:///plantstore.db
export PLANTSTORE_DATABASE_URL

.PHONY: install install-test migrate run lint test test-fast test-slow test-sqlite test-postgres test-fleet smoke smoke-nginx image bench bench-ab bench-floor docs clean

$(BIN)/.installed: setup.py setup.cfg
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[postgres]'
	touch $@

$(BIN)/.installed-run: $(BIN)/.installed
	$(BIN)/pip install -q -e '.[run]'
	touch $@

# The tests run what `make run` runs: the test environment holds it too.
$(BIN)/.installed-test: $(BIN)/.installed-run
	$(BIN)/pip install -q -e '.[test]'
	touch $@

install: $(BIN)/.installed
install-test: $(BIN)/.installed-test

migrate: install
	$(BIN)/plantstore db upgrade

# The whole service on this machine: gunicorn and one webhook worker, the
# processes of config/Procfile, run together by honcho with one environment
# (.env too; Ctrl-C stops both; so does either one ending). Listens on
# HOST:PORT, 127.0.0.1:8000 unless set. Log lines are text when this is a
# terminal. Ctrl-C is how it ends: the shell outlives it (trap) and takes
# honcho's status for an interrupt, 130, for a clean stop, not an error.
run: migrate $(BIN)/.installed-run
	@echo "plantstore on http://$${HOST:-127.0.0.1}:$${PORT:-8000} with one webhook worker (database $(PLANTSTORE_DATABASE_URL)); Ctrl-C stops both."
	@echo "Get a token in another shell:"
	@echo "  $(BIN)/plantstore users create alice && TOKEN=\$$($(BIN)/plantstore tokens create alice)"
	@echo "Webhooks to a receiver on this machine (docs/webhooks.md): echo PLANTSTORE_WEBHOOK_ALLOWED_NETWORKS=127.0.0.0/8 >> .env, then make run"
	@trap : INT; PATH="$(abspath $(BIN)):$$PATH" \
	PLANTSTORE_LOG_FORMAT="$${PLANTSTORE_LOG_FORMAT:-$$(if [ -t 2 ]; then echo text; else echo auto; fi)}" \
	$(BIN)/honcho start -f config/Procfile -p $${PORT:-8000}; \
	status=$$?; [ $$status -eq 130 ] && exit 0; exit $$status

# Ruff, with the project's ruff.toml.
lint: install-test
	$(BIN)/ruff check .

# Lint and the fast tests first (a failure there stops the run), then the
# slow tests (real servers) on SQLite, then the suite on PostgreSQL when it
# answers at PG_TEST_URL. Under CI (CI=true) an unreachable PostgreSQL fails
# the run instead.
test: lint test-fast test-slow test-postgres

# The suite on SQLite: test-fast (no server processes) and test-slow. Either
# may find nothing to run in a PYTEST_ARGS selection (pytest's exit 5): fine.
test-sqlite: test-fast test-slow

test-fast: install-test
	env -u PLANTSTORE_TEST_DATABASE_URL $(BIN)/pytest -m 'not slow' $(PYTEST_ARGS) || [ $$? -eq 5 ]

test-slow: install-test
	env -u PLANTSTORE_TEST_DATABASE_URL $(BIN)/pytest -m slow $(PYTEST_ARGS) || [ $$? -eq 5 ]

test-postgres: install-test
	@if PLANTSTORE_DATABASE_URL="$(PG_TEST_URL)" $(BIN)/plantstore db check >/dev/null; then \
		echo "== PostgreSQL suite ($(PG_TEST_URL)) =="; \
		PLANTSTORE_TEST_DATABASE_URL="$(PG_TEST_URL)" $(BIN)/pytest $(PYTEST_ARGS); \
	elif [ "$$CI" = "true" ]; then \
		echo "PostgreSQL unreachable at $(PG_TEST_URL): required under CI" >&2; exit 1; \
	else \
		echo "== PostgreSQL suite SKIPPED: nothing answers at $(PG_TEST_URL) (set PG_TEST_URL) =="; \
	fi

# The deployment on many hosts (2 web nodes behind nginx, 2 workers, one
# PostgreSQL, directly and through PgBouncer, Redis), built on network
# namespaces of this machine; needs root, Linux, PostgreSQL 15's binaries,
# nginx, pgbouncer, redis-server, faketime. Not part of `make test`.
# FLEET_ONLY picks scenarios (a pytest -k expression), e.g.
# make test-fleet FLEET_ONLY=clock_skew. FLEET_REPORT=PATH writes the run's
# figures there as a page (docs/fleet-run.md is one). The upgrade scenario
# (FLEET_ONLY=upgrade) starts from FLEET_UPGRADE_FROM, a git ref of this
# repository (default ee73b61, the release before). See docs/scaling.md. The whole run took 9
# minutes on two cores at a load average of 14; the time limit stops a hung run.
test-fleet: install-test
	timeout --signal=INT --kill-after=30 1200 $(BIN)/pytest -s -p no:cacheprovider \
		scripts/fleet $(if $(FLEET_ONLY),-k "$(FLEET_ONLY)") $(PYTEST_ARGS)

# curl smoke session against a throwaway gunicorn (and webhook receiver and
# SQLite database); smoke-nginx puts a real nginx with config/nginx in front.
# Against a running deployment: scripts/smoke.sh BASE_URL TOKEN
smoke: install
	scripts/smoke_local.sh

smoke-nginx: install
	scripts/smoke_local.sh --nginx

# The container image (Containerfile): web, worker and every plantstore
# command in one image. The wheels of its dependencies are made here first,
# by IMAGE_PYTHON's pip (.venv's) with this machine's pip settings (index,
# proxy), so the build needs no package index. IMAGE_PYTHON must be the
# image's Python 3.11, and the same release where the base's is older than
# 3.11.3 (Debian 12's 3.11.2: redis wants async-timeout there).
# IMAGE_WHEELS= (empty) leaves the downloads to the build instead, as a plain
# `docker build` does. IMAGE names the image, IMAGE_BASE is its base
# (Containerfile's BASE), CONTAINER_ENGINE podman or docker,
# IMAGE_BUILD_ARGS more arguments for its build.
IMAGE ?= localhost/plantstore:latest
IMAGE_BASE ?= python:3.11-slim-bookworm
IMAGE_WHEELS ?= build/image-wheels
IMAGE_PYTHON ?= $(BIN)/python
CONTAINER_ENGINE ?= $(notdir $(shell command -v podman || command -v docker))
image: install
	@[ -n "$(CONTAINER_ENGINE)" ] || { echo "make image needs podman or docker" >&2; exit 1; }
ifneq ($(IMAGE_WHEELS),)
	@$(IMAGE_PYTHON) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11) and "make image: IMAGE_PYTHON must be Python 3.11, the image'"'"'s")'
	rm -rf $(IMAGE_WHEELS)
	$(IMAGE_PYTHON) -m pip wheel -q --wheel-dir $(IMAGE_WHEELS) '.[postgres]' setuptools wheel
	rm -f $(IMAGE_WHEELS)/plantstore-*.whl
endif
	$(CONTAINER_ENGINE) build $(if $(filter podman,$(CONTAINER_ENGINE)),--format docker) \
		-f Containerfile -t $(IMAGE) --build-arg BASE=$(IMAGE_BASE) \
		--build-arg WHEELS=$(IMAGE_WHEELS) $(IMAGE_BUILD_ARGS) .

# Throughput, latency, and the server's CPU and PostgreSQL statements per
# request under wrk (installed from Debian when missing); BENCH_COMPARE=1
# runs the yardsticks of ../shared/bench beside plantstore and writes
# docs/performance.md; BENCH_QUICK=1 BENCH_WORKLOADS=create BENCH_DATABASE=postgres
# reruns one workload beside them in minutes. Not part of `make test`.
# See bench/run.py and docs/benchmarking.md.
bench: install
	$(BIN)/python bench/run.py

# Two gunicorn set-ups, or two working trees, side by side, e.g.
# make bench-ab AB_A="GUNICORN_THREADS=4" AB_B="GUNICORN_THREADS=8" BENCH_DATABASE=postgres
# make bench-ab AB_B_CHECKOUT=/tmp/without   (a git worktree of the code without a change)
bench-ab: install
	$(BIN)/python bench/ab.py

# plantstore beside the same work as a plain Flask app (bench/flask_floor.py)
# and the yardsticks: the room the framework leaves (see docs/benchmarking.md).
bench-floor: install
	$(BIN)/python bench/floor.py

# docs/settings.md from the settings table in plantstore/settings.py.
docs: install
	$(BIN)/python -c 'import sys; from plantstore.settings import reference; sys.stdout.write(reference())' > docs/settings.md

clean:
	rm -rf $(VENV) .venv-bench *.egg-info .pytest_cache
