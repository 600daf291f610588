"""What the step 4 notebook's setup cell does on each runtime a class opens it on:
common/notebook_setup.py's install_plan (the cell runs its own source) for the runtimes of
docs/notebook-setup.md, whose table is checked against it here; and the course as pip
installs it there (a wheel of this repository: the embedded default and the metric inside)."""

import shutil
import subprocess
import sys
import zipfile

import pytest
from conftest import REPO

from accelerate_course.maintain.build_notebook import pinned_packages
from common.notebook_setup import install_plan, upgraded_in_this_kernel

PINS = pinned_packages()
LIBRARIES = {
    pin.split("==")[0]: pin.split("==")[1] for pin in PINS if not pin.startswith("torch==")
}
SOURCE = "git+https://github.com/<owner>/<course>@v0.1.0"

# (runtime, Python, what it has installed, TPU chips): each current runtime with the versions
# read in its own published files (docs/notebook-setup.md says where: not observed, there is
# no Colab or Kaggle from here; the cell prints what it finds), and the cases that stop
RUNTIMES = [
    (
        "Colab TPU v5e-1 or v6e-1",
        (3, 13),
        {"torch": "2.9.0+cpu", "torch_xla": "2.9.0", "scikit-learn": "1.6.1"},
        ["v5e"],
    ),
    (
        "Kaggle TPU v5e-8",
        (3, 12),
        {"torch": "2.8.0+cpu", "torch_xla": "2.8.0", "scikit-learn": "1.6.1"},
        ["v5e"] * 8,
    ),
    ("Colab GPU (T4)", (3, 13), {"torch": "2.11.0+cu128", "scikit-learn": "1.6.1"}, []),
    ("Colab CPU", (3, 13), {"torch": "2.11.0+cpu", "scikit-learn": "1.6.1"}, []),
    ("Kaggle GPU T4 x2", (3, 12), {"torch": "2.10.0+cu128", "scikit-learn": "1.6.1"}, []),
    ("a Google Cloud TPU VM v2-8 or v3-8 without torch_xla", (3, 12), {}, ["v2/v3"] * 4),
    ("a TPU machine on Python 3.13 without torch_xla", (3, 13), {"torch": "2.9.0"}, ["v5e"]),
    ("any runtime on Python 3.10", (3, 10), {"torch": "2.8.0"}, []),
    (
        "a runtime without the course, and no COURSE_SOURCE",
        (3, 13),
        {"torch": "2.11.0+cpu", "scikit-learn": "1.6.1"},
        [],
    ),
    ("the course's folder (make install)", (3, 11), {"torch": "2.13.0", **LIBRARIES}, []),
]


def plan_for(python, installed, tpu, hosted=True, course_found=False, course_source=SOURCE):
    return install_plan(python, installed, tpu, hosted, course_found, course_source, PINS)


def table_row(runtime, python, installed, tpu):
    in_folder = runtime.startswith("the course's folder")
    source = "" if "no COURSE_SOURCE" in runtime else SOURCE
    commands, notes, stop = plan_for(
        python, installed, tpu, hosted=not in_folder, course_found=in_folder, course_source=source
    )
    does = f"stops: {stop}" if stop else "; ".join(notes)
    return f"| {runtime} | {python[0]}.{python[1]} | {does} |"


def test_the_pages_table_is_what_install_plan_does():
    rows = [table_row(*runtime) for runtime in RUNTIMES]
    print("\n" + "\n".join(rows))
    page = (REPO / "docs" / "notebook-setup.md").read_text()
    for row in rows:
        assert row in page, row


def test_a_tpu_runtime_keeps_a_matching_preinstalled_pair():
    commands, notes, stop = plan_for(
        (3, 11), {"torch": "2.8.0+cpu", "torch_xla": "2.8.0"}, ["v2/v3"]
    )
    assert stop is None
    assert not any(
        arg.startswith(("torch==", "torch_xla")) for command in commands for arg in command
    )
    assert "keeps the runtime's torch 2.8.0+cpu and torch_xla 2.8.0" in notes[0]


def test_a_tpu_runtime_without_a_matching_pair_gets_the_cpu_build_of_torch():
    for installed in ({"torch": "2.9.0"}, {"torch": "2.8.0", "torch_xla": "2.7.0"}):
        commands, notes, stop = plan_for((3, 12), installed, ["v5e"])
        assert commands[0] == [
            "torch==2.9.0",
            "--index-url",
            "https://download.pytorch.org/whl/cpu",
        ]
        assert commands[1][0] == "torch_xla[tpu]==2.9.0"


def test_python_versions_the_pins_cannot_install_on_stop_in_one_line():
    for python, tpu in (((3, 10), []), ((3, 10), ["v2/v3"]), ((3, 13), ["v5e"])):
        commands, notes, stop = plan_for(python, {"torch": "2.9.0"}, tpu)
        assert commands == [] and stop and "\n" not in stop
        assert "Python 3.11" in stop


def test_a_torch_older_than_transformers_needs_is_replaced():
    commands, notes, stop = plan_for((3, 11), {"torch": "2.5.1", "torch_xla": "2.5.1"}, ["v2/v3"])
    assert commands[0][0] == "torch==2.9.0" and commands[1][0] == "torch_xla[tpu]==2.9.0"
    commands, notes, stop = plan_for((3, 11), {"torch": "2.5.1+cu121"}, [])
    assert commands[0] == ["torch==2.13.0"] and "older than transformers needs" in notes[0]


def test_gpu_and_cpu_runtimes_keep_their_torch():
    commands, notes, stop = plan_for((3, 12), {"torch": "2.9.0+cu126"}, [])
    assert not any(arg.startswith("torch==") for command in commands for arg in command)
    assert commands[-1] == [SOURCE]


def test_the_course_is_installed_from_its_source_or_the_cell_says_where_to_set_it():
    commands, notes, stop = plan_for((3, 12), {"torch": "2.9.0"}, [], course_source="")
    assert commands == [] and "COURSE_SOURCE" in stop
    commands, notes, stop = plan_for(
        (3, 12), {"torch": "2.9.0", "scikit-learn": "1.6.1", **LIBRARIES}, [], course_found=True
    )
    assert commands == [] and stop is None  # on Colab with the course already installed


def test_an_upgrade_of_a_loaded_package_asks_for_a_restart():
    before = {"numpy": "2.0.2", "pandas": "2.2.2", "datasets": "4.0.0"}
    after = {"numpy": "2.4.6", "pandas": "2.2.2", "datasets": "5.2.0"}
    assert upgraded_in_this_kernel(before, after, {"numpy", "pandas"}) == ["numpy"]
    assert upgraded_in_this_kernel(before, after, set()) == []


@pytest.mark.runs
def test_the_course_as_pip_installs_it_carries_the_embedded_default_and_the_metric(tmp_path):
    # what the notebook's COURSE_SOURCE gives a Colab or Kaggle runtime: a build of this
    # repository's package, unpacked where Python finds it before the checkout
    # built from a copy of what the package is made of (a build in the checkout would leave
    # its build/ folder there)
    source = tmp_path / "source"
    source.mkdir()
    shutil.copy(REPO / "pyproject.toml", source)
    for package in ("common", "accelerate_course"):
        shutil.copytree(
            REPO / package, source / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(source),
        ],
        check=True,
    )
    (wheel,) = tmp_path.glob("accelerate_course-*.whl")
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    shipped = sorted(
        str(p.relative_to(REPO))
        for folder in ("data", "checkpoint")
        for p in (REPO / "common" / "embedded" / folder).iterdir()
    )
    assert all((site / name).is_file() for name in shipped), shipped
    check = (
        "import common, evaluate\n"
        "from common.checkpoint import resolve_checkpoint\n"
        "from common.data import load_splits\n"
        "from common.metric import GLUE_MRPC_METRIC\n"
        f"assert common.__file__.startswith({str(site)!r}), common.__file__\n"
        "print(len(load_splits('embedded')['validation']), resolve_checkpoint('embedded'))\n"
        "print(evaluate.load(GLUE_MRPC_METRIC).compute(predictions=[1, 0], references=[1, 1]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", check],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={
            **__import__("os").environ,
            "PYTHONPATH": str(site),
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
        },
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("408 ") and "'f1'" in result.stdout


@pytest.mark.runs
def test_the_setup_cell_runs_as_a_kaggle_kernel_would_with_everything_installed(tmp_path):
    # the cell itself (its glue around install_plan), in a process that looks like a Kaggle
    # kernel (KAGGLE_* variables): this environment already has the course's versions, so it
    # keeps them, installs nothing and goes on
    from accelerate_course.maintain.build_notebook import setup_cell

    script = tmp_path / "setup_cell.py"
    script.write_text(setup_cell())
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "KAGGLE_KERNEL_RUN_TYPE": "Interactive"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    import torch

    assert f"setup: keeps the runtime's torch {torch.__version__}" in result.stdout
    assert "installs" not in result.stdout and "TPU chips: none" in result.stdout


def test_each_notebook_asks_colab_for_the_runtime_it_needs():
    # Colab opens a notebook on the runtime its metadata names: step 4's on a TPU; the whole
    # course's runs on the CPU of any runtime, and asks for none (a TPU runtime would be one
    # a class waits for, and not the one its text describes)
    import json

    step4 = json.loads((REPO / "step4_tpu_notebook" / "tpu_training.ipynb").read_text())
    course = json.loads((REPO / "docs" / "course_on_colab.ipynb").read_text())
    assert step4["metadata"].get("accelerator") == "TPU"
    assert "accelerator" not in course["metadata"]
