"""Rebuild the embedded default from source and compare it with the committed files.

    python tools/verify_embedded.py        (make verify-embedded: about 25 minutes on 2 cores)

1. the data: common/embedded_data/generate.py writes the three splits into a temporary folder;
2. the checkpoint: common/embedded_checkpoint/pretrain.py builds it from that data, into
   another temporary folder;
3. one line per file: the same bytes as the committed file, or not;
4. step 1 fine-tunes both checkpoints, the rebuilt one and the committed one, with the
   course's settings, and their accuracy and F1 are compared;
5. two short pretrainings (100 steps), one of them started as if on another processor (the
   caller asks for MKL's AVX2 path, PyTorch's generic kernels and 2 threads: the builder
   must give the same bytes anyway, see its docstring), are compared.
Exit code 1 if any file or result differs.
"""

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "common" / "embedded_data"
CHECKPOINT = REPO / "common" / "embedded_checkpoint"
ENV = dict(os.environ, HF_ENDPOINT="http://127.0.0.1:9", TOKENIZERS_PARALLELISM="false")


def run(*command):
    """Run a command from the repository root; exit with its output if it fails."""
    result = subprocess.run([sys.executable, *map(str, command)], cwd=REPO, env=ENV,
                            capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"error: {' '.join(map(str, command))} failed:\n{result.stdout[-2000:]}"
                 f"{result.stderr[-2000:]}")
    return result


def compare(built, committed, names):
    """Print one line per file; return True if all are the same bytes."""
    same = True
    for name in names:
        equal = (built / name).read_bytes() == (committed / name).read_bytes()
        same &= equal
        size = (committed / name).stat().st_size
        print(f"  {'same bytes' if equal else 'DIFFERENT '}  {committed.relative_to(REPO) / name}"
              f"  ({size:,} bytes)", flush=True)
    return same


# what another processor, or a caller's settings, would change if the builder did not pin them
ANOTHER_PROCESSOR = {"MKL_ENABLE_INSTRUCTIONS": "AVX2", "ATEN_CPU_CAPABILITY": "default",
                     "OMP_NUM_THREADS": "2"}


def short_builds_agree(folder, data):
    """Build 100 pretraining steps twice at once, the second as if on another processor;
    print one line and return True if the two model.safetensors are the same bytes."""
    outs = [folder / "short", folder / "short-another-processor"]
    builds = [subprocess.Popen([sys.executable, "-m", "common.embedded_checkpoint.pretrain",
                                "--steps", "100", "--out", out, "--data", data], cwd=REPO,
                               env=dict(ENV, **extra), stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
              for out, extra in zip(outs, [{}, ANOTHER_PROCESSOR])]
    for build in builds:
        _, err = build.communicate()
        if build.returncode != 0:
            sys.exit(f"error: a short pretraining failed:\n{err[-2000:]}")
    equal = (outs[0] / "model.safetensors").read_bytes() == (outs[1] / "model.safetensors").read_bytes()
    settings = " ".join(f"{k}={v}" for k, v in ANOTHER_PROCESSOR.items())
    print(f"  {'same bytes' if equal else 'DIFFERENT '}  100 pretraining steps, as they are and "
          f"started with {settings}", flush=True)
    return equal


def fine_tune(checkpoint, dataset, out):
    """Return step 1's metrics for a checkpoint fine-tuned with the course's settings."""
    run("step1_plain_loop/train.py", "--checkpoint", checkpoint, "--dataset", dataset,
        "--output-dir", out)
    return json.loads((Path(out) / "metrics.json").read_text())


def main():
    start = time.perf_counter()
    folder = Path(tempfile.mkdtemp(prefix="verify-embedded-"))
    data, checkpoint = folder / "embedded_data", folder / "embedded_checkpoint"
    print(f"rebuilding into {folder}", flush=True)
    run("-m", "common.embedded_data.generate", "--out", data)
    same = compare(data, DATA, ["train.jsonl", "validation.jsonl", "test.jsonl"])
    print(f"  data generated in {time.perf_counter() - start:.0f} s; pretraining the "
          "checkpoint from it (about 20 minutes) ...", flush=True)
    built = run("-m", "common.embedded_checkpoint.pretrain", "--out", checkpoint, "--data", data)
    kernels = next(line for line in built.stdout.splitlines() if "kernels: " in line)
    print("  pretrained with kernels: " + kernels.split("kernels: ")[1], flush=True)
    same &= compare(checkpoint, CHECKPOINT, ["config.json", "model.safetensors",
                                             "tokenizer.json", "tokenizer_config.json"])
    rebuilt = fine_tune(checkpoint, data, folder / "fine-tuned-rebuilt")
    committed = fine_tune(CHECKPOINT, "embedded", folder / "fine-tuned-committed")
    results_equal = (rebuilt["accuracy"], rebuilt["f1"]) == (committed["accuracy"], committed["f1"])
    for name, m in (("rebuilt", rebuilt), ("committed", committed)):
        print(f"  fine-tuned by step 1 ({name}): accuracy {m['accuracy']:.4f}, f1 {m['f1']:.4f}, "
              f"{m['predictions'].count(0)} x 0 and {m['predictions'].count(1)} x 1 predicted")
    ok = short_builds_agree(folder, data) & same & results_equal
    print(f"{'the same' if ok else 'NOT the same'}: rebuilt from source in "
          f"{time.perf_counter() - start:.0f} s")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
