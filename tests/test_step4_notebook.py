"""Step 4: notebook_launcher on real CPU processes, the notebook on a real Jupyter kernel,
and the two things a TPU notebook must get right (the Accelerator inside the function,
the model outside it)."""

import ast
import json
import os
import re
import sys

import nbformat
import pytest
from conftest import REPO, read_metrics, run_command, run_step
from nbclient import NotebookClient

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
    assert run.accelerator_processes == 2 and run.processes_alone == 0
    assert run.gathered == 416 and len(run.predictions) == 408
    assert run.predictions == run.alone_predictions
    out = (folder / "rank0.out").read_text()
    assert "Num processes: 2" in out
    assert "gathered 416 predictions, kept 408" in out
    # the model was made once, in the launching process, and every batch had 128 tokens
    assert run.models_created_before == 1 and run.models_created_inside == 0
    assert run.lengths == [128]
    # end_training() left the group in notebook_launcher's processes too: Accelerate skips it
    # only when FORK_LAUNCHED is set, which PrepareForLaunch sets, and notebook_launcher's CPU
    # and GPU branch hands elastic_launch the bare function (accelerate launchers.py)
    assert run.left_group is True


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
    three, four = runs.step3_without_dropout, runs["lesson"]
    assert three.accelerator_processes == four.accelerator_processes == 2
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
    assert not (
        runs.folder / "runs" / "accelerator_before_launch" / "output" / "metrics.json"
    ).exists()


def test_the_notebook_is_built_from_train_py():
    committed = nbformat.read(build_notebook.NOTEBOOK, as_version=4)
    built = build_notebook.build()
    assert build_notebook.code_cells(committed) == build_notebook.code_cells(built), (
        "the notebook is stale: run make notebook"
    )
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
    before_launch = code[: code.index(build_notebook.train_cells()[3].source)]
    for source in before_launch:
        assert "Accelerator(" not in source or "def training_function" in source
        assert "xla_device" not in source and "torch_xla.device" not in source
        if "hyperparameters = {" not in source:  # the others read the settings from args
            assert "set_seed(42)" not in source and '"embedded"' not in source
    assert any("parse_args(settings=hyperparameters)" in source for source in before_launch)


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
    # the kernel's environment, once the imports ran and after the launch: the course sets
    # nothing in it (a later one-process run in this kernel sees what the student set)
    settings = next(
        i for i, cell in enumerate(notebook.cells) if "hyperparameters = {" in cell.source
    )
    notebook.cells.insert(
        settings, nbformat.v4.new_code_cell("import os as _os\n_before = dict(_os.environ)")
    )
    notebook.cells.append(
        nbformat.v4.new_code_cell(
            "_after = dict(_os.environ)\n"
            "print(sorted(k for k in {*_before, *_after} if _before.get(k) != _after.get(k)))"
        )
    )
    client = NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(REPO)}}
    )
    client.execute()
    outputs = "".join(o.get("text", "") for cell in notebook.cells for o in cell.get("outputs", []))
    assert "untrained head:" in outputs
    changed = set(ast.literal_eval(notebook.cells[-1].outputs[0]["text"]))
    print(f"\nthe kernel's os.environ, the variables step 4 changed: {sorted(changed)}")
    # at most what torch writes itself, where this environment did not have it already:
    # elastic's launch (torch/distributed/launcher/api.py:307) and inductor's C++ builder
    # (torch/_inductor/cpp_builder.py:1429), both read in the source
    assert changed <= {"KMP_DUPLICATE_LIB_OK", "TORCHELASTIC_SIGNALS_TO_HANDLE"}, changed
    metrics = read_metrics(out)
    assert metrics["num_processes"] == 2
    assert metrics["eval_gathered"] == 416 and metrics["eval_samples"] == 408
    assert len(metrics["train_losses"]) == 20


# what a student sees when the notebook is opened from a link --------------------------------


def committed_outputs():
    notebook = nbformat.read(build_notebook.NOTEBOOK, as_version=4)
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            yield (
                cell,
                output,
                output.get("text", "")
                + "".join(
                    value for value in output.get("data", {}).values() if isinstance(value, str)
                ),
            )


# an absolute path: /something/else... after a space, a quote, a bracket or the line's start
ABSOLUTE_PATH = re.compile(r"(?:^|[\s'\"(=\[])(/(?:[\w.-]+/)+[\w.-]*)", re.M)


def test_the_committed_outputs_hold_no_path_of_the_machine_that_ran_them():
    found = [
        (cell.id, match.group(1))
        for cell, _, text in committed_outputs()
        for match in ABSOLUTE_PATH.finditer(text)
    ]
    assert found == [], found
    text = build_notebook.NOTEBOOK.read_text()
    for path in (str(REPO), sys.prefix, os.path.expanduser("~"), "/tmp/"):
        assert path not in text, path


def test_the_committed_outputs_keep_progress_bars_as_their_last_state_and_no_setup_line():
    streams = [
        (cell, output) for cell, output, _ in committed_outputs() if output.output_type == "stream"
    ]
    assert streams and not any("\r" in output.text for _, output in streams)
    setup = build_notebook.setup_cell()
    notebook = nbformat.read(build_notebook.NOTEBOOK, as_version=4)
    setup_cells = [cell for cell in notebook.cells if cell.source == setup]
    assert len(setup_cells) == 1 and setup_cells[0].outputs == []  # it says what a machine has
    assert not any("setup:" in text for _, _, text in committed_outputs())


def test_the_notebooks_links_work_when_it_is_opened_alone():
    notebook = build_notebook.build()
    text = "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "markdown")
    links = re.findall(r"\]\(([^)]+)\)", text)
    assert links and all(link.startswith("https://") for link in links), links
    repository = build_notebook.repository()
    assert (
        f"https://colab.research.google.com/github/{repository.split('github.com/')[1]}"
        f"/blob/{build_notebook.version_tag()}/step4_tpu_notebook/tpu_training.ipynb" in text
    )
    assert f"https://kaggle.com/kernels/welcome?src={repository}/blob/" in text


def test_the_setup_is_one_short_cell_whose_first_line_says_where_the_course_comes_from():
    # issue 45: the set-up one short cell (about 30 lines at most), no library source pasted
    notebook = build_notebook.build()
    first = next(cell for cell in notebook.cells if cell.cell_type == "code")
    code = [line for line in first.source.splitlines() if not line.startswith("#")]
    assert code[0] == f'COURSE_SOURCE = "{build_notebook.course_source()}"'
    assert len(first.source.splitlines()) <= 30 and "def tpu_chips" not in first.source
    assert "sys.path" not in first.source
    # the lesson comes before the optional looks at the data and the model
    headings = [
        cell.source.splitlines()[0]
        for cell in notebook.cells
        if cell.cell_type == "markdown" and cell.source.startswith("#")
    ]
    assert headings.index("## The launch") < headings.index("## Looking closer (optional)")


def test_the_settings_are_a_dictionary_that_the_launch_reads(monkeypatch):
    # the seed notebook's hyperparameters cell: the launch's main() parses what it says
    from common import cli

    notebook = build_notebook.build()
    cell = next(c.source for c in notebook.cells if "hyperparameters = {" in c.source)
    assert "args = parse_args(settings=hyperparameters)" in cell
    settings = {}
    exec(cell.split("args = parse_args")[0], {}, settings)
    hyperparameters = settings["hyperparameters"]
    assert {
        "lr",
        "epochs",
        "train_batch_size",
        "eval_batch_size",
        "seed",
        "checkpoint",
        "dataset",
        "num_processes",
    } <= set(hyperparameters)
    args = cli.parse_args(settings=dict(hyperparameters, lr=2e-5, epochs=1))
    assert (args.lr, args.epochs, args.train_batch_size, args.num_processes) == (2e-5, 1, 8, 2)
    assert args.max_train_steps is None
    # in a kernel, main()'s own parse_args() gets the cell's settings, then COURSE_ARGS's flags
    monkeypatch.setitem(sys.modules, "ipykernel", sys.modules.get("ipykernel", object()))
    monkeypatch.setattr(cli, "KERNEL_SETTINGS", {})
    monkeypatch.setenv("COURSE_ARGS", "--epochs 2 --deterministic")
    cli.parse_args(settings=dict(hyperparameters, lr=2e-5, epochs=1, checkpoint="a b"))
    args = cli.parse_args(description="main()'s call")
    assert (args.lr, args.epochs, args.checkpoint, args.deterministic) == (2e-5, 2, "a b", True)


# Kaggle's TPU v5e-8: 8 processes, one per chip -------------------------------------------


def test_on_8_processes_accelerate_shares_the_batches_as_the_runtime_page_says():
    # Accelerate's own sharding (the same on XLA, where MpDeviceLoaderWrapper wraps it): the
    # 459 training batches of 8 completed to 58 per process, the 51 evaluation batches to 7
    from accelerate.data_loader import BatchSamplerShard
    from torch.utils.data import BatchSampler, SequentialSampler

    def per_process(pairs, batch_size=8, processes=8):
        batches = BatchSampler(SequentialSampler(range(pairs)), batch_size, drop_last=False)
        return [
            list(BatchSamplerShard(batches, processes, rank, even_batches=True))
            for rank in range(processes)
        ]

    train = per_process(3668)
    assert {len(shard) for shard in train} == {58} and 3 * 58 == 174  # the notebook's 3 epochs
    assert all(len(batch) == 8 for shard in train for batch in shard)  # every batch full
    evaluation = per_process(408)
    assert {len(shard) for shard in evaluation} == {7}
    assert sum(len(batch) for shard in evaluation for batch in shard) == 448


@pytest.mark.runs
@pytest.mark.step4
def test_8_gloo_processes_standing_in_for_8_chips_gather_448_and_keep_408(tmp_path):
    result = run_step(
        4, tmp_path, "--num-processes", "8", "--max-train-steps", "2", OMP_NUM_THREADS="1"
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert "Num processes: 8" in result.stdout  # from inside the processes
    metrics = read_metrics(tmp_path)
    assert metrics["num_processes"] == 8
    assert (metrics["eval_gathered"], metrics["eval_samples"]) == (448, 408)


@pytest.mark.runs
def test_a_second_launch_after_an_in_process_run_refuses(tmp_path):
    # in a real Jupyter kernel: notebook_launcher with one process runs the function in the
    # kernel's own process (as on Colab with a CPU or one GPU); the Accelerator it made stays
    # in the kernel, so a launch of 2 processes then refuses, end_training() or not, until
    # the kernel restarts (accelerate 1.15.0 launchers.py:174-179)
    notebook = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(source)
            for source in [
                "from accelerate import Accelerator, notebook_launcher\n"
                "def function():\n"
                "    accelerator = Accelerator(cpu=True)\n"
                "    accelerator.print(f'{accelerator.num_processes} process(es)')\n"
                "    accelerator.end_training()",
                "notebook_launcher(function, num_processes=1)",
                "try:\n"
                "    notebook_launcher(function, num_processes=2)\n"
                "except ValueError as refused:\n"
                "    print('refused:', refused)",
            ]
        ]
    )
    client = NotebookClient(
        notebook,
        timeout=120,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()
    said = ["".join(o.get("text", "") for o in cell.get("outputs", [])) for cell in notebook.cells]
    assert said[1].strip().endswith("1 process(es)")
    assert said[2].startswith(
        "refused: To launch a multi-device training from your notebook, the "
        "`Accelerator` should only be initialized inside your training "
        "function."
    ), said[2]


@pytest.mark.runs
def test_the_forked_processes_connect_only_once_all_are_forked(tmp_path):
    # the gate that keeps notebook_launcher's forks apart from its store thread's name lookups
    # (common/launch.py, connect_after_all_forked, says why): 3 real forks, 0.5 s apart, as
    # multiprocessing's fork start does them; each forked process notes when it goes on, the
    # launcher when it forked the last one. Without the gate the first goes on about a second
    # before the last fork.
    script = tmp_path / "forks.py"
    script.write_text(
        "import json, multiprocessing, sys, time\n"
        "from common.launch import connect_after_all_forked\n"
        "def note(queue):\n"
        "    queue.put(time.monotonic())\n"
        "connect_after_all_forked(3)\n"
        "context = multiprocessing.get_context('fork')\n"
        "queue = context.Queue()\n"
        "processes = []\n"
        "for _ in range(3):\n"
        "    processes.append(context.Process(target=note, args=(queue,)))\n"
        "    processes[-1].start()\n"
        "    last_fork = time.monotonic()\n"
        "    time.sleep(0.5)\n"
        "went_on = sorted(queue.get(timeout=60) for _ in processes)\n"
        "for process in processes:\n"
        "    process.join()\n"
        "print(json.dumps({'last_fork': last_fork, 'went_on': went_on}))\n"
    )
    result = run_command([sys.executable, str(script)], timeout=120)
    assert result.returncode == 0, result.stderr
    times = json.loads(result.stdout)
    assert min(times["went_on"]) >= times["last_fork"], times
