"""Rebuild the embedded default from source and compare it with the committed files.

    python -m accelerate_course.maintain.verify_embedded
        (make verify-embedded: about 20 minutes on 2 cores)
    python -m accelerate_course.maintain.verify_embedded --record
        (the same; when the rebuild is the same bytes on a processor the committed trace does
        not list yet, add it there)

1. The data (pure Python): the same bytes on any machine, or the check fails.
2. The checkpoint, built from that data with its trace
   (accelerate_course/maintain/embedded/trace.py):
   config.json and the tokenizer files must be the same bytes on any machine. For
   model.safetensors:
   - the same bytes: the check holds if the two traces agree too;
   - other bytes on a processor that
     accelerate_course/maintain/embedded/checkpoint_trace.json.gz lists as having matched: the
     check fails, naming where the traces part first;
   - other bytes on a processor it does not list: where the traces part is named, and the
     rebuilt checkpoint, fine-tuned by step 1 with the course's settings, must come within
     FINE_TUNED_TOLERANCE of the committed one (what a rounding-level change of the
     pretraining's kernels was measured to move it: docs/embedded-default.md).
3. Three short builds (SHORT_STEPS steps), compared by their traces: as they are; as if on a
   processor with AVX2 alone (the ISA caps that oneDNN and MKL obey), which must agree; and a
   control on PyTorch's generic kernels, which must differ at a named operation, so that the
   comparison is shown to fail when the kernels change.
Exit code 1 if any of these fails.
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from accelerate_course.lab_runs import lab_environment
from accelerate_course.maintain.embedded.trace import (
    TRACE_FILE,
    describe,
    first_difference,
    load,
    processor,
    same_processor,
    save,
)
from accelerate_course.steps import REPO

DATA = REPO / "common" / "embedded" / "data"
CHECKPOINT = REPO / "common" / "embedded" / "checkpoint"
ENV = lab_environment()  # offline, on the CPU, as the lab's runs
BUILDER = "accelerate_course.maintain.embedded.build_checkpoint"
# the largest change of step 1's accuracy and F1 that a rebuild on another processor may bring:
# rebuilds on other kernels moved them like another seed, by up to 0.03 (measured:
# docs/embedded-default.md); 0.05 is what the course allows between two runs that differ like
# two seeds (steps 3 and 4 in make course: accelerate_course/run_course.py's compare)
FINE_TUNED_TOLERANCE = 0.05
SHORT_STEPS = 20
# what an AVX2-only processor changes in the libraries that choose kernels by the processor
AVX2_ONLY = {"ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
# a control that must change the trace: PyTorch's generic kernels instead of its AVX2 ones
OTHER_KERNELS = {"ATEN_CPU_CAPABILITY": "default"}


def run(*command, env=ENV):
    """Run a Python command from the repository root; exit with its output if it fails."""
    result = subprocess.run(
        [sys.executable, *map(str, command)], cwd=REPO, env=env, capture_output=True, text=True
    )
    if result.returncode != 0:
        sys.exit(
            f"error: {' '.join(map(str, command))} failed:\n{result.stdout[-2000:]}"
            f"{result.stderr[-2000:]}"
        )
    return result


def same_files(built, committed, names):
    """Print one line per file; return the names whose bytes differ."""
    different = []
    for name in names:
        equal = (built / name).read_bytes() == (committed / name).read_bytes()
        if not equal:
            different.append(name)
        size = (committed / name).stat().st_size
        print(
            f"  {'same bytes' if equal else 'DIFFERENT '}  {committed.relative_to(REPO) / name}"
            f"  ({size:,} bytes)",
            flush=True,
        )
    return different


def fine_tune(checkpoint, dataset, out):
    """Return step 1's metrics for a checkpoint fine-tuned with the course's settings."""
    run(
        "step1_plain_loop/train.py",
        "--checkpoint",
        checkpoint,
        "--dataset",
        dataset,
        "--output-dir",
        out,
        env=dict(ENV, OMP_NUM_THREADS="1"),
    )
    return json.loads((Path(out) / "metrics.json").read_text())


def within_tolerance(rebuilt, committed, tolerance=FINE_TUNED_TOLERANCE):
    """Return True if the rebuilt checkpoint's accuracy and F1 are each within tolerance of
    the committed one's."""
    return all(abs(rebuilt[k] - committed[k]) <= tolerance for k in ("accuracy", "f1"))


def weights_verdict(reference, built, here):
    """Return (ok, line) for a rebuilt model.safetensors whose bytes differ from the committed
    one, before any fine-tuning: a processor the reference trace lists as matched must match."""
    where = first_difference(reference, built) or "nowhere in the trace (only the saved bytes)"
    if any(same_processor(p, here) for p in reference["matched_on"]):
        return False, (
            f"  the traces part first at {where}; this kind of processor rebuilt "
            "the same bytes before, so something else changed"
        )
    return None, (
        f"  the traces part first at {where}; this kind of processor is not among "
        "those that rebuilt the same bytes"
    )


def short_builds(folder, data):
    """Build SHORT_STEPS steps three ways at once (as they are, as if on an AVX2-only
    processor, and on other kernels); print a line for each comparison; return True if the
    first two traces agree and the control differs."""
    control = [f"--kernels={k}={v}" for k, v in OTHER_KERNELS.items()]
    settings = {
        "as they are": ({}, []),
        "as if on an AVX2-only processor": (AVX2_ONLY, []),
        "control": ({}, control),
    }
    builds = {}
    for name, (environment, arguments) in settings.items():
        out = folder / ("short-" + name.replace(" ", "-"))
        builds[name] = (
            out,
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    BUILDER,
                    "--steps",
                    str(SHORT_STEPS),
                    "--out",
                    out,
                    "--data",
                    data,
                    "--trace",
                    out / "trace.json.gz",
                    *arguments,
                ],
                cwd=REPO,
                env=dict(ENV, **environment),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            ),
        )
    traces = {}
    for name, (out, build) in builds.items():
        _, err = build.communicate()
        if build.returncode != 0:
            sys.exit(f"error: the short build {name!r} failed:\n{err[-2000:]}")
        traces[name] = load(out / "trace.json.gz")
    avx2 = first_difference(traces["as they are"], traces["as if on an AVX2-only processor"])
    caught = first_difference(traces["as they are"], traces["control"])
    print(
        f"  {'same trace' if avx2 is None else 'DIFFERENT '}  {SHORT_STEPS} steps, as they "
        "are and as if on an AVX2-only processor ("
        + " ".join(f"{k}={v}" for k, v in AVX2_ONLY.items())
        + ")"
        + ("" if avx2 is None else f": they part at {avx2}"),
        flush=True,
    )
    print(
        f"  {'differs   ' if caught else 'NOT CAUGHT'}  {SHORT_STEPS} steps on other kernels ("
        + " ".join(f"{k}={v}" for k, v in OTHER_KERNELS.items())
        + "), the control"
        + (f": caught at {caught}" if caught else ": the trace saw no difference"),
        flush=True,
    )
    return avx2 is None and caught is not None


def main():
    parser = argparse.ArgumentParser(
        prog="python -m accelerate_course.maintain.verify_embedded",
        description=__doc__.splitlines()[0],
    )
    parser.add_argument(
        "--record",
        action="store_true",
        help="add this processor to the committed trace's list when it rebuilds the same bytes",
    )
    args = parser.parse_args()
    start = time.perf_counter()
    here = processor()
    reference = load(TRACE_FILE)
    folder = Path(tempfile.mkdtemp(prefix="verify-embedded-"))
    data, checkpoint = folder / "data", folder / "checkpoint"
    print(f"rebuilding into {folder}\non {describe(here)}", flush=True)
    run("-m", "accelerate_course.maintain.embedded.build_data", "--out", data)
    different = same_files(data, DATA, ["train.jsonl", "validation.jsonl", "test.jsonl"])
    print(
        f"  data generated in {time.perf_counter() - start:.0f} s; pretraining the "
        "checkpoint from it (about 15 minutes) ...",
        flush=True,
    )
    built = run(
        "-m", BUILDER, "--out", checkpoint, "--data", data, "--trace", folder / "trace.json.gz"
    )
    kernels = next(line for line in built.stdout.splitlines() if "kernels: " in line)
    print("  pretrained with kernels: " + kernels.split("kernels: ")[1], flush=True)
    different += same_files(
        checkpoint, CHECKPOINT, ["config.json", "tokenizer.json", "tokenizer_config.json"]
    )
    weights = same_files(checkpoint, CHECKPOINT, ["model.safetensors"])
    ok = not different
    if not weights:
        # the same bytes: the trace must have come out the same too, or it could not say where
        # another machine's build parts from this one
        where = first_difference(reference, load(folder / "trace.json.gz"))
        print(
            f"  {'same trace' if where is None else 'DIFFERENT '}  the build's trace, "
            "operation by operation and step by step"
            + ("" if where is None else f": they part at {where}"),
            flush=True,
        )
        ok &= where is None
        known = any(same_processor(p, here) for p in reference["matched_on"])
        print(
            f"  this kind of processor {'was' if known else 'was not yet'} among those "
            f"that rebuilt the same bytes ({len(reference['matched_on'])} recorded)"
        )
        if not known and args.record and where is None:
            reference["matched_on"].append(here)
            save(reference, TRACE_FILE)
            print(f"  recorded in {TRACE_FILE.relative_to(REPO)}")
    else:
        ok_weights, line = weights_verdict(reference, load(folder / "trace.json.gz"), here)
        print(line, flush=True)
        if ok_weights is None:
            rebuilt = fine_tune(checkpoint, data, folder / "fine-tuned-rebuilt")
            committed = fine_tune(CHECKPOINT, "embedded", folder / "fine-tuned-committed")
            for name, m in (("rebuilt", rebuilt), ("committed", committed)):
                print(
                    f"  fine-tuned by step 1 ({name}): accuracy {m['accuracy']:.4f}, "
                    f"f1 {m['f1']:.4f}"
                )
            ok_weights = within_tolerance(rebuilt, committed)
            print(
                f"  {'within' if ok_weights else 'NOT within'} {FINE_TUNED_TOLERANCE} of the "
                "committed checkpoint's accuracy and F1",
                flush=True,
            )
        ok &= ok_weights
    ok &= short_builds(folder, data)
    verdict = (
        "the same"
        if ok and not weights
        else "close enough (other bytes, on a processor not yet recorded)"
        if ok
        else "NOT the same"
    )
    print(f"{verdict}: rebuilt from source in {time.perf_counter() - start:.0f} s")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
