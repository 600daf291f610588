"""Build step4_tpu_notebook/tpu_training.ipynb from train.py and notebook_cells.py, and run it.

    python -m accelerate_course.maintain.build_notebook            (builds it, runs it on a real
                      kernel with the embedded default, and writes it with that run's outputs:
                      make notebook)
    python -m accelerate_course.maintain.build_notebook --check    (exit 1 if the committed
                      notebook's cells are not the ones built from the sources)

Both sources are jupytext "percent" scripts (cells start with `# %%`). notebook_cells.py
holds the notebook's own cells; each of its cells whose whole source is `# train.py: cell N`
is replaced by train.py's cell N, unchanged (cell 0, train.py's docstring, becomes a text
cell), and the cells written here: the links (Open in Colab, Open in Kaggle), the source (the
editable COURSE_SOURCE line: where the course is installed from, this version's tag of
pyproject.toml's repository), and the setup (common/notebook_setup.py's install_plan with
the pins of requirements.txt). So the training code of the notebook is train.py's own code,
and tests/test_step4_notebook.py fails when they drift apart.

The outputs kept are a student's to trust: the setup cell's are not kept (they say what this
machine had); progress bars are kept as their last state; the paths of the machine that ran
it are written as <course>, <python>, <tmp>; links point at the repository.
"""

import argparse
import os
import re
import sys
import textwrap
import time

import jupytext
import nbformat

from accelerate_course.published import (
    course_source,
    named_repository,
    notebook_links,
    repository,
    version_tag,
)
from accelerate_course.steps import REPO, TRAIN_PY

FOLDER = TRAIN_PY[4].parent
TRAIN = FOLDER / "train.py"
CELLS = FOLDER / "notebook_cells.py"
NOTEBOOK = FOLDER / "tpu_training.ipynb"
COURSE_CELLS = REPO / "docs" / "course_on_colab.py"
COURSE_NOTEBOOK = REPO / "docs" / "course_on_colab.ipynb"
OUTPUT = {"step4": NOTEBOOK, "course": COURSE_NOTEBOOK}
PLACEHOLDER = re.compile(r"^# train\.py: cell (\d+)$")
WRITTEN = "written by accelerate_course/maintain/build_notebook.py"
# the XLA lane's count for the cells' text (tests/test_xla.py measures it again)
COMPILES = (
    "4 graphs compiled in the first 3 optimizer steps, 1 at step 434 of the same "
    "shapes (its cause was not traced), and 1 at the epoch's last batch"
)


def train_cells():
    """Return train.py's cells, as jupytext reads them."""
    return jupytext.read(TRAIN, fmt="py:percent").cells


def pinned_packages():
    """Return requirements.txt's pins of what the notebook imports: torch and the libraries;
    not the notebook runner, the plot, the tests or their lint, and not numpy, pandas, pyarrow and
    scikit-learn, which a hosted runtime has already loaded or ships for its own tools."""
    skip = (
        "pytest",
        "ruff",
        "jupytext",
        "nbclient",
        "ipykernel",
        "matplotlib",
        "numpy==",
        "pandas==",
        "pyarrow==",
        "scikit-learn==",
        "psutil==",
    )
    return [
        line.strip()
        for line in (REPO / "requirements.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#") and not line.startswith(skip)
    ]


def setup_cell():
    """Return the notebook's setup cell: where the course comes from (the one line a student
    may edit), the course installed alone, then common/notebook_setup.py's set_up."""
    pins = ", ".join(f'"{p}"' for p in pinned_packages())
    return f'''# Setup: the course, then what this runtime lacks; in the course's own folder it changes nothing
# (docs/notebook-setup.md says what it does on each runtime). COURSE_SOURCE is the teacher's
# copy at its tag (make notebook writes it); type another copy's address to use that one.
COURSE_SOURCE = "{course_source()}"
PINS = {textwrap.fill(f"[{pins}]", 96, subsequent_indent="        ")}
import importlib, importlib.util, os, subprocess, sys

source = os.environ.get("COURSE_SOURCE", COURSE_SOURCE)
found = importlib.util.find_spec("common") is not None
if not found and source:  # the course alone first: it needs no other package
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", source],
                          capture_output=True, text=True)
    importlib.invalidate_caches()
if importlib.util.find_spec("common") is None:  # one line, no traceback; Run all stops here
    class SetupStopped(Exception):
        def _render_traceback_(self):
            return [f"setup: {{self}}"]
    raise SetupStopped("the course itself is not installed here, and this cell names no "
                       "COURSE_SOURCE: type at its top where the course is published, as "
                       'COURSE_SOURCE = "git+https://github.com/<owner>/<course>@<tag>", and run '
                       "it again" if not source else "pip could not install the course from "
                       f"{{source}}: {{(done.stderr.strip().splitlines() or ['no reason given'])[-1]}}")
from common.notebook_setup import set_up
set_up(PINS, source, found)'''


def course_source_cell():
    """Return the course notebook's first cell: where the course is cloned from, and the
    flags of its make course."""
    named = named_repository()
    return f'''# The teacher's copy of the course and the tag a class uses (make notebook writes them from
# pyproject.toml); type another repository here to use another copy
REPOSITORY = "{named}"
TAG = "{version_tag()}"
FLAGS = ""  # flags for every step of make course, e.g. "--max-train-steps 50"'''


def clone_cell():
    """Return the course notebook's setup cell: the course cloned at its tag, then what it
    needs (common/notebook_setup.py's install_plan, run from the clone)."""
    pins = ", ".join(f'"{p}"' for p in pinned_packages())
    return f'''# setup: the course cloned at TAG, then what it needs, decided by common/notebook_setup.py's
# install_plan as in step 4's notebook: the runtime's torch kept, the Hugging Face libraries
# at the course's versions, the course itself (editable); this notebook then works in the clone
import importlib.metadata, os, subprocess, sys
from pathlib import Path


class SetupStopped(Exception):
    """The notebook cannot go on here: one line says why (Run all stops at this cell)."""

    def _render_traceback_(self):
        return [f"setup: {{self}}"]


if not (Path("accelerate_course").is_dir() and Path("step1_plain_loop").is_dir()):
    if not REPOSITORY:
        raise SetupStopped("the cell above names no REPOSITORY: type the course's, as "
                           'REPOSITORY = "https://github.com/<owner>/<course>", and run both '
                           "cells again")
    if not Path("course/.git").exists():
        done = subprocess.run(["git", "clone", "--quiet", "--depth", "1", "--branch", TAG,
                               REPOSITORY, "course"], capture_output=True, text=True)
        if done.returncode != 0:
            said = done.stderr.strip().splitlines() or ["exit code " + str(done.returncode)]
            raise SetupStopped(f"git could not clone {{REPOSITORY}} at {{TAG}}: {{said[-1]}}")
    os.chdir("course")
sys.path.insert(0, os.getcwd())
from common.notebook_setup import install_plan, run_installs, upgraded_in_this_kernel

PINS = [{pins}]
WATCHED = ["torch", "numpy", "pandas", "pyarrow", "scikit-learn",
           *(pin.split("==")[0] for pin in PINS if not pin.startswith("torch=="))]


def installed_versions(names):
    versions = {{}}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return versions


before = installed_versions(WATCHED)
course_found = bool(installed_versions(["accelerate-course"]))
commands, notes, stop = install_plan(sys.version_info[:2], before, [], True, course_found,
                                     "--editable=.", PINS)
if stop:
    raise SetupStopped(stop)
failed = run_installs(commands, sys.executable)
if failed:
    raise SetupStopped(failed)
for note in notes:
    print("setup:", note)
loaded = {{name for name in before
          if {{"scikit-learn": "sklearn"}}.get(name, name.replace("-", "_")) in sys.modules}}
upgraded = upgraded_in_this_kernel(before, installed_versions(WATCHED), loaded)
if upgraded:
    raise SetupStopped("upgraded " + ", ".join(upgraded) + ", which this kernel had already "
                       "loaded: restart the runtime, then run the notebook again from the top")
print("the course: its clone at", TAG, "(this notebook now works there)")'''


def build(kind="step4"):
    """Return a notebook (an nbformat NotebookNode, no outputs): step 4's, or with
    kind="course" the whole course's for a hosted runtime (docs/course_on_colab.py)."""
    source = train_cells()
    # comment_magics=False: the cells are plain Python, as they are in train.py
    notebook = jupytext.read(
        CELLS if kind == "step4" else COURSE_CELLS,
        fmt={"extension": ".py", "format_name": "percent", "comment_magics": False},
    )
    written = {
        f"# source: {WRITTEN}": course_source_cell,
        f"# setup: {WRITTEN}": setup_cell,
        f"# clone: {WRITTEN}": clone_cell,
    }
    cells = []
    for cell in notebook.cells:
        match = PLACEHOLDER.match(cell.source.strip())
        if cell.source.strip() in written:
            cells.append(nbformat.v4.new_code_cell(written[cell.source.strip()]()))
        elif match and int(match.group(1)) == 0:  # the module docstring: shown as text
            text = source[0].source.strip().strip('"').strip()
            cells.append(nbformat.v4.new_markdown_cell("```text\n" + text + "\n```"))
        elif match:
            cells.append(nbformat.v4.new_code_cell(source[int(match.group(1))].source))
        else:
            if cell.cell_type == "markdown":
                cell.source = (
                    cell.source.replace(f"links: {WRITTEN}", notebook_links(OUTPUT[kind]))
                    .replace("(DOCS/", f"({repository()}/blob/{version_tag()}/docs/")
                    .replace("COMPILES", COMPILES)
                )
            cells.append(cell)
    notebook.cells = cells
    for i, cell in enumerate(notebook.cells):
        cell.metadata = {}
        cell["id"] = f"cell-{i}"
    notebook.metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
        # Colab opens a notebook on the runtime it names: step 4's on a TPU; the course's
        # runs on the CPU of any runtime, so it names none (Colab's default, a CPU)
        **({"accelerator": "TPU"} if kind == "step4" else {}),
    }
    return notebook


def code_cells(notebook):
    """Return the sources of a notebook's code cells, in order."""
    return [cell.source for cell in notebook.cells if cell.cell_type == "code"]


def collapsed(outputs):
    """Return outputs with each run of stream outputs of one stream merged into one, and every
    line that a carriage return rewrote (a progress bar) kept as it was last drawn."""
    merged = []
    for output in outputs:
        if (
            output.output_type == "stream"
            and merged
            and merged[-1].output_type == "stream"
            and merged[-1].name == output.name
        ):
            merged[-1].text += output.text
        else:
            merged.append(output)
    for output in merged:
        if output.output_type == "stream":
            output.text = "\n".join(
                line.rstrip("\r").split("\r")[-1] for line in output.text.split("\n")
            )
    return merged


def machine_paths():
    """Return {absolute path of this machine: what the outputs say instead}, longest first."""
    import site
    import tempfile

    paths = {str(REPO): "<course>"}
    for folder in [*site.getsitepackages(), sys.prefix, sys.base_prefix]:
        paths.setdefault(str(folder), "<python>")
    paths.setdefault(tempfile.gettempdir(), "<tmp>")
    paths.setdefault(os.path.expanduser("~"), "<home>")
    return dict(sorted(paths.items(), key=lambda item: -len(item[0])))


def without_machine_paths(text):
    for path, name in machine_paths().items():
        text = text.replace(path, name)
    return text


def cleaned(notebook):
    """Return the notebook with its outputs as a student should see them (see the module's
    docstring): the setup cell's removed, streams collapsed, this machine's paths named."""
    setup = setup_cell()
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        if cell.source == setup:
            cell.outputs = []
            continue
        cell.outputs = collapsed(cell.outputs)
        for output in cell.outputs:
            if "text" in output:
                output.text = without_machine_paths(output.text)
            for kind, value in output.get("data", {}).items():
                if isinstance(value, str):
                    output["data"][kind] = without_machine_paths(value)
    return notebook


def execute(notebook, output_dir):
    """Run the notebook top to bottom on a real Jupyter kernel (the embedded default, written
    to output_dir); add a text cell that says where and how long. Returns the notebook."""
    from nbclient import NotebookClient

    from accelerate_course.machine import describe_machine

    os.environ["COURSE_ARGS"] = f"--output-dir {output_dir}"
    os.environ.setdefault("HF_ENDPOINT", "http://127.0.0.1:9")  # the hub is not needed
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    start = time.perf_counter()
    NotebookClient(
        notebook, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(REPO)}}
    ).execute()
    seconds = time.perf_counter() - start
    note = nbformat.v4.new_markdown_cell(
        f"*This copy was run by `make notebook` in the course's folder, on the embedded "
        f"default, on {describe_machine()}, in {seconds:.0f} s (a real Jupyter kernel; the "
        "launch's 2 processes on the CPU). The setup cell's output is not kept: it says what "
        "the machine that runs it has.*"
    )
    note["id"] = "cell-run"
    notebook.cells.insert(1, note)
    return cleaned(notebook)


def as_text(notebook):
    """Return the notebook as the JSON text written to disk."""
    return nbformat.writes(notebook) + "\n"


def main():
    parser = argparse.ArgumentParser(
        prog="python -m accelerate_course.maintain.build_notebook",
        description=__doc__.splitlines()[0],
    )
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--no-run", action="store_true", help="write it without outputs")
    parser.add_argument("--output-dir", default="outputs/notebook")
    args = parser.parse_args()
    built = build()
    if args.check:
        for path, kind in ((NOTEBOOK, "step4"), (COURSE_NOTEBOOK, "course")):
            committed = nbformat.read(path, as_version=4) if path.exists() else None
            if committed is None or code_cells(committed) != code_cells(build(kind)):
                sys.exit(f"error: {path.relative_to(REPO)} is stale; run make notebook")
        return
    # the whole course's notebook is kept without outputs: a class runs it on its runtime
    COURSE_NOTEBOOK.write_text(as_text(build("course")))
    print(f"wrote {COURSE_NOTEBOOK.relative_to(REPO)}")
    notebook = built if args.no_run else execute(built, args.output_dir)
    NOTEBOOK.write_text(as_text(notebook))
    print(f"wrote {NOTEBOOK.relative_to(REPO)}" + ("" if args.no_run else " with its outputs"))


if __name__ == "__main__":
    main()
