# The course's two commands:
#   make course   run the course on the embedded default (installs what it needs first)
#   make test     run the test suite (installs what it needs first)
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: course test benchmark lesson notebook readme xla-lane install clean

$(BIN)/.installed: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $@

install: $(BIN)/.installed

course: install
	$(BIN)/python tools/run_course.py $(ARGS)

test: install
	$(BIN)/python -m pytest $(ARGS)

benchmark: install
	$(BIN)/python tools/benchmark.py $(ARGS)

# one lesson in the terminal, word by word: make lesson STEP=3
STEP ?= 2
STEP_DIRS := step1_plain_loop step2_accelerate step3_distributed_eval step4_tpu_notebook
lesson:
	@git diff --no-index --color-words \
		$(word $(shell expr $(STEP) - 1),$(STEP_DIRS))/train.py $(word $(STEP),$(STEP_DIRS))/train.py || true

# rebuild what is generated from the code: the notebook and the README's diffs
notebook: install
	$(BIN)/python tools/build_notebook.py
readme: install
	$(BIN)/python tools/update_readme.py

clean:
	rm -rf $(VENV) outputs

# step 4 on torch_xla (CPU backend) in its own environment (.venv-xla, about 7 GB, once)
xla-lane:
	bash tools/xla_lane.sh
