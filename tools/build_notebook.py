"""Build step4_tpu_notebook/tpu_training.ipynb from train.py and notebook_cells.py.

    python tools/build_notebook.py          (writes the notebook)
    python tools/build_notebook.py --check  (exit 1 if the committed notebook is stale)

Both sources are jupytext "percent" scripts (cells start with `# %%`). notebook_cells.py
holds the notebook's own cells (text, data, the first look, the metric); each of its cells
whose whole source is `# train.py: cell N` is replaced by train.py's cell N, unchanged
(cell 0, train.py's docstring, becomes a text cell). So the training code of the notebook
is train.py's own code, and tests/test_notebook.py fails when the two drift apart.
"""

import argparse
import re
import sys
from pathlib import Path

import jupytext
import nbformat

REPO = Path(__file__).resolve().parent.parent
FOLDER = REPO / "step4_tpu_notebook"
TRAIN = FOLDER / "train.py"
CELLS = FOLDER / "notebook_cells.py"
NOTEBOOK = FOLDER / "tpu_training.ipynb"
PLACEHOLDER = re.compile(r"^# train\.py: cell (\d+)$")


def train_cells():
    """Return train.py's cells, as jupytext reads them."""
    return jupytext.read(TRAIN, fmt="py:percent").cells


def build():
    """Return the notebook (an nbformat NotebookNode, no outputs)."""
    source = train_cells()
    # comment_magics=False: the "# !pip install" lines stay comments, to run by hand on a TPU
    notebook = jupytext.read(CELLS, fmt={"extension": ".py", "format_name": "percent",
                                         "comment_magics": False})
    cells = []
    for cell in notebook.cells:
        match = PLACEHOLDER.match(cell.source.strip())
        if not match:
            cells.append(cell)
            continue
        index = int(match.group(1))
        train_cell = source[index]
        if index == 0:  # the module docstring: shown as text
            text = train_cell.source.strip().strip('"').strip()
            cells.append(nbformat.v4.new_markdown_cell("```text\n" + text + "\n```"))
        else:
            cells.append(nbformat.v4.new_code_cell(train_cell.source))
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


def as_text(notebook):
    """Return the notebook as the JSON text written to disk."""
    return nbformat.writes(notebook) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    text = as_text(build())
    if args.check:
        if not NOTEBOOK.exists() or NOTEBOOK.read_text() != text:
            sys.exit(f"error: {NOTEBOOK.relative_to(REPO)} is stale; run python tools/build_notebook.py")
        return
    NOTEBOOK.write_text(text)
    print(f"wrote {NOTEBOOK.relative_to(REPO)}")


if __name__ == "__main__":
    main()
