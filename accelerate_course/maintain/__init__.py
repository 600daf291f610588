"""The maintainers' tools: they rebuild or re-measure what the course ships, never run in class.

build_notebook   make notebook: step 4's notebook from train.py and notebook_cells.py
update_readme    make readme: the generated blocks of the lesson pages (diffs, what-if tables)
verify_embedded  make verify-embedded: rebuild the embedded data and checkpoint and compare
benchmark        make benchmark: docs/benchmark.md's timings (baselines: its floor rows)
gpu_check        make gpu-check: the course on one CUDA GPU, as a table (docs/gpu.md)
gpu_bundle       make gpu-bundle: the pinned packages as wheels for an offline GPU machine
xla_lane.sh      make xla-lane: step 4 on torch_xla's CPU backend, in .venv-xla
"""
