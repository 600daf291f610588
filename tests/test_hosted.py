"""The notebooks as a class opens them on Colab or Kaggle: a fresh runtime with only torch (and
the Jupyter kernel every hosted runtime has), an empty folder holding only the notebook, and
the course published at its tag in a git repository (here a local one: file://). Run by
`make test-hosted` (in CI, not in make test: it installs the Hugging Face libraries into that
fresh runtime, a few minutes). Each notebook runs on a real Jupyter kernel of that runtime:

- step 4's notebook, without a source: its setup cell stops in one line, and no cell after it
  runs; with the source: it installs what it lacks and runs to the end;
- the whole course's notebook (docs/course_on_colab.ipynb), without a repository: one line;
  with it: it clones the course at its tag and runs make course's steps, a lesson's diff, its
  what-if lab and its check.
"""

import json
import os
import shutil
import subprocess
import sys

import nbformat
import pytest
from conftest import REPO, enterable_by_others
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from accelerate_course.maintain import build_notebook

pytestmark = [
    pytest.mark.runs,
    pytest.mark.skipif(
        os.environ.get("COURSE_HOSTED_TEST") != "1",
        reason="a fresh runtime, a few minutes: make test-hosted",
    ),
]
TAG = build_notebook.version_tag()


@pytest.fixture
def runtime(tmp_path_factory):
    """A fresh Python with torch only and a Jupyter kernel, as a kernelspec named
    fresh-runtime (JUPYTER_PATH points at it): one for each test, as each student's runtime
    starts without what another installed."""
    folder = tmp_path_factory.mktemp("runtime")
    enterable_by_others(folder)  # a runtime's Python, readable by every user as on Colab
    venv = folder / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "torch==2.13.0", "ipykernel"], check=True
    )
    spec = folder / "jupyter" / "kernels" / "fresh-runtime"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "a fresh runtime",
                "language": "python",
            }
        )
    )
    return folder / "jupyter", python


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """The course as a teacher publishes it: this working tree (what git tracks and does not
    ignore) committed and tagged, in a bare repository; its file:// URL."""
    folder = tmp_path_factory.mktemp("published")
    work = folder / "work"
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for name in files:
        if (REPO / name).is_file():
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, work / name)
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@x",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@x",
    }
    for command in (
        ["init", "--quiet"],
        ["add", "-A"],
        ["commit", "--quiet", "-m", "course"],
        ["tag", TAG],
    ):
        subprocess.run(["git", *command], cwd=work, check=True, env=env)
    subprocess.run(
        ["git", "clone", "--quiet", "--bare", str(work), str(folder / "course.git")], check=True
    )
    return (folder / "course.git").as_uri()


def opened(path, tmp_path, replace):
    """Copy a notebook alone into an empty folder, with its first lines set as a student sets
    them ({old: new}) and its committed outputs and execution counts removed, so that what a
    test reads, and which cells ran, are this run's own; return (the copy, the folder)."""
    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:
        for old, new in replace.items():
            cell.source = cell.source.replace(old, new)
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
            cell.metadata.pop("execution", None)
    folder = tmp_path / "alone"
    folder.mkdir()
    enterable_by_others(folder)  # the course it clones, readable by the grader's own user
    nbformat.write(notebook, folder / path.name)
    return nbformat.read(folder / path.name, as_version=4), folder


def run(notebook, folder, runtime, monkeypatch, **env):
    """Execute a notebook on the fresh runtime's kernel, from its folder."""
    jupyter_path, python = runtime
    monkeypatch.setenv("JUPYTER_PATH", str(jupyter_path))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # no hub: the embedded default
    monkeypatch.setenv("PATH", f"{python.parent}:{os.environ['PATH']}")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    client = NotebookClient(
        notebook,
        timeout=900,
        kernel_name="fresh-runtime",
        resources={"metadata": {"path": str(folder)}},
    )
    client.execute()
    return notebook


def text_of(notebook):
    return "".join(
        output.get("text", "") for cell in notebook.cells for output in cell.get("outputs", [])
    )


def stopped_in_one_line(notebook, runtime, monkeypatch, folder, said):
    with pytest.raises(CellExecutionError):
        run(notebook, folder, runtime, monkeypatch)
    errors = [
        (i, output)
        for i, cell in enumerate(notebook.cells)
        for output in cell.get("outputs", [])
        if output.output_type == "error"
    ]
    assert len(errors) == 1, errors
    at, error = errors[0]
    assert error.traceback == [error.traceback[0]] and error.traceback[0].startswith("setup: ")
    assert said in error.traceback[0], error.traceback
    later = [cell for cell in notebook.cells[at + 1 :] if cell.cell_type == "code"]
    assert later and all(cell.execution_count is None for cell in later)  # Run all stopped


def test_step4_without_a_source_stops_in_one_line(tmp_path, runtime, monkeypatch):
    source = f'COURSE_SOURCE = "{build_notebook.course_source()}"'
    notebook, folder = opened(build_notebook.NOTEBOOK, tmp_path, {source: 'COURSE_SOURCE = ""'})
    stopped_in_one_line(
        notebook,
        runtime,
        monkeypatch,
        folder,
        "this cell names no COURSE_SOURCE: type at its top where the course is published",
    )


def test_step4_with_a_git_source_runs_to_the_end(tmp_path, runtime, monkeypatch, published):
    source = f'COURSE_SOURCE = "{build_notebook.course_source()}"'
    notebook, folder = opened(
        build_notebook.NOTEBOOK, tmp_path, {source: f'COURSE_SOURCE = "git+{published}@{TAG}"'}
    )
    out = tmp_path / "out"
    done = run(
        notebook,
        folder,
        runtime,
        monkeypatch,
        COURSE_ARGS=f"--max-train-steps 20 --output-dir {out}",
    )
    text = text_of(done)
    assert f"setup: installs the course from git+{published}@{TAG}" in text
    assert "untrained head:" in text and "gathered 416 predictions, kept 408" in text
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["num_processes"] == 2 and len(metrics["train_losses"]) == 20


def test_the_course_notebook_without_a_repository_stops_in_one_line(tmp_path, runtime, monkeypatch):
    notebook, folder = opened(
        build_notebook.COURSE_NOTEBOOK, tmp_path, {f'TAG = "{TAG}"': f'TAG = "{TAG}"'}
    )
    for cell in notebook.cells:
        cell.source = "\n".join(
            'REPOSITORY = ""' if line.startswith("REPOSITORY =") else line
            for line in cell.source.splitlines()
        )
    stopped_in_one_line(
        notebook, runtime, monkeypatch, folder, "the cell above names no REPOSITORY"
    )


def test_the_course_notebook_clones_the_course_and_runs_its_commands(
    tmp_path, runtime, monkeypatch, published
):
    notebook, folder = opened(
        build_notebook.COURSE_NOTEBOOK,
        tmp_path,
        {'FLAGS = ""': 'FLAGS = "--steps 1 2 --max-train-steps 20"', "LESSON = 3": "LESSON = 2"},
    )
    for cell in notebook.cells:
        cell.source = "\n".join(
            f'REPOSITORY = "{published}"' if line.startswith("REPOSITORY =") else line
            for line in cell.source.splitlines()
        )
    text = text_of(run(notebook, folder, runtime, monkeypatch))
    assert "setup: installs transformers" in text and (folder / "course" / ".git").exists()
    # make course: matplotlib, which the fresh runtime lacks, installed in one line first
    pin = next(
        line
        for line in (REPO / "requirements.txt").read_text().splitlines()
        if line.startswith("matplotlib==")
    )
    assert f"setup: installs {pin}, which this runtime lacks" in text
    assert "launch plan (" in text and "step 1 and step 2 side by side" in text
    assert "training-loss curves:" in text and "ModuleNotFoundError" not in text
    # make lesson: the kernel runs ! commands in a terminal, so git's words in colour
    assert "step2_accelerate/train.py" in text and "accelerator.backward(loss)" in text
    assert "Step 2: " in text and "mixed precision: bf16 autocast" in text  # make what-if
    # the exercise written, a cell to edit it (no Colab here: where it is), then make check
    exercise = folder / "course" / "exercises" / "step2" / "train.py"
    assert "wrote exercises/step2/train.py" in text and f"edit {exercise}" in text
    assert "checks passed in" in text and "FAIL" in text and "0 of 5 points." in text

    # a student edits the exercise and runs the exercise's cell again: the edit is kept
    exercise.write_text(exercise.read_text() + "# my work\n")
    again = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell("import os, sys\nos.chdir('course')\nLESSON = 2"),
            next(
                cell
                for cell in notebook.cells
                if cell.cell_type == "code" and "accelerate_course.exercise {LESSON}" in cell.source
            ),
        ]
    )
    rerun = text_of(run(again, folder, runtime, monkeypatch))
    assert exercise.read_text().endswith("# my work\n")
    assert "kept exercises/step2/train.py: it has your changes" in rerun
