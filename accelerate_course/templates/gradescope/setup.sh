#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image. Its default image
# is Ubuntu 22.04, whose python3 is 3.10 and whose own python3.11 package is a release
# candidate (3.11.0~rc1): uv installs a released Python 3.11 instead, then the course's
# packages with PyTorch's CPU build, and the teacher's copy of the course beside this file
# (AUTOGRADER and TORCH_INDEX: for a test outside Gradescope, a folder laid out as /autograder
# and another index of torch's CPU build)
set -euo pipefail
AUTOGRADER=${AUTOGRADER:-/autograder}
TORCH_INDEX=${TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
COURSE="$AUTOGRADER/source/course"
python3 -m pip install --quiet uv
python3 -m uv venv --python 3.11 "$AUTOGRADER/venv"
VENV_PYTHON="$AUTOGRADER/venv/bin/python"
python3 -m uv pip install --python "$VENV_PYTHON" {{torch}} --index-url "$TORCH_INDEX"
python3 -m uv pip install --python "$VENV_PYTHON" -r "$COURSE/requirements.txt"
python3 -m uv pip install --python "$VENV_PYTHON" --no-deps -e "$COURSE"
