# %% [markdown]
# # The whole course on Colab or Kaggle
#
# links: written by accelerate_course/maintain/build_notebook.py
#
# What `make course`, `make lesson`, `make what-if` and `make check` do on a laptop, in a
# hosted runtime instead: the course cloned from the teacher's repository at its tag, the
# runtime's own torch kept, the Hugging Face libraries installed at the course's versions,
# then each command as the Makefile runs it (`python -m accelerate_course...`). It runs on
# the CPU of any runtime (Colab's free CPU runtime has 2 cores, the machine the course's
# numbers are measured on); step 4's own notebook is `step4_tpu_notebook/tpu_training.ipynb`.
# Run the cells from the top; each says what it runs and about how long it takes.

# %%
# source: written by accelerate_course/maintain/build_notebook.py

# %%
# clone: written by accelerate_course/maintain/build_notebook.py

# %% [markdown]
# ## make course: the four steps, compared
#
# Steps 1 and 2 side by side (one core each), then step 3 on 2 CPU processes, then step 4
# through `notebook_launcher`: its plan first, one line per step, then the table (about 3
# minutes on 2 cores; `FLAGS = "--max-train-steps 50"` above makes it a minute, with the
# numbers of a barely trained model, and the comparisons of a full run will not all hold).

# %%
import importlib.util
if importlib.util.find_spec("matplotlib") is None:  # make course draws its loss curves with it
    MATPLOTLIB = next(line.strip() for line in open("requirements.txt")
                      if line.startswith("matplotlib=="))
    print(f"setup: installs {MATPLOTLIB}, which this runtime lacks (make course draws the "
          "loss curves with it)")
    !{sys.executable} -m pip install --quiet {MATPLOTLIB}
!{sys.executable} -m accelerate_course.run_course {FLAGS}

# %% [markdown]
# ## A lesson: its diff, what breaks without each line, and an exercise graded
#
# Lesson 3 here (`LESSON = 2`, `3` or `4`). The diff is the lesson; the what-if lab runs the
# step beside variants that take one lesson line out, and the invariants of step 3 (about 2
# minutes). The exercise is step 2 with a TODO where each change goes. It is written once:
# run its cell again and your changes are kept. Edit it, then check it: the untouched
# exercise scores 0, with hints measured from its own run.

# %%
LESSON = 3
!{sys.executable} -m accelerate_course.lesson {LESSON}

# %%
!{sys.executable} -m accelerate_course.whatif --step {LESSON}

# %%
# the exercise, written once: an exercise with your changes is kept
!{sys.executable} -m accelerate_course.exercise {LESSON}

# %%
# edit the exercise: on Colab it opens in the editor beside the notebook (Ctrl+S saves it);
# elsewhere, open the file below from the file browser, or load it into a new cell with
# %load, put %%writefile and its path on the cell's first line, and run that cell
EXERCISE = f"exercises/step{LESSON}/train.py"
try:
    from google.colab import files
    files.view(EXERCISE)
except ImportError:
    print(f"edit {os.path.abspath(EXERCISE)}: open it from the file browser, or in a cell: "
          f"%load {EXERCISE}")

# %%
!{sys.executable} -m accelerate_course.check {LESSON} exercises/step{LESSON}/train.py
