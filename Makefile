# The course's two commands:
#   make course   run the course on the embedded default (installs what it needs first)
#   make test     run the test suite (installs what it needs first)
# native Windows (make from Git Bash or MSYS sets OS=Windows_NT): make lesson, which needs only
# Python, runs (with python, Windows' own name for it); every other goal stops in one line
# that names WSL, and the plain python -m command of what needs only Python
ifeq ($(OS),Windows_NT)
PYTHON ?= python
WINDOWS_REFUSED := $(filter-out lesson,$(or $(MAKECMDGOALS),course))
ifneq ($(WINDOWS_REFUSED),)
$(error on Windows, make $(firstword $(WINDOWS_REFUSED)) needs WSL (Windows Subsystem for Linux): in PowerShell, wsl --install, then clone the course and run make in its Ubuntu terminal; what needs only Python runs here: make lesson STEP=3, or python -m accelerate_course.lesson 3)
endif
endif
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: course test test-unit lesson what-if exercise takehome check install clean \
	student-template gradescope private-copy test-classroom test-forgery test-hosted benchmark notebook readme xla-lane verify-embedded gpu-check gpu-bundle

# the pinned packages, torch built for this machine (TORCH=cpu, cuda, cu126, cu129, cu130 or
# cu132 to choose), and the course itself (common/ and accelerate_course/, editable): one line says
# which torch and how big before pip downloads it; a Python older than 3.11 is refused first
TORCH ?= auto
$(BIN)/.installed: requirements.txt pyproject.toml
	$(PYTHON) -m accelerate_course.install --venv $(VENV) --torch $(TORCH)
	touch $@

# an environment moved with its clone, or made by a Python no longer there: one line says so
install: $(BIN)/.installed
	@$(PYTHON) -m accelerate_course.install --venv $(VENV) --check

clean:
	rm -rf $(VENV) outputs

# ---- for a class: accelerate_course/ ---------------------------------------------------------

course: install
	$(BIN)/python -m accelerate_course.run_course $(ARGS)

# a STEP= that names no step is refused in one line (make's own "*** ... Stop."), before
# anything is installed or run; the steps are the folders on disk, which
# accelerate_course/steps.py lists too (a test checks that they agree)
STEP_DIRS := $(patsubst %/train.py,%,$(sort $(wildcard step[0-9]_*/train.py)))
STEPS := $(foreach dir,$(STEP_DIRS),$(patsubst step%,%,$(firstword $(subst _, ,$(dir)))))
ifneq ($(filter command line environment,$(origin STEP)),)
  STEP_GOALS := $(filter test lesson what-if exercise $(if $(TASK),,check student-template gradescope),$(MAKECMDGOALS))
  STEP_CHOICES := $(if $(filter exercise check student-template gradescope,$(STEP_GOALS)),$(filter-out 1,$(STEPS)),$(STEPS))
  ifneq ($(STEP_GOALS),)
    ifneq ($(words $(STEP)) $(filter $(STEP),$(STEP_CHOICES)),1 $(STEP))
      $(error error: there is no step '$(STEP)' for make $(STEP_GOALS): the steps there are $(STEP_CHOICES))
    endif
  endif
endif

# make test STEP=3: that lesson's comparison and what-if tests alone
test: install
	$(BIN)/python -m pytest $(if $(filter command line,$(origin STEP)),-m step$(STEP)) $(ARGS)

# the lint and format check (ruff, configured in pyproject.toml), then the unit tests alone: no
# process started (a test that starts one is marked runs), seconds
test-unit: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest -m "not runs" $(ARGS)

# one lesson in the terminal: make lesson STEP=3 (STEP=1: step 1 itself, all new); word by
# word in colour, or a plain diff when piped or with NO_COLOR set. Python's standard library
# only: no install needed
STEP ?= 2
lesson:
	@$(PYTHON) -m accelerate_course.lesson $(STEP)

# what breaks without each lesson line: make what-if STEP=3 (all steps without STEP)
what-if: install
	$(BIN)/python -m accelerate_course.whatif $(if $(filter command line,$(origin STEP)),--step $(STEP)) $(ARGS)

# a lesson as an exercise, and its grading: make exercise STEP=3, make check STEP=3 FILE=...;
# a take-home task (takehome/: a lesson applied to another loop): make takehome TASK=...,
# make check TASK=...; the grader's words in Chinese: COURSE_LANG=zh-CN
TASKS := $(patsubst takehome/%/task.toml,%,$(wildcard takehome/*/task.toml))
GRADED = $(or $(TASK),$(STEP))
exercise: install
	$(BIN)/python -m accelerate_course.exercise $(STEP) $(ARGS)
takehome: install
	$(if $(TASK),,$(error error: say which task: make takehome TASK=$(firstword $(TASKS)) (the tasks: $(TASKS))))
	$(BIN)/python -m accelerate_course.takehome $(TASK) $(ARGS)
FILE ?= exercises/$(if $(TASK),$(TASK),step$(STEP))/train.py
# partial credit by default (each check scores its points when it passes); CORE_GATE=1: no
# check scores while a core check fails (docs/classroom.md)
CORE_GATE_FLAG = $(if $(filter 1,$(CORE_GATE)),--core-gate)
check: install
	$(BIN)/python -m accelerate_course.check $(GRADED) $(FILE) $(if $(TIME_LIMIT),--time-limit $(TIME_LIMIT)) $(if $(JSON),--json $(JSON)) $(CORE_GATE_FLAG)

# ---- for a teacher: a graded lab (docs/teaching.md) -----------------------------------------

# the repository a class clones for a graded lab on lesson STEP or on a take-home TASK (no line
# of a solution), and Gradescope's autograder for it: make student-template STEP=3 OUT=../lab3,
# make gradescope TASK=sst2-losses OUT=../gs (COURSE_LANG=zh-CN: the grader's words in Chinese)
LAB_GIVEN = $(if $(and $(OUT),$(or $(TASK),$(filter command line,$(origin STEP)))),,$(error error: say what and where: make $@ STEP=3 OUT=../$(if $(filter gradescope,$@),gradescope,lab)3, or TASK=$(firstword $(TASKS)) instead of STEP=3))
student-template: install
	$(LAB_GIVEN)
	$(BIN)/python -m accelerate_course.classroom template $(GRADED) $(OUT) $(CORE_GATE_FLAG) $(ARGS)
gradescope: install
	$(LAB_GIVEN)
	$(BIN)/python -m accelerate_course.classroom gradescope $(GRADED) $(OUT) $(CORE_GATE_FLAG) $(ARGS)

# a take-home that counts: the teacher's private copy of the course, with a new task, its
# solution and its tests (docs/teaching.md): make private-copy OUT=../course-private
# REPOSITORY=https://github.com/<owner>/<private-course> TASK=<new task>
private-copy: install
	$(BIN)/python -m accelerate_course.private_copy $(OUT) $(if $(REPOSITORY),--repository $(REPOSITORY)) $(if $(TASK),--task $(TASK)) $(ARGS)

# ---- for the course's maintainers: accelerate_course/maintain/ ------------------------------

# the classroom recipe (docs/classroom.md) end to end with local bare repositories: five real
# gradings (lesson 3 and the take-home task on GitHub Classroom, lesson 3 on Gradescope),
# about 6 minutes on 2 cores (in CI, not in make test)
test-classroom: install
	COURSE_CLASSROOM_TEST=1 $(BIN)/python -m pytest tests/test_classroom.py -s $(ARGS)

# the red team (tests/test_forgery.py): the take-home's untouched file, eleven attacks on its
# grade and the solution, each graded in the Classroom workflow, Gradescope's run_autograder
# and the lab's make check, all as root; about 25 minutes on 2 cores (not in CI)
test-forgery: install
	COURSE_FORGERY_TEST=1 $(BIN)/python -m pytest tests/test_forgery.py -s $(ARGS)

# the notebooks as a class opens them on Colab or Kaggle: a fresh runtime with torch only, the
# course from a local git repository at its tag (tests/test_hosted.py; a few minutes, in CI)
test-hosted: install
	COURSE_HOSTED_TEST=1 $(BIN)/python -m pytest tests/test_hosted.py $(ARGS)

benchmark: install
	$(BIN)/python -m accelerate_course.maintain.benchmark $(ARGS)

# rebuild what is generated from the code: the notebook and the lesson pages' diffs
notebook: install
	$(BIN)/python -m accelerate_course.maintain.build_notebook
readme: install
	$(BIN)/python -m accelerate_course.maintain.update_readme $(if $(WHATIF),--whatif)

# step 4 on torch_xla (CPU backend) in its own environment (.venv-xla, about 7 GB, once)
xla-lane:
	bash accelerate_course/maintain/xla_lane.sh

# rebuild the embedded data and checkpoint from source into a temporary folder and compare
verify-embedded: install
	$(BIN)/python -m accelerate_course.maintain.verify_embedded $(ARGS)

# the course on one CUDA GPU, in a few minutes, as a table (docs/gpu.md); with no GPU: one line, exit 1
gpu-check: install
	$(BIN)/python -m accelerate_course.maintain.gpu_check $(ARGS)
# the pinned packages as wheels for a GPU machine without network (gpu-bundle/; see docs/gpu.md)
gpu-bundle: install
	$(BIN)/python -m accelerate_course.maintain.gpu_bundle $(ARGS)
