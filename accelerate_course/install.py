"""Install the course's environment, .venv: the pinned packages, torch built for this machine.

    python3 -m accelerate_course.install                 (make install: what make course runs first)
    python3 -m accelerate_course.install --torch cpu     (make install TORCH=cpu; or cuda, cu126)
    python3 -m accelerate_course.install --plan          (say what it would install; install
                                                          nothing)

Before pip runs, one line says which build of torch comes and about how big it is:
- Linux (x86-64, aarch64) without an NVIDIA driver: PyTorch's CPU build, from its CPU index
  (pip would otherwise take PyPI's CUDA 13 build, with its NVIDIA libraries: 2.7 GB);
- Linux with an NVIDIA driver of 580 or newer (or WSL, with Windows' NVIDIA driver): PyPI's
  CUDA 13.0 build; with an older driver, which that build cannot use, the CPU build, saying so;
- macOS and others: PyPI's own build (on Apple silicon, CPU and Apple's GPU, mps).
--torch (make's TORCH=) chooses: cpu, cuda (PyPI's), or one of PyTorch's CUDA indexes for
torch 2.13: cu126, cu129, cu130, cu132. Where PyPI's and PyTorch's indexes differ, torch is
installed first, from PyTorch's index alone, and the rest from pip's usual indexes
("2.13.0+cpu" satisfies "torch==2.13.0");
Where torch comes from, when PyTorch's index is far or slow (the student chooses; nothing is
timed): COURSE_TORCH_INDEX names another simple index (PEP 503, a page per project, as
PyTorch's own: pip --index-url), COURSE_TORCH_FIND_LINKS a flat page or folder of wheel files
(pip --find-links, torch's dependencies then from pip's usual indexes), and
COURSE_TORCH_INDEX=pypi takes torch from pip's usual indexes too (on Linux, the CUDA build).
pip's own settings (PIP_INDEX_URL, pip config set global.index-url) give the index of the rest.
A Python older than 3.11 is refused in one line first: this file must parse on old Pythons.
"""

import argparse
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NEWEST_NEEDED = (3, 11)  # transformers 5.24.0: Requires-Python >=3.11
PYTORCH_INDEX = "https://download.pytorch.org/whl/{build}"
# the CUDA driver each of PyPI's Linux builds needs (CUDA 13.0: NVIDIA's release notes)
CUDA13_DRIVER = 580
# the driver PyTorch's CUDA 12.x builds need (CUDA 12's minor version compatibility: NVIDIA's
# CUDA compatibility guide, as docs/your-own-setup.md and torch_build.py say)
CUDA12_DRIVER = 525
# download sizes for Python 3.11 (PyPI's JSON API, the files pip picks; the CPU wheel: its
# file on the course's build machines), on 2026-12-03
SIZES = {
    ("cpu", "x86_64"): "a 192 MB download",
    ("cpu", "aarch64"): "a download of about 200 MB",
    ("cuda", "x86_64"): "a 2.7 GB download: torch 527 MB and 2.2 GB of NVIDIA and Triton libraries",
    ("cuda", "aarch64"): "a download of several GB: torch 427 MB and the NVIDIA libraries",
    ("default", "arm64"): "a 111 MB download",
    ("default", "x86_64"): "a download of about 120 MB",
}


def python_problem(version=None, found=None):
    """Return None if this Python can run the course, else the one line that says how to get
    one that can (found: the names of newer Pythons on the PATH)."""
    version = tuple(version or sys.version_info[:3])
    if version[:2] >= NEWEST_NEEDED:
        return None
    found = (
        found
        if found is not None
        else [name for name in ("python3.13", "python3.12", "python3.11") if shutil.which(name)]
    )
    have = ".".join(map(str, version))
    fix = (
        f"this machine has {found[0]}: run make install PYTHON={found[0]}"
        if found
        else 'install one with uv (uv python install 3.12, then make install PYTHON="$(uv '
        'python find 3.12)") or conda (conda create -n py312 python=3.12, then make '
        "install PYTHON=python3.12 in that environment); macOS: brew install python@3.12"
    )
    return (
        f"the course needs Python 3.11 or newer (transformers 5.24 requires it), and "
        f"{Path(sys.executable).name} is {have}; {fix}"
    )


def venv_problem(venv):
    """Return why an existing environment folder (its pyvenv.cfg, written by python -m venv)
    cannot run the course, or "" (none there, or nothing known wrong): made in another
    folder (a clone moved or copied with its .venv: its scripts' first lines and the
    course's editable install name the folder it was made in), or by a Python that is no
    longer there (upgraded or removed)."""
    venv = Path(venv)
    try:
        lines = (venv / "pyvenv.cfg").read_text(errors="replace").splitlines()
    except OSError:
        return ""
    config = {
        key.strip(): value.strip()
        for key, sep, value in (line.partition("=") for line in lines)
        if sep
    }
    remake = f"make it again: rm -rf {venv.name} && make install"
    # "command = <python> -m venv [--options] <folder>" (Python 3.11 and newer write it)
    made_in = re.sub(r"^(--?\S+\s+)*", "", config.get("command", "").rpartition(" -m venv ")[2])
    if made_in and Path(made_in).resolve() != venv.resolve():
        return (
            f"{venv.name} was made in {made_in}, and an environment cannot be moved (its "
            f"scripts and the course's install name that folder); {remake}"
        )
    base = config.get("executable")
    if base and not Path(base).exists():
        return (
            f"{venv.name} was made by {base} (Python {config.get('version', '?')}), which "
            f"is no longer there; {remake}"
        )
    return ""


def nvidia_driver():
    """Return the NVIDIA driver's version ('580.95.05'), 'WSL' for Windows' driver seen from
    WSL, or None when there is none."""
    from accelerate_course.torch_build import nvidia_driver as kernel_driver

    found = kernel_driver()
    if found:
        return found
    if (
        Path("/usr/lib/wsl/lib/libcuda.so.1").exists()
        or Path("/usr/lib/wsl/lib/nvidia-smi").exists()
    ):
        return "WSL"
    return None


# PyTorch's CUDA indexes that hold torch 2.13 (its release lists CUDA 12.6, 12.9, 13.0, 13.2)
CUDA_BUILDS = ("cu126", "cu129", "cu130", "cu132")


def choose(asked="auto", system=None, machine=None, driver=None):
    """Return (build, why): the torch build to install ("cpu", "cuda", one of CUDA_BUILDS, or
    "default": PyPI's own, for a system where it has no CUDA) and why, in a few words."""
    system = system or platform.system()
    machine = (machine or platform.machine()).lower()
    if asked != "auto":
        return asked, f"TORCH={asked}"
    if system != "Linux":
        return "default", f"PyPI's build for {system} ({machine})"
    if driver is None:
        return "cpu", "no NVIDIA driver here (make install TORCH=cuda for the CUDA build)"
    major = int(driver.split(".")[0]) if driver[0].isdigit() else None
    if major is not None and major < CUDA13_DRIVER:
        return "cpu", (
            f"the NVIDIA driver {driver} is older than the CUDA 13 build needs "
            f"({CUDA13_DRIVER}), so this is the CPU build and the GPU stays unused: "
            "make install TORCH=cu126 for PyTorch's CUDA 12.6 build (drivers from "
            f"{CUDA12_DRIVER}), or update the driver"
        )
    where = (
        "Windows' NVIDIA driver, seen from WSL"
        if driver == "WSL"
        else f"the NVIDIA driver {driver}"
    )
    return "cuda", f"{where} is here (make install TORCH=cpu for the small CPU build)"


def index_of(build):
    """Return the index torch comes from for a build, or None: pip's usual indexes (PyPI)."""
    return PYTORCH_INDEX.format(build=build) if build in ("cpu", *CUDA_BUILDS) else None


def torch_index(build):
    """Return the index torch comes from: COURSE_TORCH_INDEX where it is set (a copy of
    PyTorch's index, on a slow network; the tests' local index), else index_of(build). pip's
    own settings (PIP_INDEX_URL, pip config) give the other packages' index: the --index-url
    of torch's own pip command goes before them."""
    asked = os.environ.get("COURSE_TORCH_INDEX")
    if asked == "pypi" or os.environ.get("COURSE_TORCH_FIND_LINKS"):
        return None
    return asked or index_of(build)


def torch_find_links():
    """Return COURSE_TORCH_FIND_LINKS, or None: a flat page or folder of wheel files (a
    mirror's folder of PyTorch's wheels, a folder of downloaded ones), which pip reads with
    --find-links, next to its usual indexes (torch's dependencies come from them)."""
    return os.environ.get("COURSE_TORCH_FIND_LINKS") or None


def describe(build, machine=None):
    """Return the build and its size, for the line said before the download."""
    machine = (machine or platform.machine()).lower()
    name = {
        "cpu": "the CPU build",
        "cuda": "the CUDA 13.0 build",
        "default": "PyPI's build",
        **{b: f"the CUDA {b[2:-1]}.{b[-1]} build" for b in CUDA_BUILDS},
    }[build]
    size = SIZES.get(
        (build, machine),
        "a download of several GB" if build.startswith("cu") else "a download of a few hundred MB",
    )
    return f"{name} ({size})"


def reachable(url, timeout=3.0):
    """Return True if a TCP connection to the URL's host opens within timeout (an index that
    cannot be reached costs pip minutes of retries, package by package)."""
    from urllib.parse import urlparse

    address = urlparse(url)
    if address.scheme in ("file", ""):  # a file:// URL, or a folder's path
        return Path(address.path).exists()
    try:
        socket.create_connection((address.hostname, address.port or 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def pinned_torch():
    """Return requirements.txt's torch pin, e.g. 'torch==2.13.0'."""
    return next(
        line.strip()
        for line in (REPO / "requirements.txt").read_text().splitlines()
        if line.strip().startswith("torch==")
    )


def pip_commands(venv_python, build, index, find_links=None):
    """Return the pip commands that install the course into the environment."""
    pip = [str(venv_python), "-m", "pip", "install", "--quiet"]
    commands = []
    if find_links:  # torch from a flat folder of wheels, its dependencies from pip's indexes
        commands.append([*pip, pinned_torch(), "--find-links", find_links])
    elif index:  # torch alone from PyTorch's index, then the rest from pip's usual ones
        commands.append([*pip, pinned_torch(), "--index-url", index])
    commands.append([*pip, "-r", str(REPO / "requirements.txt")])
    # editable, as one plain path line in the environment (setuptools' compat mode), not an
    # import hook: the course's folder on sys.path, and nothing run when Python starts
    commands.append(
        [*pip, "--no-deps", "-e", str(REPO), "--config-settings", "editable_mode=compat"]
    )
    return commands


def main():
    parser = argparse.ArgumentParser(
        prog="python -m accelerate_course.install", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--torch",
        default=os.environ.get("TORCH") or "auto",
        choices=["auto", "cpu", "cuda", *CUDA_BUILDS],
        help="which build of torch (default auto: from this machine)",
    )
    parser.add_argument("--venv", default=".venv", type=Path)
    parser.add_argument("--plan", action="store_true", help="say what it would install")
    parser.add_argument(
        "--check",
        action="store_true",
        help="say in one line what is wrong with an existing --venv, if anything",
    )
    args = parser.parse_args()
    venv = REPO / args.venv if not args.venv.is_absolute() else args.venv
    problem = venv_problem(venv)
    if problem:
        sys.exit(f"error: {problem}")
    if args.check:  # any Python 3 can look (make runs it before every goal)
        return
    problem = python_problem()
    if problem:
        sys.exit(f"error: {problem}")
    build, why = choose(args.torch, driver=nvidia_driver())
    index, find_links = torch_index(build), torch_find_links()
    print(f"install: {pinned_torch().replace('==', ' ')}, {describe(build)}: {why}", flush=True)
    if find_links and not reachable(find_links):
        sys.exit(f"error: COURSE_TORCH_FIND_LINKS={find_links} cannot be reached from here")
    if index and not reachable(index):
        print(
            f"install: {index} cannot be reached from here: torch comes from pip's usual "
            "indexes instead (on Linux, PyPI's is the CUDA build)",
            flush=True,
        )
        index = None
    elif index and index == index_of(build):
        print(
            f"install: torch comes from {index}; where that is slow, COURSE_TORCH_FIND_LINKS "
            "(a mirror's folder of wheels) or COURSE_TORCH_INDEX (a mirror's simple index) "
            "names another: docs/your-own-setup.md",
            flush=True,
        )
    python = venv / ("Scripts" if sys.platform == "win32" else "bin") / "python"
    commands = pip_commands(python, build, index, find_links)
    if args.plan:
        for command in commands:
            print("  " + " ".join(command[1:]))
        return
    if not python.exists():
        if not os.access(venv.parent, os.W_OK):
            sys.exit(
                f"error: {venv.parent} cannot be written, and the course makes its "
                f"environment there ({args.venv}); clone the course into a folder you can "
                "write to, such as your home folder"
            )
        made = subprocess.run(
            [sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True
        )
        if made.returncode != 0:
            reason = (made.stderr.strip().splitlines() or ["no reason given"])[-1]
            sys.exit(
                f"error: python -m venv could not make {args.venv}: {reason}; on Debian "
                "and Ubuntu, install the venv module: sudo apt install python3-venv"
            )
    for command in commands:
        done = subprocess.run(command)
        if done.returncode != 0:
            sys.exit(
                f"error: pip could not install the course's packages (exit code "
                f"{done.returncode}, its lines above say why)"
            )
    installed = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('torch'))"],
        capture_output=True,
        text=True,
    )
    print(f"install: installed torch {installed.stdout.strip()} into {args.venv}")


if __name__ == "__main__":
    main()
