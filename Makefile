# One command to serve, one to test; both install what they need first.
VENV ?= .venv
PYTHON ?= python3
# The exact versions installed (pyproject.toml holds the ranges); `make constraints` renews it.
CONSTRAINTS ?= constraints.txt

$(VENV)/.installed: pyproject.toml $(CONSTRAINTS)
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
# setuptools notes "Editable installation. Please be careful with folders ... same name
# as your package": InformationOnly, not a deprecation; every editable install of a
# layout without src/ prints it. Builds of the sdist and the wheel print nothing
# (tests/live/test_packaging.py).
	$(VENV)/bin/pip install -q -c $(CONSTRAINTS) -e '.[test,docs]'
	touch $@

.PHONY: install serve test lint docs constraints
install: $(VENV)/.installed

# Where `make serve` listens (the manual's doc tests serve on a private address).
SERVE_HOST ?= 127.0.0.1
SERVE_PORT ?= 8778
serve: install
	$(VENV)/bin/allotment serve --host $(SERVE_HOST) --port $(SERVE_PORT)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# The documentation site into doc/build/html: warnings are errors, every reference
# must resolve (-n), then every internal link and anchor of the HTML too. -E reads
# every page afresh: the reference pages are generated from the code.
docs: install
	$(VENV)/bin/sphinx-build -E -W -n --keep-going -b html doc/source doc/build/html
	$(VENV)/bin/python doc/check_links.py doc/build/html

test: install lint docs
	$(VENV)/bin/pytest --cov --cov-report=term

# The newest versions pyproject.toml's ranges allow, resolved in a fresh venv, frozen
# into $(CONSTRAINTS). Then `make test` installs them and tells whether they work.
constraints:
	set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(PYTHON) -m venv "$$tmp/venv"; \
	"$$tmp/venv/bin/pip" install -q --upgrade pip; \
	"$$tmp/venv/bin/pip" install -q -e '.[test,docs]'; \
	{ echo "# The exact set known to work, runtime, test and docs: what 'make install' and CI"; \
	  echo "# install (pip install -c constraints.txt -e '.[test,docs]'). Regenerate with"; \
	  echo "# 'make constraints'."; \
	  echo "# pyproject.toml holds the ranges allotment accepts."; \
	  "$$tmp/venv/bin/pip" freeze --exclude-editable; } > "$$tmp/constraints.txt"; \
	mv "$$tmp/constraints.txt" $(CONSTRAINTS)
