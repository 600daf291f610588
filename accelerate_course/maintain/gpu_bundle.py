"""make gpu-bundle: the course's pinned packages as wheels, for a GPU machine without network.

    python -m accelerate_course.maintain.gpu_bundle [--python-version 3.12]
        [--platform manylinux_2_28_x86_64]

A GPU machine's own image has a CUDA build of torch, but not the course's pinned libraries, or
others at other versions (the device machines of this project: Python 3.12, torch 2.11+cu130,
transformers 5.17, no datasets or evaluate). This downloads, on a machine with the package
index, every package those pins need, at the versions this environment has, except torch
and the large libraries a GPU image carries anyway (numpy, pandas, pyarrow, the CUDA
libraries), into gpu-bundle/wheels, and writes gpu-bundle/install.sh. On the GPU machine:

    bash gpu-bundle/install.sh       # the pins into gpu-bundle/site, beside the image's torch
    PYTHONPATH=gpu-bundle/site:. python3 -m accelerate_course.maintain.gpu_check --write docs/gpu.md
"""

import argparse
import re
import shutil
import subprocess
import sys
from importlib.metadata import distribution

from accelerate_course.steps import REPO

BUNDLE = REPO / "gpu-bundle"
PINNED = (
    "transformers",
    "tokenizers",
    "datasets",
    "accelerate",
    "evaluate",
    "huggingface_hub",
    "safetensors",
    "tqdm",
)
# on every CUDA image, and large: left to the image (the table names the versions it ran on)
LEFT_TO_THE_IMAGE = {
    "torch",
    "numpy",
    "pandas",
    "pyarrow",
    "sympy",
    "networkx",
    "jinja2",
    "markupsafe",
    "mpmath",
    "triton",
    "setuptools",
}


def closure(names):
    """Return {name: version} of the packages names need, as installed here, recursively."""
    found, todo = {}, list(names)
    while todo:
        name = re.split(r"[\s<>=!~;\[(]", todo.pop(), maxsplit=1)[0].lower().replace("_", "-")
        if name in found or name in LEFT_TO_THE_IMAGE or name.startswith(("nvidia-", "cuda-")):
            continue
        try:
            dist = distribution(name)
        except Exception:
            continue  # an optional dependency not installed here
        found[name] = dist.version
        todo += [
            req
            for req in (dist.requires or [])
            if "extra ==" not in req and 'python_version < "3.11"' not in req
        ]
    return found


def main():
    parser = argparse.ArgumentParser(
        prog="python -m accelerate_course.maintain.gpu_bundle", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--python-version", default="3.12")
    parser.add_argument("--platform", default="manylinux_2_28_x86_64")
    args = parser.parse_args()
    packages = closure(PINNED)
    shutil.rmtree(BUNDLE, ignore_errors=True)
    (BUNDLE / "wheels").mkdir(parents=True)
    pins = [f"{name}=={v}" for name, v in sorted(packages.items())]
    # the older manylinux tags too: many wheels are built for glibc 2.17, which 2.28 runs
    platforms = [args.platform] + (
        [
            args.platform.replace("_2_28_", "_2_17_"),
            args.platform.replace("manylinux_2_28_", "manylinux2014_"),
        ]
        if "_2_28_" in args.platform
        else []
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            *(f"--platform={p}" for p in platforms),
            "--python-version",
            args.python_version,
            "-d",
            str(BUNDLE / "wheels"),
            *pins,
        ],
        check=True,
    )
    (BUNDLE / "install.sh").write_text(
        "#!/usr/bin/env bash\n"
        "# the course's pinned packages from wheels/ into site/, for the image's own python (and\n"
        "# its CUDA torch): run with PYTHONPATH=gpu-bundle/site:. so that they come first\n"
        'set -euo pipefail\ncd "$(dirname "$0")"\n'
        "PYTHON=${PYTHON:-python3}\n"
        '"$PYTHON" -m pip install --quiet --no-index --no-deps --target site wheels/*.whl\n'
        'PYTHONPATH=site:.. "$PYTHON" -c \'import torch, transformers, accelerate, datasets, '
        'evaluate; print("ready: torch", torch.__version__, "transformers", '
        'transformers.__version__, "cuda", torch.cuda.is_available())\'\n'
    )
    size = sum(f.stat().st_size for f in (BUNDLE / "wheels").iterdir()) / 2**20
    print(
        f"{len(pins)} wheels, {size:.1f} MiB, in {BUNDLE.relative_to(REPO)}/wheels; "
        f"on the GPU machine: bash gpu-bundle/install.sh"
    )


if __name__ == "__main__":
    main()
