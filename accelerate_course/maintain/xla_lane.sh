#!/usr/bin/env bash
# The XLA lane: step 4 on torch_xla's CPU backend, through notebook_launcher's TPU branch.
#
# It builds a separate environment, .venv-xla, with torch 2.9.0 and torch_xla 2.9.0 (they must
# be the same release; torch_xla's latest on PyPI is 2.9.0, and torch 2.9.0 from PyPI is a CUDA
# build: about 4 GB to download, 7 GB on disk, a few minutes, once), then runs the tests marked
# xla there. In the course's own environment those tests skip.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}
VENV=.venv-xla
if [ ! -f "$VENV/.installed" ]; then
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet torch==2.9.0 torch_xla==2.9.0
    grep -vE '^(torch==|#|$)' requirements.txt > "$VENV/requirements-xla.txt"
    "$VENV/bin/python" -m pip install --quiet -r "$VENV/requirements-xla.txt"
    touch "$VENV/.installed"
fi
# the course itself, again whenever pyproject.toml changes (the packages it installs)
if [ ! -f "$VENV/.course-installed" ] || [ pyproject.toml -nt "$VENV/.course-installed" ]; then
    "$VENV/bin/python" -m pip install --quiet --no-deps -e .
    touch "$VENV/.course-installed"
fi
PJRT_DEVICE=CPU exec "$VENV/bin/python" -m pytest -m xla -v -s tests/test_xla.py "$@"
