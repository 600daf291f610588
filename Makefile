# The course's two commands:
#   make course   run the course on the embedded default (installs what it needs first)
#   make test     run the test suite (installs what it needs first)
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: course test benchmark diff install clean

$(BIN)/.installed: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $@

install: $(BIN)/.installed

course: install
	$(BIN)/python tools/run_course.py $(ARGS)

test: install
	$(BIN)/python -m pytest $(ARGS)

benchmark: install
	$(BIN)/python tools/benchmark.py $(ARGS)

clean:
	rm -rf $(VENV) outputs
