"""make install (accelerate_course/install.py): a Python too old is refused in one line before
anything downloads; the torch build fits the machine and is named, with its size, first; and
pip's real resolver takes PyTorch's CPU build where the course says it does, shown against
local indexes of stand-in wheels (PyTorch's own index cannot be reached from here)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import standin_wheels  # tests/helpers/
from conftest import REPO

from accelerate_course import install

OLD_PYTHON = Path("/root/.pyenv/versions/3.10.13/bin/python3")  # where the build machines have one


@pytest.mark.parametrize(
    "system,machine,driver,build",
    [
        ("Linux", "x86_64", None, "cpu"),  # a laptop without an NVIDIA GPU: no CUDA download
        ("Linux", "aarch64", None, "cpu"),
        ("Linux", "x86_64", "580.95.05", "cuda"),
        ("Linux", "x86_64", "WSL", "cuda"),  # Windows' driver, seen from WSL
        ("Linux", "x86_64", "535.183.01", "cpu"),  # too old for CUDA 13: the line says what to do
        ("Darwin", "arm64", None, "default"),
    ],
)
def test_the_torch_build_fits_the_machine(system, machine, driver, build):
    chosen, why = install.choose("auto", system, machine, driver)
    assert chosen == build, why
    if driver == "535.183.01":
        assert "older than the CUDA 13 build needs (580)" in why and "TORCH=cu126" in why
        assert "the GPU stays unused" in why and "drivers from 525" in why


def test_a_choice_made_by_hand_wins_and_each_build_names_its_size():
    assert install.choose("cuda", "Linux", "x86_64", None) == ("cuda", "TORCH=cuda")
    assert install.choose("cpu", "Linux", "x86_64", "580.1")[0] == "cpu"
    assert install.describe("cpu", "x86_64") == "the CPU build (a 192 MB download)"
    assert install.describe("cuda", "x86_64").startswith("the CUDA 13.0 build (a 2.7 GB download")
    assert install.index_of("cpu") == "https://download.pytorch.org/whl/cpu"
    assert install.index_of("cuda") is None and install.index_of("default") is None


def test_course_torch_index_names_torchs_index_and_pips_settings_the_rest(monkeypatch):
    # docs/your-own-setup.md, where the Hub cannot be reached: on a slow network a copy of
    # PyTorch's index (COURSE_TORCH_INDEX) for torch, pip's own settings for the rest (the
    # pip commands name no index of their own for them)
    monkeypatch.delenv("COURSE_TORCH_INDEX", raising=False)
    assert install.torch_index("cpu") == "https://download.pytorch.org/whl/cpu"
    monkeypatch.setenv("COURSE_TORCH_INDEX", "https://torch-mirror.example.org/whl/cpu")
    assert install.torch_index("cpu") == "https://torch-mirror.example.org/whl/cpu"
    first, *rest = install.pip_commands("python", "cpu", install.torch_index("cpu"))
    assert first[-2:] == ["--index-url", "https://torch-mirror.example.org/whl/cpu"]
    assert not [word for command in rest for word in command if "index" in word]


def test_a_flat_folder_of_wheels_or_pypi_can_be_chosen_for_torch(monkeypatch):
    # docs/your-own-setup.md, a class in mainland China: a mirror's flat folder of wheels goes
    # to pip as --find-links (torch's dependencies from pip's usual indexes), a simple index
    # as --index-url, and COURSE_TORCH_INDEX=pypi takes torch from pip's usual indexes
    monkeypatch.delenv("COURSE_TORCH_INDEX", raising=False)
    monkeypatch.setenv("COURSE_TORCH_FIND_LINKS", "/srv/torch-wheels")
    assert install.torch_index("cpu") is None and install.torch_find_links() == "/srv/torch-wheels"
    first = install.pip_commands("python", "cpu", None, install.torch_find_links())[0]
    assert first[-3:] == [install.pinned_torch(), "--find-links", "/srv/torch-wheels"]
    monkeypatch.delenv("COURSE_TORCH_FIND_LINKS")
    monkeypatch.setenv("COURSE_TORCH_INDEX", "pypi")
    assert install.torch_index("cpu") is None and install.torch_find_links() is None
    assert len(install.pip_commands("python", "cpu", None)) == 2  # no command of torch's own


def test_an_index_that_cannot_be_reached_is_seen_at_once(tmp_path):
    assert not install.reachable("http://127.0.0.1:9/simple")  # a closed port
    assert not install.reachable((tmp_path / "nothing").as_uri())
    assert install.reachable(tmp_path.as_uri())


def test_python_310_is_refused_in_one_line_naming_a_newer_python():
    line = install.python_problem((3, 10, 12), found=["python3.12"])
    assert line.startswith("the course needs Python 3.11 or newer (transformers 5.24 requires it)")
    assert "3.10.12" in line and line.endswith("run make install PYTHON=python3.12")
    # uv or conda: Ubuntu 22.04's apt package python3.11 is a release candidate
    fix = install.python_problem((3, 10, 12), found=[])
    assert "uv python install 3.12" in fix and "conda create" in fix and "apt" not in fix
    assert install.python_problem((3, 11, 0)) is None


@pytest.mark.runs
def test_make_install_with_python_310_stops_in_one_line_before_anything(tmp_path):
    # a real Python 3.10 where the machine has one, else one that says it is 3.10 (what a
    # program reads: sys.version_info)
    if OLD_PYTHON.exists():
        python, env = str(OLD_PYTHON), {}
    else:
        (tmp_path / "sitecustomize.py").write_text(
            "import sys\nsys.version_info = (3, 10, 12, 'final', 0)\n"
        )
        python, env = sys.executable, {"PYTHONPATH": str(tmp_path)}
    venv = tmp_path / "venv"
    result = subprocess.run(
        ["make", "install", f"PYTHON={python}", f"VENV={venv}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**__import__("os").environ, **env},
    )
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode != 0
    assert len(errors) == 1 and "the course needs Python 3.11 or newer" in errors[0], result.stderr
    assert "is 3.10." in errors[0]
    assert not venv.exists()  # nothing was made, nothing downloaded


def resolve(tmp_path, *index_flags):
    """Return (the version pip's resolver takes for torch==2.13.0 with these indexes, pip's
    log): a dry run, this machine's pip configuration left out (--isolated)."""
    report = tmp_path / f"report-{len(list(tmp_path.glob('report-*')))}.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--isolated",
            "--dry-run",
            "--ignore-installed",
            "--no-deps",
            "--report",
            str(report),
            "-v",
            *index_flags,
            install.pinned_torch(),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(report.read_text())["install"][0]["metadata"]["version"], result.stdout


@pytest.mark.runs
def test_pips_resolver_takes_the_cpu_build_from_pytorchs_index(tmp_path):
    # PyPI stands in with the CUDA build's version, PyTorch's CPU index with the +cpu build
    pypi = standin_wheels.index(tmp_path / "pypi", {"torch": ["2.12.0", "2.13.0"]})
    cpu = standin_wheels.index(tmp_path / "cpu", {"torch": ["2.12.0+cpu", "2.13.0+cpu"]})
    version, _ = resolve(tmp_path, "--index-url", pypi)
    assert version == "2.13.0"  # PyPI alone: its build (on Linux, CUDA's)
    # as an extra index: "2.13.0+cpu" satisfies ==2.13.0 and sorts above 2.13.0 (PEP 440)
    version, log = resolve(tmp_path, "--index-url", pypi, "--extra-index-url", cpu)
    assert version == "2.13.0+cpu"
    assert "Would install torch-2.13.0+cpu" in log
    # what make install runs first on Linux without a driver: torch alone, from that index
    first = install.pip_commands(Path(sys.executable), "cpu", cpu)[0]
    assert first[-3:] == [install.pinned_torch(), "--index-url", cpu]
    version, log = resolve(tmp_path, *first[-2:])
    assert version == "2.13.0+cpu" and "torch-2.13.0+cpu-py3-none-any.whl" in log


@pytest.mark.runs
def test_pip_takes_the_same_torch_from_a_flat_folder_as_from_a_simple_index(tmp_path):
    # COURSE_TORCH_FIND_LINKS: the same +cpu wheel in a flat folder, beside a PyPI holding
    # the plain 2.13.0, is taken as from PyTorch's index ("2.13.0+cpu" sorts above 2.13.0)
    pypi = standin_wheels.index(tmp_path / "pypi", {"torch": ["2.12.0", "2.13.0"]})
    cpu = standin_wheels.index(tmp_path / "cpu", {"torch": ["2.12.0+cpu", "2.13.0+cpu"]})
    flat = tmp_path / "flat"
    for version in ("2.12.0+cpu", "2.13.0+cpu"):
        standin_wheels.wheel(flat, "torch", version)
    first = install.pip_commands(Path(sys.executable), "cpu", None, str(flat))[0]
    assert first[-2:] == ["--find-links", str(flat)]
    from_flat = resolve(tmp_path, "--index-url", pypi, *first[-2:])
    from_index = resolve(tmp_path, "--index-url", cpu)
    assert from_flat[0] == from_index[0] == "2.13.0+cpu"
    assert "torch-2.13.0+cpu-py3-none-any.whl" in from_flat[1]


# GitHub Codespaces: .devcontainer/devcontainer.json --------------------------------------


@pytest.mark.runs
def test_the_dev_container_installs_the_course_as_the_makefile_does():
    # no container runtime here: the file is checked against what the Makefile runs, and the
    # dev container CLI read it once (docs/your-own-setup.md says so)
    config = json.loads((REPO / ".devcontainer" / "devcontainer.json").read_text())  # strict JSON
    image, tag = config["image"].split(":")
    assert image == "mcr.microsoft.com/devcontainers/python"
    assert tuple(int(part) for part in tag.split("-")[0].split(".")) >= (3, 11)  # the course's
    assert config["hostRequirements"] == {"cpus": 2}  # the machine every number is measured on
    assert config["postCreateCommand"] == "make install TORCH=cpu"
    assert config["waitFor"] == "postCreateCommand"  # opened once the course is ready
    vscode = config["customizations"]["vscode"]
    assert {"ms-python.python", "ms-toolsai.jupyter"} <= set(vscode["extensions"])
    assert vscode["settings"]["python.defaultInterpreterPath"].endswith("/.venv/bin/python")
    dry = subprocess.run(
        ["make", "-n", "-B", *config["postCreateCommand"].split()[1:]],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert dry.returncode == 0, dry.stderr
    assert "-m accelerate_course.install --venv .venv --torch cpu" in dry.stdout


@pytest.mark.runs
def test_an_environment_moved_with_its_clone_or_left_by_its_python_is_named_in_one_line(tmp_path):
    # a real venv, made in one folder and moved to another (as a clone moved with its .venv:
    # its activate script and the course's editable install still name the first folder);
    # then the same venv, its Python gone (upgraded or removed); make names each before any
    # goal runs, with the command that mends it
    made = tmp_path / "old" / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(made)], check=True)
    moved = tmp_path / "new" / ".venv"
    moved.parent.mkdir()
    made.rename(moved)
    (moved / "bin" / ".installed").touch()  # installed, as far as make can tell

    def make_install():
        result = subprocess.run(
            ["make", "install", f"VENV={moved}"], cwd=REPO, capture_output=True, text=True
        )
        # (make's own lines aside: under make test, "make[1]: Entering directory" too)
        said = (result.stdout + result.stderr).splitlines()
        assert result.returncode != 0
        return [line for line in said if not line.startswith("make")]

    assert make_install() == [
        f"error: .venv was made in {made}, and an environment cannot be moved (its scripts and "
        "the course's install name that folder); make it again: rm -rf .venv && make install"
    ]
    config = (moved / "pyvenv.cfg").read_text().replace(str(made), str(moved))
    version = next(
        line.split("=")[1].strip() for line in config.splitlines() if line.startswith("version")
    )
    (moved / "pyvenv.cfg").write_text(
        "\n".join(
            "executable = /gone/bin/python3" if line.startswith("executable") else line
            for line in config.splitlines()
        )
        + "\n"
    )
    assert make_install() == [
        f"error: .venv was made by /gone/bin/python3 (Python {version}), which is no longer "
        "there; make it again: rm -rf .venv && make install"
    ]
