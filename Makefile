# Yasugoro: `make run` and `make test` are all a newcomer needs (Python 3.11+).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000
PG_URL ?= postgres://postgres@127.0.0.1:5432/test
# Where `make run` is reached, as every mail links to it (a server listening on every address
# is reached at 127.0.0.1 from this machine; give SITE_URL=http://name:port for another).
SITE_URL ?= http://$(if $(filter 0.0.0.0 ::,$(HOST)),127.0.0.1,$(HOST)):$(PORT)
VAR_DIR := $(or $(YASUGORO_VAR_DIR),var)

.PHONY: run port-free superuser test test-pg test-reliability lint format bench wrk browser clean

$(VENV)/.installed: requirements.txt
	@$(PYTHON) -c 'import sys; sys.exit("Python 3.11+ is required, found " + sys.version.split()[0]) if sys.version_info < (3, 11) else None'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $@

# Development server + django-q2 cluster on SQLite, with demo data. Ctrl-C stops both.
# HOST and PORT choose where it listens (make run PORT=8001); a busy port stops it at once.
# Both processes send mail, and link to SITE_URL: they get the address served here, which is
# also recorded in var/site_url for a command run by hand beside them (dispatch_outbox).
run: port-free $(VENV)/.installed
	DEBUG=1 $(PY) manage.py compile_translations
	DEBUG=1 $(PY) manage.py migrate --noinput
	DEBUG=1 $(PY) manage.py vapid_keys --ensure
	DEBUG=1 $(PY) manage.py seed_demo
	@mkdir -p "$(VAR_DIR)" && echo "$(SITE_URL)" > "$(VAR_DIR)/site_url"
	@echo "Pages: $(SITE_URL)/   Admin: $(SITE_URL)/admin/ (create a staff user: make superuser)"
	@# qcluster runs in its own session so a Ctrl-C reaches it once, through the trap, and
	@# it stops cleanly (two signals in a row can leave its main process hanging).
	@DEBUG=1 SITE_URL=$(SITE_URL) setsid $(PY) manage.py qcluster & QPID=$$!; \
	trap 'kill -TERM $$QPID 2>/dev/null; for i in 1 2 3 4 5 6 7 8 9 10; do kill -0 $$QPID 2>/dev/null || exit 0; sleep 1; done; kill -KILL -$$QPID 2>/dev/null' EXIT INT TERM; \
	DEBUG=1 SITE_URL=$(SITE_URL) $(PY) manage.py runserver $(HOST):$(PORT); status=$$?; trap - EXIT; \
	kill -TERM $$QPID 2>/dev/null; for i in 1 2 3 4 5 6 7 8 9 10; do kill -0 $$QPID 2>/dev/null || break; sleep 1; done; \
	kill -KILL -$$QPID 2>/dev/null; exit $$status

# Fails loudly when something already listens on HOST:PORT (runserver would fail later, and
# quietly behind the cluster's clean-up).
port-free:
	@$(PYTHON) -c 'import socket, sys; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); \
	code = s.connect_ex(("$(HOST)", $(PORT))); s.close(); \
	sys.exit("make run: port $(PORT) on $(HOST) is busy: stop what uses it, or run make run PORT=8001") if code == 0 else None'

superuser: $(VENV)/.installed
	DEBUG=1 $(PY) manage.py createsuperuser

test: $(VENV)/.installed
	DJANGO_SETTINGS_MODULE=yasugoro.settings_test $(PY) manage.py compile_translations
	$(PY) -m pytest $(PYTEST_ARGS)

test-pg: $(VENV)/.installed
	DJANGO_SETTINGS_MODULE=yasugoro.settings_test $(PY) manage.py compile_translations
	DATABASE_URL=$(PG_URL) $(PY) -m pytest $(PYTEST_ARGS)

# The reliability suite at full size (make test runs its small version); CI runs it on PostgreSQL.
test-reliability: $(VENV)/.installed
	DJANGO_SETTINGS_MODULE=yasugoro.settings_test $(PY) manage.py compile_translations
	$(PY) -m pytest tests/reliability -m reliability --reliability-full $(PYTEST_ARGS)

# Style, formatting, the architecture contracts and the types ([tool.mypy] in pyproject.toml).
lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-cache --no-logo
	$(VENV)/bin/mypy .

format: $(VENV)/.installed
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# Debian's chromium for the browser tests (they skip with a reason where it is missing).
browser:
	@command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium fonts-noto-cjk)

# Every benchmark prints our figure, a baseline measured in the same run, and the ratio.
# The pages benchmark drives Debian's `wrk`, installed here when missing.
bench: $(VENV)/.installed wrk
	@for script in bench/bench_*.py; do echo "== $$script"; $(PY) $$script || exit 1; done

wrk:
	@command -v wrk >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk)

clean:
	rm -rf $(VENV) var test-artifacts .pytest_cache .ruff_cache .mypy_cache
