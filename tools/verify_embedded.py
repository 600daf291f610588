"""Rebuild the embedded default from source and compare it with the committed files.

    python tools/verify_embedded.py        (make verify-embedded: about 10 minutes on 2 cores)

1. the data: common/embedded_data/generate.py writes the three splits into a temporary folder;
2. the checkpoint: common/embedded_checkpoint/pretrain.py builds it from that data, into
   another temporary folder;
3. one line per file: the same bytes as the committed file, or not;
4. step 1 fine-tunes both checkpoints, the rebuilt one and the committed one, with the
   course's settings, and their accuracy and F1 are compared.
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
          "checkpoint from it (about 8 minutes) ...", flush=True)
    run("-m", "common.embedded_checkpoint.pretrain", "--out", checkpoint, "--data", data)
    same &= compare(checkpoint, CHECKPOINT, ["config.json", "model.safetensors",
                                             "tokenizer.json", "tokenizer_config.json"])
    rebuilt = fine_tune(checkpoint, data, folder / "fine-tuned-rebuilt")
    committed = fine_tune(CHECKPOINT, "embedded", folder / "fine-tuned-committed")
    results_equal = (rebuilt["accuracy"], rebuilt["f1"]) == (committed["accuracy"], committed["f1"])
    for name, m in (("rebuilt", rebuilt), ("committed", committed)):
        print(f"  fine-tuned by step 1 ({name}): accuracy {m['accuracy']:.4f}, f1 {m['f1']:.4f}, "
              f"{m['predictions'].count(0)} x 0 and {m['predictions'].count(1)} x 1 predicted")
    ok = same and results_equal
    print(f"{'the same' if ok else 'NOT the same'}: rebuilt from source in "
          f"{time.perf_counter() - start:.0f} s")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
