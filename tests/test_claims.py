"""Library behaviours the course states, shown where no other test shows them (docs/claims.md
lists every claim and its evidence)."""

import concurrent.futures
import functools
import shutil

import pytest
import torch
import torch.multiprocessing

from common.checkpoint import EMBEDDED_CHECKPOINT


def worker_sees(model, _):
    """Return whether this worker's copy of the model's weights lives in shared memory."""
    return all(p.is_shared() for p in model.parameters())


@pytest.mark.runs
def test_a_model_passed_to_a_torch_xla_style_launch_is_shared_not_copied():
    # torch_xla's PJRT launch (xmp.spawn -> pjrt.run_multiprocess) hands
    # functools.partial(fn, *args) to a ProcessPoolExecutor whose context is
    # torch.multiprocessing's; the executor pickles the arguments for each worker, and
    # PyTorch's pickler moves a CPU tensor to shared memory instead of copying its bytes. So
    # the model that step 4 creates before notebook_launcher is one copy in the host's memory.
    model = torch.nn.Linear(64, 64)
    assert not any(p.is_shared() for p in model.parameters())
    context = torch.multiprocessing.get_context("fork")
    with concurrent.futures.ProcessPoolExecutor(max_workers=2, mp_context=context) as pool:
        seen = list(pool.map(functools.partial(worker_sees, model), range(2)))
    assert seen == [True, True]
    assert all(p.is_shared() for p in model.parameters())  # moved there, in this process too


def test_a_checkpoint_folder_without_tokenizer_files_gives_a_tokenizer_of_nothing(tmp_path):
    # why common/checkpoint.py refuses such a folder: transformers still builds a tokenizer,
    # of the 5 special tokens alone, and every word becomes [UNK]
    from transformers import AutoTokenizer

    folder = tmp_path / "no-tokenizer"
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(EMBEDDED_CHECKPOINT / name, folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert len(tokenizer) == 5
    assert set(tokenizer.tokenize("Shares of Atlas Bank rose.")) == {"[UNK]"}


def test_accelerate_makes_no_grad_scaler_for_fp16_on_a_cpu():
    # accelerator.backward scales the loss only through a GradScaler, which Accelerate
    # creates for fp16 on a GPU (and other accelerators), not on a CPU; and no autocast
    # either (native_amp is for fp16 off the CPU only): fp16 on a CPU is a float32 run
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(reset_partial_state=True)  # a fresh process, as it were
    try:
        accelerator = Accelerator(mixed_precision="fp16", cpu=True)
        assert accelerator.scaler is None
        assert accelerator.gradient_accumulation_steps == 1
        assert not accelerator.native_amp
        model = accelerator.prepare(torch.nn.Linear(4, 4))
        assert model(torch.ones(2, 4)).dtype == torch.float32  # no autocast around forward
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
        GradientState._reset_state()


def test_every_claim_says_how_it_is_known():
    # docs/claims.md: claims numbered 1..N, and the last cell of every row starts with run
    # here, simulated here or read only
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parent.parent / "docs" / "claims.md").read_text()
    rows = [line for line in page.splitlines() if re.match(r"^\| \d+ \|", line)]
    numbers = [int(row.split("|")[1]) for row in rows]
    assert sorted(numbers) == list(range(1, len(rows) + 1))
    for row in rows:
        known = row.rstrip(" |").rsplit(" | ", 1)[1]
        assert known.startswith(("run here", "simulated here", "read only")), row[:80]
