"""Build step4_tpu_notebook/tpu_training.ipynb from train.py and notebook_cells.py, and run it.

    python -m accelerate_course.maintain.build_notebook            (builds it, runs it on a real kernel with the
                                               embedded default, and writes it with the
                                               outputs of that run: make notebook)
    python -m accelerate_course.maintain.build_notebook --check    (exit 1 if the committed notebook's cells are
                                               not the ones built from the sources)

Both sources are jupytext "percent" scripts (cells start with `# %%`). notebook_cells.py
holds the notebook's own cells (text, data, the first look, the metric); each of its cells
whose whole source is `# train.py: cell N` is replaced by train.py's cell N, unchanged
(cell 0, train.py's docstring, becomes a text cell), and the cell `# setup: ...` by the
setup cell written here: common/notebook_setup.py's install_plan (what to keep and what to
install on this runtime), the pins of requirements.txt, and where the course itself is
installed from on Colab or Kaggle (pyproject.toml's notebook-source, at this version's tag). So the training code of the
notebook is train.py's own code, and tests/test_step4_notebook.py fails when they drift apart.
"""

import argparse
import inspect
import os
import re
import sys
import time
import tomllib

import jupytext
import nbformat

from accelerate_course.steps import REPO, TRAIN_PY
from common import notebook_setup
from common.tpu import tpu_chips

FOLDER = TRAIN_PY[4].parent
TRAIN = FOLDER / "train.py"
CELLS = FOLDER / "notebook_cells.py"
NOTEBOOK = FOLDER / "tpu_training.ipynb"
PLACEHOLDER = re.compile(r"^# train\.py: cell (\d+)$")
SETUP = "# setup: written by accelerate_course/maintain/build_notebook.py"


def train_cells():
    """Return train.py's cells, as jupytext reads them."""
    return jupytext.read(TRAIN, fmt="py:percent").cells


def pinned_packages():
    """Return requirements.txt's pins of what the notebook imports: torch and the libraries;
    not the notebook runner, the plot or the tests, and not numpy, pandas, pyarrow and
    scikit-learn, which a hosted runtime has already loaded or ships for its own tools."""
    skip = ("pytest", "jupytext", "nbclient", "ipykernel", "matplotlib", "numpy==",
            "pandas==", "pyarrow==", "scikit-learn==")
    return [line.strip() for line in (REPO / "requirements.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#") and not line.startswith(skip)]


def course_source():
    """Return where a notebook opened without the course installs it from: pyproject.toml's
    [tool.accelerate-course] notebook-source, at this version's tag ('' while it is unset)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    source = project["tool"]["accelerate-course"]["notebook-source"]
    return f"{source}@v{project['project']['version']}" if source else ""


def module_body(module):
    """Return a module's source without its docstring (the setup cell's comment says where
    it comes from)."""
    text = inspect.getsource(module)
    return text[text.index('"""', 3) + 3:].strip()


# the setup cell runs before the course is installed: it carries the sources it runs
TPU_CHIPS_SOURCE = inspect.getsource(tpu_chips).rstrip()


def setup_cell():
    """Return the source of the notebook's setup cell."""
    pins = ", ".join(f'"{p}"' for p in pinned_packages())
    return f'''# setup: what this runtime needs, decided by common/notebook_setup.py's install_plan
# (its source is below, with common/tpu.py's tpu_chips: the course is not installed yet)
import importlib.metadata, importlib.util, os, subprocess, sys

{TPU_CHIPS_SOURCE}


{module_body(notebook_setup)}


PINS = [{pins}]
COURSE_SOURCE = os.environ.get("COURSE_SOURCE", "{course_source()}")
HOSTED = "google.colab" in sys.modules or any(k.startswith("KAGGLE") for k in os.environ)
WATCHED = ["torch", "torch_xla", "numpy", "pandas", "pyarrow", "scikit-learn",
           *(pin.split("==")[0] for pin in PINS if not pin.startswith("torch=="))]


def installed_versions(names):
    versions = {{}}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return versions


TPU = tpu_chips()  # a TPU chip on the PCI bus, found as torch_xla finds one
before = installed_versions(WATCHED)
commands, notes, stop = install_plan(sys.version_info[:2], before, TPU, HOSTED,
                                     importlib.util.find_spec("common") is not None,
                                     COURSE_SOURCE, PINS)
if stop:
    raise SystemExit("error: " + stop)
for arguments in commands:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", *arguments], check=True)
importlib.invalidate_caches()
for note in notes:
    print("setup:", note)
loaded = {{name for name in before
          if {{"scikit-learn": "sklearn"}}.get(name, name.replace("-", "_")) in sys.modules}}
upgraded = upgraded_in_this_kernel(before, installed_versions(WATCHED), loaded)
if upgraded:
    raise SystemExit("setup: upgraded " + ", ".join(upgraded) + ", which this kernel had "
                     "already loaded: restart the runtime (Colab: Runtime > Restart session; "
                     "Kaggle: Run > Restart & clear cell outputs), then run the notebook again "
                     "from the top (this cell will then find everything installed)")
if TPU:
    os.environ.setdefault("PJRT_DEVICE", "TPU")  # with Colab or Kaggle: notebook_launcher's TPU branch
print("course modules:", importlib.util.find_spec("common").submodule_search_locations[0])
print("COURSE_ARGS:", os.environ.get("COURSE_ARGS", "(not set: the defaults)"))
print("TPU chips:", TPU or "none", "| PJRT_DEVICE:", os.environ.get("PJRT_DEVICE"))'''


def build():
    """Return the notebook (an nbformat NotebookNode, no outputs)."""
    source = train_cells()
    # comment_magics=False: the cells are plain Python, as they are in train.py
    notebook = jupytext.read(CELLS, fmt={"extension": ".py", "format_name": "percent",
                                         "comment_magics": False})
    cells = []
    for cell in notebook.cells:
        match = PLACEHOLDER.match(cell.source.strip())
        if cell.source.strip() == SETUP:
            cells.append(nbformat.v4.new_code_cell(setup_cell()))
        elif not match:
            cells.append(cell)
        elif int(match.group(1)) == 0:  # the module docstring: shown as text
            text = source[0].source.strip().strip('"').strip()
            cells.append(nbformat.v4.new_markdown_cell("```text\n" + text + "\n```"))
        else:
            cells.append(nbformat.v4.new_code_cell(source[int(match.group(1))].source))
    notebook.cells = cells
    for i, cell in enumerate(notebook.cells):
        cell.metadata = {}
        cell["id"] = f"cell-{i}"
    notebook.metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
        "accelerator": "TPU",
    }
    return notebook


def code_cells(notebook):
    """Return the sources of a notebook's code cells, in order."""
    return [cell.source for cell in notebook.cells if cell.cell_type == "code"]


def execute(notebook, output_dir):
    """Run the notebook top to bottom on a real Jupyter kernel (the embedded default, written
    to output_dir); add a text cell that says where and how long. Returns the notebook."""
    from nbclient import NotebookClient

    from accelerate_course.launching import describe_machine

    os.environ["COURSE_ARGS"] = f"--output-dir {output_dir}"
    os.environ.setdefault("HF_ENDPOINT", "http://127.0.0.1:9")  # the hub is not needed
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    start = time.perf_counter()
    NotebookClient(notebook, timeout=900, kernel_name="python3",
                   resources={"metadata": {"path": str(REPO)}}).execute()
    seconds = time.perf_counter() - start
    note = nbformat.v4.new_markdown_cell(
        f"*This copy was run by `make notebook` on the course's embedded default, with "
        f"`COURSE_ARGS=\"--output-dir {output_dir}\"`, on {describe_machine()}, in {seconds:.0f} s "
        f"(a real Jupyter kernel; the launch's 2 processes on the CPU).*")
    note["id"] = "cell-run"
    notebook.cells.insert(1, note)
    return notebook


def as_text(notebook):
    """Return the notebook as the JSON text written to disk."""
    return nbformat.writes(notebook) + "\n"


def main():
    parser = argparse.ArgumentParser(prog="python -m accelerate_course.maintain.build_notebook",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--no-run", action="store_true", help="write it without outputs")
    parser.add_argument("--output-dir", default="outputs/notebook")
    args = parser.parse_args()
    built = build()
    if args.check:
        committed = nbformat.read(NOTEBOOK, as_version=4) if NOTEBOOK.exists() else None
        if committed is None or code_cells(committed) != code_cells(built):
            sys.exit(f"error: {NOTEBOOK.relative_to(REPO)} is stale; run make notebook")
        return
    notebook = built if args.no_run else execute(built, args.output_dir)
    NOTEBOOK.write_text(as_text(notebook))
    print(f"wrote {NOTEBOOK.relative_to(REPO)}" + ("" if args.no_run else " with its outputs"))


if __name__ == "__main__":
    main()
