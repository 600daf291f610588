"""A build's trace: what the checkpoint builder computed, in hashes, so that two builds made on
two machines can be compared without having both machines at hand.

A trace holds
- `processor`: the machine that made it (vendor, family, model, name, the vector flags that
  decide which kernels run) and the library versions;
- `ops`: every ATen operation of the first `OP_STEPS` pretraining steps (forward, backward and
  optimizer step), in the order it ran, with the module it ran in and a hash of its outputs;
- `steps`: a hash of all trained parameters before the first step and after every step.

`first_difference(reference, other)` names where two traces part: the first operation whose
output differs (its step, its number, its name and module), or else the first step after which
the parameters differ. checkpoint_trace.json beside this file is the trace of the build that
made the committed checkpoint, with the processors on which a rebuild matched it (gzipped
JSON: about 6,000 operations and 3,001 parameter hashes).
"""

import gzip
import hashlib
import json
import platform
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

TRACE_FILE = Path(__file__).resolve().parent / "checkpoint_trace.json.gz"
OP_STEPS = 1  # the steps whose every operation is hashed
# the CPU flags that decide which vector kernels a library may pick on x86-64
# operations whose outputs are memory not yet written (their hash would be noise)
UNWRITTEN = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"}
VECTOR_FLAGS = (
    "sse4_2",
    "avx",
    "fma",
    "avx2",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "avx_vnni",
    "amx_tile",
    "amx_bf16",
)


def digest(tensors):
    """Return a short hex hash of the tensors' dtypes, shapes and bytes, in order."""
    h = hashlib.blake2b(digest_size=8)
    for t in tensors:
        t = t.detach().contiguous().cpu()
        h.update(f"{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def processor():
    """Return what identifies this machine's processor and kernels: vendor, family, model and
    name (from /proc/cpuinfo on Linux), the vector flags of VECTOR_FLAGS it has, and the
    versions of torch, MKL and oneDNN."""
    from accelerate_course.machine import cpuinfo

    info = {"machine": platform.machine()}
    fields = cpuinfo()
    if fields:
        flags = set(fields.get("flags", "").split())
        info.update(
            vendor=fields.get("vendor_id"),
            family=fields.get("cpu family"),
            model=fields.get("model"),
            name=fields.get("model name"),
            flags=[f for f in VECTOR_FLAGS if f in flags],
        )
    else:
        info.update(name=platform.processor())
    info["torch"] = torch.__version__
    config = torch.__config__.show()
    for library, marker in (("mkl", "Math Kernel Library Version "), ("onednn", "MKL-DNN v")):
        if marker in config:
            info[library] = config.split(marker)[1].split()[0]
    return info


def describe(info):
    """Return a processor (as processor() gives it) in one line."""
    vendor = {"GenuineIntel": "Intel", "AuthenticAMD": "AMD"}.get(
        info.get("vendor"), info.get("vendor") or ""
    )
    text = f"{info.get('name') or info.get('machine')}"
    if info.get("family"):
        text += f" ({vendor} family {info['family']}, model {info['model']}"
        text += f"; {' '.join(info.get('flags', [])) or 'no vector flags'})"
    return text


def same_processor(a, b):
    """Return True if two processor() records are the same kind of processor running the same
    libraries: vendor, family, model, vector flags and versions all equal."""
    keys = ("vendor", "family", "model", "flags", "torch", "mkl", "onednn")
    return all(a.get(k) == b.get(k) for k in keys)


class OpRecorder(TorchDispatchMode):
    """Records (module, op name, output hash) for every ATen operation that runs while it is
    active. Forward operations are named by the module they run in (forward hooks keep a
    stack of module names); backward and optimizer operations by the phase set in `phase`."""

    def __init__(self, model):
        super().__init__()
        self.ops, self.stack, self.phase = [], [], "forward"
        self.hooks = []
        for name, module in model.named_modules():
            self.hooks.append(module.register_forward_pre_hook(self.entered(name or "model")))
            self.hooks.append(module.register_forward_hook(self.left))

    def entered(self, name):
        """Return a forward pre-hook that puts the module's name on the stack."""

        def hook(module, args):
            self.stack.append(name)

        return hook

    def left(self, module, args, output):
        """A forward hook: the module's forward is done (returns None: the output stays)."""
        self.stack.pop()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        tensors = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        where = self.stack[-1] if self.phase == "forward" and self.stack else self.phase
        self.ops.append([where, name, "-" if name in UNWRITTEN else digest(tensors)])
        return out

    def remove_hooks(self):
        for hook in self.hooks:
            hook.remove()


def save(trace, path):
    """Write a trace as gzipped JSON (the same bytes for the same trace)."""
    text = json.dumps(trace, separators=(",", ":"), sort_keys=True)
    Path(path).write_bytes(gzip.compress(text.encode(), mtime=0))


def load(path):
    """Return the trace saved in path."""
    return json.loads(gzip.decompress(Path(path).read_bytes()))


def first_difference(reference, other):
    """Return None if two traces agree everywhere, else one line that says where they part
    first: the operation (step, number, name, module) or, when every traced operation agrees,
    the step after which the parameters differ."""
    ref_ops, other_ops = reference["ops"], other["ops"]
    for step, (ops_a, ops_b) in enumerate(zip(ref_ops, other_ops), start=1):
        for i, (a, b) in enumerate(zip(ops_a, ops_b)):
            if a != b:
                if a[:2] != b[:2]:
                    return (
                        f"step {step}, operation {i + 1}: other operations ran ({a[1]} in "
                        f"{a[0]} there, {b[1]} in {b[0]} here)"
                    )
                return f"step {step}, operation {i + 1} of {len(ops_a)}: {a[1]} in {a[0]}"
        if len(ops_a) != len(ops_b):
            return f"step {step}: {len(ops_a)} operations there, {len(ops_b)} here"
    for step, (a, b) in enumerate(zip(reference["steps"], other["steps"])):
        if a != b:
            where = "before the first step" if step == 0 else f"after step {step}"
            return (
                f"the parameters {where} (every operation of the first "
                f"{min(len(ref_ops), len(other_ops))} steps agreed)"
            )
    if len(reference["steps"]) != len(other["steps"]):
        return (
            f"{len(reference['steps']) - 1} steps there, {len(other['steps']) - 1} here "
            "(the same up to the shorter)"
        )
    return None
