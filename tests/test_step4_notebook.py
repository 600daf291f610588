"""Step 4: notebook_launcher on real CPU processes, the notebook on a real Jupyter kernel,
and the two things a TPU notebook must get right (the Accelerator inside the function,
the model outside it)."""

import json
import sys

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import REPO, SHORT_RUN, STEPS, assert_ok, read_metrics, run_command, run_cpu_launch

sys.path.insert(0, str(REPO))
from tools import build_notebook  # noqa: E402

SPY = REPO / "tests" / "helpers" / "spy_run.py"


@pytest.fixture(scope="module")
def step4_two_processes(tmp_path_factory):
    out = tmp_path_factory.mktemp("step4_two")
    result = run_command([sys.executable, SPY, out / "report", STEPS[4], "--output-dir", out,
                          "--num-processes", "2", *SHORT_RUN])
    assert_ok(result)
    return out, result


def test_notebook_launcher_runs_two_real_processes(step4_two_processes):
    out, result = step4_two_processes
    for i in range(2):  # what each launched process says about itself
        rank = json.loads((out / "report" / f"rank{i}.json").read_text())
        assert rank["process_index"] == i and rank["num_processes"] == 2
        assert rank["distributed_type"] == "DistributedType.MULTI_CPU"
        assert rank["backend"] == "gloo"
    metrics = read_metrics(out)
    assert metrics["num_processes"] == 2
    assert metrics["eval_gathered"] == 416 and metrics["eval_samples"] == 408
    assert "Num processes: 2" in result.stdout
    assert "gathered 416 predictions, kept 408" in result.stdout


def test_step4_matches_step3_on_the_same_number_of_processes(tmp_path, checkpoint_without_dropout):
    # Same seed, same initial weights, same batches in the same order (the processes of
    # notebook_launcher are forks that inherit the seeded random state). What differs is
    # the padding: 128 tokens instead of the longest pair of the batch. With dropout on,
    # that alone changes the run: dropout draws one random number per element, so a longer
    # batch draws other numbers and masks other units, and the two runs drift apart like two
    # seeds (the course runner compares full runs with a tolerance for that). With dropout
    # off, the padded positions are masked out of attention and the model computes the same
    # function: only the order of float sums in the larger matrix products differs, so the
    # losses agree to a relative 1e-4 and every prediction is the same.
    flags = ["--checkpoint", checkpoint_without_dropout, *SHORT_RUN]
    out3, out4 = tmp_path / "step3", tmp_path / "step4"
    assert_ok(run_cpu_launch(2, [STEPS[3], "--output-dir", out3, *flags]))
    assert_ok(run_command([sys.executable, STEPS[4], "--output-dir", out4, "--num-processes", "2",
                           *[str(f) for f in flags]]))
    three, four = read_metrics(out3), read_metrics(out4)
    assert three["num_processes"] == four["num_processes"] == 2
    assert len(four["train_losses"]) == len(three["train_losses"]) == 60
    for a, b in zip(three["train_losses"], four["train_losses"]):
        assert b == pytest.approx(a, rel=1e-4)
    assert four["predictions"] == three["predictions"]
    assert (four["accuracy"], four["f1"]) == (three["accuracy"], three["f1"])


def test_an_accelerator_created_before_the_launch_is_refused(tmp_path):
    code = f"""
import sys
sys.argv = ["train.py", "--output-dir", {str(tmp_path)!r}, "--num-processes", "2"]
from accelerate import Accelerator
import runpy
step = runpy.run_path({str(STEPS[4])!r}, run_name="step4")
Accelerator()  # the mistake: an Accelerator in the notebook, before the launch
step["main"]()
"""
    result = run_command([sys.executable, "-c", code], timeout=120)
    assert result.returncode != 0
    assert "ValueError" in result.stderr
    assert "the `Accelerator` should only be initialized inside your training function" in result.stderr
    assert not (tmp_path / "metrics.json").exists()


def test_the_notebook_is_built_from_train_py():
    assert build_notebook.NOTEBOOK.read_text() == build_notebook.as_text(build_notebook.build())


def test_every_training_cell_of_train_py_is_in_the_notebook_unchanged():
    notebook = nbformat.read(build_notebook.NOTEBOOK, as_version=4)
    code = [cell.source for cell in notebook.cells if cell.cell_type == "code"]
    train_cells = build_notebook.train_cells()
    assert len(train_cells) == 4
    for cell in train_cells[1:]:  # cell 0 is the docstring, shown as text
        assert cell.source in code
    assert code.index(train_cells[2].source) < code.index(train_cells[3].source)


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
