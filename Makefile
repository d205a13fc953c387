# One command to serve, one to test; both install what they need first.
VENV ?= .venv
PYTHON ?= python3

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test]'
	touch $@

.PHONY: install serve test lint
install: $(VENV)/.installed

serve: install
	$(VENV)/bin/allotment serve

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

test: install lint
	$(VENV)/bin/pytest --cov --cov-report=term
