"""What the step 4 notebook's setup cell installs, decided by one function for any runtime.

The setup cell installs the course itself first (it needs no other package), then calls
set_up(), which asks install_plan what this runtime lacks and installs it. Tests run
install_plan for each runtime a class opens the notebook on (tests/test_notebook_setup.py),
and docs/notebook-setup.md shows its answers.
"""

import importlib
import importlib.metadata
import os
import subprocess
import sys
import warnings

from common.tpu import tpu_chips

TORCH_XLA = "2.9.0"  # torch_xla's newest release on PyPI; torch must be the same release
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
LIBTPU_INDEX = "https://storage.googleapis.com/libtpu-releases/index.html"
OLDEST_TORCH = (2, 6)  # transformers 5.24.0 requires torch>=2.6 and Python>=3.11 (its metadata)


def install_plan(python, installed, tpu, hosted, course_found, course_source, pins):
    """Return (commands, notes, stop) for the setup cell.

    python: (major, minor); installed: {distribution name: version} of what the runtime
    has (torch, torch_xla and the pins' names); tpu: the TPU chips found (tpu_chips());
    hosted: on Colab or Kaggle; course_found: the course's `common` package can be imported;
    course_source: where pip installs the course from ('' when nobody has said); pins: the
    course's "name==version" pins that the notebook imports.

    commands: the pip install arguments to run, in order; notes: one line each, what the
    cell keeps or installs and why; stop: None, or the one line that says why the cell
    cannot go on and what to do instead (then commands is empty).
    """

    def release(version):  # "2.9.0+cpu" -> (2, 9)
        return tuple(int(part) for part in version.split("+")[0].split(".")[:2])

    if course_found and not hosted:
        return [], ["the course is installed here (make install): nothing to install"], None
    if python < (3, 11):
        return (
            [],
            [],
            (
                f"the course needs Python 3.11 or newer, and this runtime has "
                f"{python[0]}.{python[1]}: choose a newer runtime"
            ),
        )
    commands, notes = [], []
    torch, torch_xla = installed.get("torch"), installed.get("torch_xla")
    usable = torch and release(torch) >= OLDEST_TORCH
    if tpu and usable and torch_xla and release(torch) == release(torch_xla):
        notes.append(
            f"keeps the runtime's torch {torch} and torch_xla {torch_xla} "
            f"(one release: they work together)"
        )
    elif tpu and python >= (3, 13):
        return (
            [],
            [],
            (
                f"this TPU runtime has no torch_xla of torch's release, and torch_xla "
                f"{TORCH_XLA}'s TPU library (libtpu) has no build for Python "
                f"{python[0]}.{python[1]}: choose a TPU runtime with Python 3.11 or 3.12"
            ),
        )
    elif tpu:
        commands.append([f"torch=={TORCH_XLA}", "--index-url", TORCH_CPU_INDEX])
        commands.append([f"torch_xla[tpu]=={TORCH_XLA}", "-f", LIBTPU_INDEX])
        notes.append(
            f"installs torch {TORCH_XLA} (PyTorch's CPU build: a TPU machine needs no "
            f"CUDA) and torch_xla {TORCH_XLA}, the same release"
            + (f", in place of torch {torch}" if torch else "")
        )
    elif usable:
        notes.append(f"keeps the runtime's torch {torch}")
    else:
        commands.append([next(pin for pin in pins if pin.startswith("torch=="))])
        notes.append(
            f"installs torch {commands[-1][0].split('==')[1]}: this runtime has "
            + (f"torch {torch}, older than transformers needs" if torch else "none")
        )
    missing = [
        pin
        for pin in pins
        if not pin.startswith("torch==") and installed.get(pin.split("==")[0]) != pin.split("==")[1]
    ]
    if "scikit-learn" not in installed:  # the metric's F1; the runtime's own when it has one
        missing.append("scikit-learn")
    if missing:
        commands.append(missing)
        notes.append(
            "installs "
            + ", ".join(pin.split("==")[0] for pin in missing)
            + " at the course's versions (numpy, pandas and pyarrow stay the runtime's "
            "unless these need newer ones)"
        )
    if not course_found and not course_source:
        return (
            [],
            [],
            (
                "the course itself is not installed here, and this cell names no "
                "COURSE_SOURCE: type at its top where the course is published, as "
                'COURSE_SOURCE = "git+https://github.com/<owner>/<course>@<tag>", and '
                "run it again"
            ),
        )
    if not course_found:
        commands.append([course_source])
        notes.append(f"installs the course from {course_source}")
    return commands, notes, None


def run_installs(commands, python):
    """Run each pip install of install_plan's commands with this runtime's Python (python:
    its path); return None, or the one line that says which failed and pip's last words."""
    for arguments in commands:
        done = subprocess.run(
            [python, "-m", "pip", "install", "-q", *arguments], capture_output=True, text=True
        )
        if done.returncode != 0:
            said = [line for line in done.stderr.splitlines() if line.strip()]
            return (
                f"pip could not install {' '.join(arguments)}: "
                f"{said[-1] if said else 'exit code ' + str(done.returncode)}"
            )
    return None


def upgraded_in_this_kernel(before, after, imported):
    """Return the names of packages this kernel has already imported whose installed
    version changed (before/after: {name: version}; imported: the names of the modules
    loaded in this process). Their old code stays loaded until the runtime restarts."""
    return sorted(name for name in before if name in imported and before[name] != after.get(name))


class SetupStopped(Exception):
    """The notebook cannot go on here: one line says why (IPython shows it without a
    traceback, and Run all stops at this cell)."""

    def _render_traceback_(self):
        return [f"setup: {self}"]


def installed_versions(names):
    """Return {distribution name: version} of those names installed here."""
    versions = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return versions


def set_up(pins, course_source, course_found):
    """The setup cell's work, after it installed the course: install what this runtime lacks
    (install_plan), say one `setup:` line per decision, and stop in one line (SetupStopped)
    where the notebook cannot go on. pins: the course's "name==version" pins the notebook
    imports; course_source: the cell's COURSE_SOURCE; course_found: whether the course was
    installed before the cell ran."""
    hosted = "google.colab" in sys.modules or any(k.startswith("KAGGLE") for k in os.environ)
    watched = [
        "torch",
        "torch_xla",
        "numpy",
        "pandas",
        "pyarrow",
        "scikit-learn",
        *(pin.split("==")[0] for pin in pins if not pin.startswith("torch==")),
    ]
    tpu = tpu_chips()  # a TPU chip on the PCI bus, found as torch_xla finds one
    before = installed_versions(watched)
    commands, notes, stop = install_plan(
        sys.version_info[:2], before, tpu, hosted, course_found, course_source, pins
    )
    if stop:
        raise SetupStopped(stop)
    failed = run_installs(commands, sys.executable)
    if failed:
        raise SetupStopped(failed)
    importlib.invalidate_caches()
    for note in notes:
        print("setup:", note)
    loaded = {
        name
        for name in before
        if {"scikit-learn": "sklearn"}.get(name, name.replace("-", "_")) in sys.modules
    }
    upgraded = upgraded_in_this_kernel(before, installed_versions(watched), loaded)
    if upgraded:
        raise SetupStopped(
            "upgraded " + ", ".join(upgraded) + ", which this kernel had already "
            "loaded: restart the runtime (Colab: Runtime > Restart session; "
            "Kaggle: Run > Restart & clear cell outputs), then run the notebook "
            "again from the top (this cell will then find everything installed)"
        )
    # tqdm's notebook bars need ipywidgets; without them it warns once and draws text bars
    warnings.filterwarnings("ignore", message="IProgress not found")
    print("TPU chips:", tpu or "none", "| PJRT_DEVICE:", os.environ.get("PJRT_DEVICE"))
