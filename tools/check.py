"""Grade a student's step with the course's own comparison tests, run for real.

    python tools/check.py 3 exercises/step3/train.py     (make check STEP=3 FILE=...)

The file runs where step N runs - step 2 on 1 process and on 2 CPU processes, step 3 on 2
CPU processes (accelerate launch), step 4 through its own notebook_launcher on 2 - with
tools/lab_driver.py reporting from inside every process, and is compared with what the
lesson requires:
- step 2: on 1 process, the same losses and predictions as step 1, bit for bit; on 2
  processes, one group, and the same training as the course's step 2 there;
- step 3: on 2 processes, one group; the whole validation split scored once (408 pairs);
  the same predictions as one process evaluating the same final weights alone; one
  process prints, shows the bar and writes metrics.json; every process leaves the group;
- step 4: notebook_launcher's 2 processes in one group; the model created once, before the
  launch; every batch 128 tokens long; with dropout off, the same predictions as step 3
  (losses to a relative 1e-4); the whole split scored once, one writer.
One line per check: `pass` or `FAIL` with a hint measured from the run (the same words as the
what-if table's verdicts: tools/lab.py). Exit code 1 when a check fails, so a classroom
autograder that runs a command and reads its exit code can use it as it is.
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tools import lab  # noqa: E402

STEP_FILE = {step: REPO / folder / "train.py" for step, folder in lab.FOLDERS.items()}


class Check(NamedTuple):
    name: str
    passed: bool
    hint: str  # why it failed, from the run; "" when it passed


def hint(run, reference, names=None):
    """Return the symptoms of a run against a reference, as one hint (only the symptoms named,
    when names are given), or a generic line when none is found."""
    found = [s for s in lab.symptoms(run, reference) if names is None or s.name in names]
    if not found:
        found = lab.process_symptoms(run)
    return "; ".join(s.hint for s in found) or "it differs from the lesson's run"


def refused(run):
    return [Check("it runs", False, f"the run stopped: {run['error']}")] if run["error"] else []


def grade_step2(one, two, one_reference, two_reference):
    """one/two: the candidate's runs on 1 and 2 processes; the references: step 1 on 1 process,
    the course's step 2 on 2."""
    same_as_step1 = not one["error"] and one["losses"] == one_reference["losses"] and \
        one["predictions"] == one_reference["predictions"]
    joined = not two["error"] and two["alone"] == 0 and two["num_processes"] == 2
    same_training = joined and two["losses"] == two_reference["losses"] and \
        two["weights_equal"] and two["predictions"] == two_reference["predictions"]
    return [
        Check("1 process: the same losses and predictions as step 1, bit for bit", same_as_step1,
              "" if same_as_step1 else hint(one, one_reference)),
        Check("2 processes: one group, each process says it is one of 2", joined,
              "" if joined else hint(two, two_reference, {"alone", "refused"})),
        Check("2 processes: the same training as the course's step 2 (one model, one schedule)",
              same_training, "" if same_training else "not one group (above)" if not joined
              else hint(two, two_reference)),
    ]


def grade_step3(run):
    if run["error"]:
        return refused(run)
    joined = run["alone"] == 0 and run["num_processes"] == 2 and \
        run["distributed_type"] == "DistributedType.MULTI_CPU"
    scored = run["scored"][:1] == [lab.VALIDATION_PAIRS] and \
        len(run["predictions"] or []) == lab.VALIDATION_PAIRS
    equal = run["predictions"] == run["alone_predictions"]
    one_voice = run["writes"] == 1 and run["printed"] == 1 and run["bars"] == 1
    symptoms = {s.name: s.hint for s in lab.process_symptoms(run)}
    gathered = f" ({run['gathered']} gathered)" if run["gathered"] else ""
    return [
        Check("2 processes: one group, each process says it is one of 2", joined,
              "" if joined else symptoms.get("alone", "each process should report 2 processes")),
        Check(f"the whole validation split scored once: {lab.VALIDATION_PAIRS} pairs{gathered}",
              scored, "" if scored else symptoms.get("tail_counted") or symptoms.get(
                  "own_share") or f"the main process scored {run['scored']}"),
        Check("the same predictions as one process evaluating the same weights alone", equal,
              "" if equal else differing(run["predictions"] or [], run["alone_predictions"])),
        Check("one process prints the result, shows the bar and writes metrics.json", one_voice,
              "" if one_voice else "; ".join(symptoms[k] for k in
                                             ("many_writers", "many_printers", "many_bars")
                                             if k in symptoms)),
        Check("every process leaves the process group at the end", bool(run["left_group"]),
              "" if run["left_group"] else "a process exited without accelerator.end_training()"),
    ]


def differing(predictions, alone):
    """Return how a run's predictions differ from those of its weights evaluated alone."""
    if len(predictions) != len(alone):
        return f"{len(predictions)} predictions for {len(alone)} pairs"
    return f"{sum(a != b for a, b in zip(predictions, alone))} of {len(alone)} predictions differ"


def grade_step4(run, step3_reference):
    """run: the candidate through its notebook_launcher on 2 processes, dropout off; the
    reference: the course's step 3 on 2 processes, dropout off."""
    if run["error"]:
        return refused(run)
    symptoms = {s.name: s.hint for s in lab.process_symptoms(run)}
    joined = run["alone"] == 0 and run["processes"] == 2 and run["num_processes"] == 2
    if run["processes"] < 2:
        symptoms["alone"] = ("only 1 process trained: main() should start training_function "
                             "with notebook_launcher(..., num_processes=2)")
    outside = run["models_created_before"] >= 1 and run["models_created_inside"] == 0
    fixed = run["lengths"] == [128]
    equal = run["predictions"] == step3_reference["predictions"] and \
        lab.close(run["losses"] or [], step3_reference["losses"])
    whole = run["scored"][:1] == [lab.VALIDATION_PAIRS] and run["writes"] == 1
    return [
        Check("notebook_launcher: 2 processes in one group, each says it is one of 2", joined,
              "" if joined else symptoms.get("alone", f"{run['processes']} process(es) "
                                             "trained: main() should call notebook_launcher")),
        Check("the model created once, before the launch, and passed in", outside,
              "" if outside else f"the model was created {run['models_created_inside']} times "
              "inside the launched processes: on a TPU every core would load its own copy"),
        Check("every batch padded to the same 128 tokens", fixed,
              "" if fixed else f"the model saw batches of {len(run['lengths'])} different "
              f"lengths ({', '.join(map(str, run['lengths'][:6]))}, ...): on XLA each new "
              "length compiles a new graph"),
        Check("with dropout off, step 3's predictions, and its losses to a relative 1e-4", equal,
              "" if equal else hint(run, step3_reference)),
        Check("the whole validation split scored once, one metrics.json", whole,
              "" if whole else "; ".join(symptoms.values()) or f"scored {run['scored']}"),
    ]


def one_process_runs(candidates, folder):
    """Run step 1, step 2 and the candidates on one process, under accelerate launch (which
    gives it one thread); return {name: measurement}."""
    scripts = {"step1": STEP_FILE[1], "lesson": STEP_FILE[2], **candidates}
    return lab.run_scripts(2, scripts, Path(folder) / "one", processes=1, launcher="accelerate")


def runs_for(step, candidates, folder, measured=None, step3_reference=None, one=None):
    """Run what grading `candidates` ({name: path}) needs for a step, all in as few launches as
    possible; return {mode: {name: measurement}}. Runs already made are not made again:
    `measured`, the what-if lab's of the step (same flags); `one`, one_process_runs(...);
    step3_reference, step 4's reference (step 3 on 2 processes with dropout off)."""
    folder = Path(folder)
    runs = {}
    if step == 2:
        runs["one"] = one or one_process_runs(candidates, folder)
        if measured is None:
            measured = lab.run_scripts(2, {"lesson": STEP_FILE[2], **candidates}, folder / "two")
        runs["two"] = measured
    elif step == 3:
        runs["two"] = measured or lab.run_scripts(3, {"lesson": STEP_FILE[3], **candidates},
                                                  folder / "two")
    else:
        flags = lab.step4_flags(folder)
        runs["step3"] = {"lesson": step3_reference} if step3_reference else \
            lab.run_scripts(3, {"lesson": STEP_FILE[3]}, folder / "step3", flags)
        runs["two"] = measured or lab.run_scripts(4, {"lesson": STEP_FILE[4], **candidates},
                                                  folder / "two", flags,
                                                  env=lab.LAUNCH_ENV.get(4))
    return runs


def grade(step, name, runs):
    """Return the Checks of candidate `name` from runs_for(...)."""
    if step == 2:
        return grade_step2(runs["one"][name], runs["two"][name], runs["one"]["step1"],
                           runs["two"]["lesson"])
    if step == 3:
        return grade_step3(runs["two"][name])
    return grade_step4(runs["two"][name], runs["step3"]["lesson"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", type=int, choices=[2, 3, 4])
    parser.add_argument("file", type=Path)
    args = parser.parse_args()
    if not args.file.is_file():
        sys.exit(f"error: {args.file} does not exist; write it first: make exercise STEP={args.step}")
    start = time.perf_counter()
    folder = Path(tempfile.mkdtemp(prefix=f"check-step{args.step}-"))
    print(f"checking {args.file} as step {args.step} (the runs: {folder})", flush=True)
    runs = runs_for(args.step, {"yours": args.file.resolve()}, folder)
    checks = grade(args.step, "yours", runs)
    for check in checks:
        print(f"  {'pass' if check.passed else 'FAIL'}  {check.name}"
              + ("" if check.passed else f"\n        hint: {check.hint}"))
    failed = sum(not c.passed for c in checks)
    print(f"{len(checks) - failed} of {len(checks)} checks passed in "
          f"{time.perf_counter() - start:.0f} s")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
