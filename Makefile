PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv test test-fast test-postgres soak lint demo bench bench-postgres clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

# Finds or gets a chromium for the browser tests first; the last line says what did not run.
test: $(STAMP)
	$(PY) -m tests.browsers ensure
	status=0; AVATARS_BROWSER_SKIP_REPORT=$(VENV)/browser-skips $(VENV)/bin/pytest || status=$$?; \
		AVATARS_BROWSER_SKIP_REPORT=$(VENV)/browser-skips $(PY) -m tests.browsers report; \
		exit $$status

# Everything but the tests that start processes (tests/e2e/): a quick check while working.
test-fast: $(STAMP)
	$(VENV)/bin/pytest -m "not e2e"

# The same suite against a throwaway PostgreSQL cluster (scripts/pg.sh), then stopped.
test-postgres: $(STAMP)
	url=$$(scripts/pg.sh start) && trap 'scripts/pg.sh stop' EXIT && \
		DATABASE_URL=$$url $(VENV)/bin/pytest

# The stateful property test with many more examples (and no time limit); a failure
# prints the shrunk sequence of steps and a blob to replay it. AVATARS_SOAK_EXAMPLES sets
# how many (3000 by default, about half an hour here).
soak: $(STAMP)
	HYPOTHESIS_PROFILE=soak $(VENV)/bin/pytest -p no:cacheprovider --timeout=0 \
		--hypothesis-show-statistics tests/test_properties.py

# The performance goals, one table row each (ARGS=--quick for reduced sizes).
bench: $(STAMP)
	$(PY) -m bench.run $(ARGS)

# The benchmarks with the pages-under-load row also run on a throwaway PostgreSQL cluster.
bench-postgres: $(STAMP)
	url=$$(scripts/pg.sh start) && trap 'scripts/pg.sh stop' EXIT && \
		DATABASE_URL=$$url $(PY) -m bench.run $(ARGS)

# exec: the demo is make's own child, so it sees make killed outright (no shell between).
demo: $(STAMP)
	exec env DJANGO_DEBUG=true $(PY) manage.py demo $(ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy .

clean:
	rm -rf $(VENV)
