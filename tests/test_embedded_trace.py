"""The build trace: it sees a one-ulp change, names where two builds part, ties itself to the
committed weights, and decides which processors must rebuild the same bytes."""

import copy
import hashlib
from pathlib import Path

import torch

from accelerate_course.maintain.embedded.build_checkpoint import PINNED_KERNELS
from accelerate_course.maintain.embedded.trace import (
    TRACE_FILE,
    OpRecorder,
    describe,
    digest,
    first_difference,
    load,
    same_processor,
)
from accelerate_course.maintain.verify_embedded import (
    FINE_TUNED_TOLERANCE,
    weights_verdict,
    within_tolerance,
)
from common.checkpoint import EMBEDDED_CHECKPOINT

REPO = Path(__file__).resolve().parent.parent

ZEN2 = {
    "vendor": "AuthenticAMD",
    "family": "23",
    "model": "49",
    "name": "AMD EPYC 7B12",
    "flags": ["sse4_2", "avx", "fma", "avx2"],
    "torch": "2.13.0+cpu",
    "mkl": "2024.2-Product",
    "onednn": "3.12.0",
}
ZEN4 = dict(
    ZEN2,
    family="25",
    model="17",
    name="AMD EPYC 9B14",
    flags=ZEN2["flags"] + ["avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16"],
)


def one_step(model, batch):
    """Return the recorded operations of one forward, backward and SGD step."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    recorder = OpRecorder(model)
    with recorder:
        loss = model(batch).square().mean()
        recorder.phase = "backward"
        loss.backward()
        recorder.phase = "optimizer"
        optimizer.step()
    recorder.remove_hooks()
    return recorder.ops


def test_the_recorder_names_the_first_operation_a_one_ulp_change_reaches():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 1))
    batch = torch.randn(3, 4)
    other = copy.deepcopy(model)
    ops = one_step(copy.deepcopy(model), batch)
    assert ops == one_step(copy.deepcopy(model), batch)  # the same computation, the same trace
    assert [op[0] for op in ops][0] == "0"  # the first layer's forward comes first
    # the loss, computed outside any module, is "forward"
    assert {"0", "1", "2", "forward", "backward", "optimizer"} == {op[0] for op in ops}

    with torch.no_grad():  # the second layer's first weight, one unit in the last place up
        w = other[2].weight
        w[0, 0] = torch.nextafter(w[0, 0], torch.tensor(1.0))
    a = {"ops": [ops], "steps": ["x"]}
    b = {"ops": [one_step(other, batch)], "steps": ["y"]}
    where = first_difference(a, b)
    first = next(i for i, (x, y) in enumerate(zip(a["ops"][0], b["ops"][0])) if x != y)
    assert where == f"step 1, operation {first + 1} of {len(ops)}: {ops[first][1]} in 2"
    assert ops[first][0] == "2"  # in the changed layer, not before it


def test_first_difference_says_where_two_traces_part():
    a = {"ops": [[["m", "mm", "1"], ["m", "add", "2"]]], "steps": ["s0", "s1", "s2", "s3"]}
    assert first_difference(a, copy.deepcopy(a)) is None
    b = copy.deepcopy(a)
    b["ops"][0][1][2] = "9"
    assert first_difference(a, b) == "step 1, operation 2 of 2: add in m"
    b = copy.deepcopy(a)
    b["ops"][0][1][1] = "sub"
    assert first_difference(a, b) == (
        "step 1, operation 2: other operations ran (add in m there, sub in m here)"
    )
    b = copy.deepcopy(a)
    b["steps"][2] = "other"
    assert first_difference(a, b) == (
        "the parameters after step 2 (every operation of the first 1 steps agreed)"
    )
    b = copy.deepcopy(a)
    b["steps"] = b["steps"][:2]
    assert first_difference(a, b) == "3 steps there, 1 here (the same up to the shorter)"


def test_digest_reads_dtype_shape_and_every_byte():
    x = torch.arange(6, dtype=torch.float32)
    assert digest([x]) == digest([x.clone()])
    assert digest([x]) != digest([x.view(2, 3)])
    assert digest([x]) != digest([x.double()])
    assert digest([torch.tensor(1.0)]) != digest([torch.tensor(-1.0)])  # 0-dim tensors too
    y = x.clone()
    y[5] = torch.nextafter(y[5], torch.tensor(10.0))
    assert digest([x]) != digest([y])


def test_a_recorded_processor_must_rebuild_the_same_bytes_another_is_judged_by_fine_tuning():
    reference = {"ops": [[["m", "gelu", "1"]]], "steps": ["a", "b"], "matched_on": [ZEN4]}
    built = {"ops": [[["m", "gelu", "2"]]], "steps": ["a", "c"]}
    assert not same_processor(ZEN2, ZEN4)
    assert same_processor(ZEN4, dict(ZEN4, name="renamed by the cloud"))  # name is not identity
    ok, line = weights_verdict(reference, built, ZEN4)
    assert ok is False and "part first at step 1, operation 1 of 1: gelu in m" in line
    ok, line = weights_verdict(reference, built, ZEN2)
    assert ok is None and "not among those that rebuilt the same bytes" in line
    assert describe(ZEN2) == "AMD EPYC 7B12 (AMD family 23, model 49; sse4_2 avx fma avx2)"

    committed = {"accuracy": 0.8848, "f1": 0.9197}
    assert within_tolerance(
        {"accuracy": 0.8848 - FINE_TUNED_TOLERANCE + 1e-4, "f1": 0.9197}, committed
    )
    assert not within_tolerance(
        {"accuracy": 0.8848, "f1": 0.9197 + FINE_TUNED_TOLERANCE + 1e-4}, committed
    )


def test_the_committed_trace_is_the_committed_weights_build():
    trace = load(TRACE_FILE)
    weights = (EMBEDDED_CHECKPOINT / "model.safetensors").read_bytes()
    assert trace["weights"] == hashlib.sha256(weights).hexdigest()
    assert trace["kernels"] == PINNED_KERNELS
    assert len(trace["steps"]) == 3001  # before the first step and after each of 3,000
    assert len(trace["ops"]) == 1 and len(trace["ops"][0]) > 5000
    assert trace["processor"] in trace["matched_on"]
    # every processor listed is identified by vendor, family, model and flags
    for p in trace["matched_on"]:
        assert p["vendor"] and p["family"] and p["model"] and "avx2" in p["flags"]


def test_the_builders_square_root_is_correctly_rounded():
    # against Python's math.sqrt (IEEE 754 double, correctly rounded), rounded to float32:
    # for a square root that double rounding is exact (53 >= 2 x 24 + 2 bits)
    import math

    import numpy

    from accelerate_course.maintain.embedded.build_checkpoint import correctly_rounded_sqrt

    torch.manual_seed(0)
    values = torch.cat([torch.rand(4096) * 1e-3, torch.rand(4096) * 1e-9, torch.rand(64) * 10])
    expected = torch.tensor([numpy.float32(math.sqrt(float(v))) for v in values])
    assert torch.equal(correctly_rounded_sqrt(values), expected)


def test_the_builders_adamw_is_torchs_with_a_correctly_rounded_square_root(monkeypatch):
    # torch's own AdamW, given the same square root, takes the same steps bit for bit: the
    # builder's optimizer differs from it in nothing else (20 steps, weight decay, a schedule)
    from accelerate_course.maintain.embedded.build_checkpoint import AdamW, correctly_rounded_sqrt

    def train(optimizer_class):
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(64, 300), torch.nn.GELU(), torch.nn.Linear(300, 2)
        )
        optimizer = optimizer_class(model.parameters(), lr=1e-3, weight_decay=0.01)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: (k + 1) / 10)
        for _ in range(20):
            model(torch.randn(16, 64)).square().mean().backward()
            optimizer.step()
            schedule.step()
            optimizer.zero_grad()
        return torch.cat([p.detach().flatten() for p in model.parameters()])

    builders = train(AdamW)
    monkeypatch.setattr(torch.Tensor, "sqrt", correctly_rounded_sqrt)
    assert torch.equal(builders, train(torch.optim.AdamW))
