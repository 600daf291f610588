"""Step 4: notebook_launcher on real CPU processes, the notebook on a real Jupyter kernel,
and the two things a TPU notebook must get right (the Accelerator inside the function,
the model outside it)."""

import json

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import REPO, read_metrics

from accelerate_course.maintain import build_notebook



@pytest.mark.step4
def test_notebook_launcher_runs_two_real_processes(lab_runs):
    # step 4 run as `python step4_tpu_notebook/train.py --num-processes 2`, with no
    # ACCELERATE_USE_CPU in the environment: the step's Accelerator(cpu=...) line alone makes
    # the two processes of notebook_launcher one group on this machine without a GPU
    runs = lab_runs(4)
    run, folder = runs["lesson"], runs.folder / "runs" / "lesson"
    assert run.error is None
    for i in range(2):  # what each launched process says about itself
        rank = json.loads((folder / f"rank{i}.json").read_text())
        assert rank["process_index"] == i and rank["num_processes"] == 2
        assert rank["distributed_type"] == "DistributedType.MULTI_CPU"
        assert rank["backend"] == "gloo"
    assert run.num_processes == 2 and run.alone == 0
    assert run.gathered == 416 and len(run.predictions) == 408
    assert run.predictions == run.alone_predictions
    out = (folder / "rank0.out").read_text()
    assert "Num processes: 2" in out
    assert "gathered 416 predictions, kept 408" in out
    # the model was made once, in the launching process, and every batch had 128 tokens
    assert run.models_created_before == 1 and run.models_created_inside == 0
    assert run.lengths == [128]


@pytest.mark.step4
def test_step4_matches_step3_on_the_same_number_of_processes(lab_runs):
    # Same seed, same initial weights, same batches in the same order (the processes of
    # notebook_launcher are forks that inherit the seeded random state). What differs is
    # the padding: 128 tokens instead of the longest pair of the batch. With dropout on,
    # that alone changes the run: dropout draws one random number per element, so a longer
    # batch draws other numbers and masks other units, and the two runs drift apart like two
    # seeds (the course runner compares full runs with a tolerance for that). With dropout
    # off (the lab runs step 4 and step 3 here on such a copy of the checkpoint), the padded
    # positions are masked out of attention and the model computes the same function: only
    # the order of float sums in the larger matrix products differs, so the losses agree to
    # a relative 1e-4 and every prediction is the same.
    runs = lab_runs(4)
    three, four = runs.runs["step3"]["lesson"], runs["lesson"]
    assert three.num_processes == four.num_processes == 2
    assert len(four.losses) == len(three.losses) == 30
    for a, b in zip(three.losses, four.losses):
        assert b == pytest.approx(a, rel=1e-4)
    assert four.predictions == three.predictions
    assert (four.accuracy, four.f1) == (three.accuracy, three.f1)


@pytest.mark.step4
def test_an_accelerator_created_before_the_launch_is_refused(lab_runs):
    # the what-if variant accelerator_before_launch: an Accelerator() in main(), before
    # notebook_launcher, as a notebook cell would create it
    runs = lab_runs(4)
    run = runs["accelerator_before_launch"]
    assert run.error.startswith("ValueError")
    assert "the `Accelerator` should only be initialized inside your training function" in run.error
    assert run.writes == 0
    assert not (runs.folder / "runs" / "accelerator_before_launch" / "output" / "metrics.json").exists()


def test_the_notebook_is_built_from_train_py():
    committed = nbformat.read(build_notebook.NOTEBOOK, as_version=4)
    built = build_notebook.build()
    assert build_notebook.code_cells(committed) == build_notebook.code_cells(built), \
        "the notebook is stale: run make notebook"
    # its text cells too, but for the one that says where this copy was run
    text = [c.source for c in committed.cells if c.cell_type == "markdown" and c.id != "cell-run"]
    assert text == [c.source for c in built.cells if c.cell_type == "markdown"]


def test_the_committed_notebook_was_run_top_to_bottom_with_outputs():
    notebook = nbformat.read(build_notebook.NOTEBOOK, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert [cell.execution_count for cell in code] == list(range(1, len(code) + 1))
    outputs = {cell.id: "".join(o.get("text", "") for o in cell.outputs) for cell in code}
    assert not any(o.get("output_type") == "error" for cell in code for o in cell.outputs)
    everything = "\n".join(outputs.values())
    assert "untrained head: {'accuracy'" in everything  # the metric on the untrained head
    assert "Num processes: 2" in everything and "gathered 416 predictions, kept 408" in everything
    html = [o for cell in code for o in cell.outputs if "text/html" in o.get("data", {})]
    assert html, "the data table is shown"
    ran = next(c for c in notebook.cells if c.get("id") == "cell-run")
    assert "CPU cores" in ran.source and "make notebook" in ran.source  # the hardware, named


def test_the_notebook_says_only_true_things_about_the_tpu_before_the_launch():
    # nothing before the launch uses a TPU: the cells that run the model say "on the CPU",
    # and no cell creates an Accelerator or moves anything to an XLA device
    built = build_notebook.build()
    code = build_notebook.code_cells(built)
    before_launch = code[:code.index(build_notebook.train_cells()[3].source)]
    for source in before_launch:
        assert "Accelerator(" not in source or "def training_function" in source
        assert "xla_device" not in source and "torch_xla.device" not in source
        assert "set_seed(42)" not in source and '"embedded"' not in source  # the launch's settings
    assert any("parse_args()" in source for source in before_launch)


def test_every_training_cell_of_train_py_is_in_the_notebook_unchanged():
    notebook = nbformat.read(build_notebook.NOTEBOOK, as_version=4)
    code = [cell.source for cell in notebook.cells if cell.cell_type == "code"]
    train_cells = build_notebook.train_cells()
    assert len(train_cells) == 4
    for cell in train_cells[1:]:  # cell 0 is the docstring, shown as text
        assert cell.source in code
    assert code.index(train_cells[2].source) < code.index(train_cells[3].source)


@pytest.mark.runs
def test_the_notebook_runs_top_to_bottom_on_a_real_kernel(tmp_path, monkeypatch):
    notebook = nbformat.read(build_notebook.NOTEBOOK, as_version=4)
    out = tmp_path / "notebook"
    # the kernel inherits this environment: a short run, and no hub
    monkeypatch.setenv("COURSE_ARGS", f"--max-train-steps 20 --output-dir {out}")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    client = NotebookClient(notebook, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(REPO)}})
    client.execute()
    outputs = "".join(o.get("text", "") for cell in notebook.cells for o in cell.get("outputs", []))
    assert "untrained head:" in outputs
    metrics = read_metrics(out)
    assert metrics["num_processes"] == 2
    assert metrics["eval_gathered"] == 416 and metrics["eval_samples"] == 408
    assert len(metrics["train_losses"]) == 20
