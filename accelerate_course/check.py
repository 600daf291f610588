"""Grade a student's step with the course's own comparison tests, run for real.

    python -m accelerate_course.check 3 exercises/step3/train.py     (make check STEP=3 FILE=...)
    python -m accelerate_course.check 3 FILE --json results.json    (and Gradescope's results.json)

The file runs where step N runs (step 2 on 1 and 2 processes, step 3 on 2 and on 2 machines,
step 4 through its own notebook_launcher), measured from inside every process
(accelerate_course/lab_driver.py), and each check compares it with what the lesson requires
(docs/classroom.md lists them, POINTS says what each is worth). Before anything is launched
the file must be valid Python and its own code; each launch has a time limit. One line per
check, `pass` or `FAIL` with a hint measured from the run (the what-if table's words:
accelerate_course/diagnosis.py), the score, and exit code 1 when a check fails.
"""

import argparse
import ast
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from accelerate_course import diagnosis, measuring, run_plans, running
from accelerate_course.steps import FOLDERS, TRAIN_PY as STEP_FILE

# seconds one launch of the grader may run (the student's runs, the lesson's, or the unseen
# setting's): step 3's whole check, all three, takes about 30 s on 2 cores
TIME_LIMIT = 300


class Check(NamedTuple):
    name: str
    passed: bool
    hint: str  # why it failed, from the run; "" when it passed
    key: str = ""  # its key in POINTS, what it is worth; "": a check that stops grading


# what each check is worth, by step: a grade is out of the sum (make check prints the score,
# --json writes Gradescope's results.json, a classroom workflow scores each check on its own)
POINTS = {
    2: {"like step 1": 2, "one group": 1, "same training": 2},
    3: {"one group": 1, "trained": 1, "own share": 1, "scored once": 2, "own predictions": 2,
        "one voice": 1, "left the group": 1, "unseen setting": 1},
    4: {"one group": 2, "model outside": 2, "fixed shapes": 2, "like step 3": 2,
        "scored once": 2},
}


def total(step):
    """Return the points a step's grade is out of."""
    return sum(POINTS[step].values())


def hint(run, reference, names=None):
    """Return the symptoms of a run against a reference, as one hint (only the symptoms named,
    when names are given), or a generic line when none is found."""
    found = [s for s in diagnosis.symptoms(run, reference) if names is None or s.name in names]
    if not found:
        found = diagnosis.process_symptoms(run)
    return "; ".join(s.hint for s in found) or "it differs from the lesson's run"


# what a crash says, and what it means in the lesson's words (without writing the answer)
NOT_EVERY_PROCESS_GATHERED = ("a process waited in a collective that another process never "
                              "joined (a gather, or the forward pass of the prepared model, "
                              "whose DistributedDataParallel wrapper first broadcasts its "
                              "buffers): every process must take part in each, in the same "
                              "order")
CRASH_HINTS = [
    ("Mismatch in the number of predictions",
     "the metric got more predictions than references: each process holds only its own share "
     "of the labels too, so they need what the predictions get"),
    ("Unsupported types",
     "gather() was given something that is not a tensor (a Python list or number): it gathers "
     "tensors; turn them into Python values after gathering"),
    ("lost another process", NOT_EVERY_PROCESS_GATHERED),  # the course's line (common/interrupt.py)
    ("by peer", NOT_EVERY_PROCESS_GATHERED),  # gloo's "Connection closed (or reset) by peer"
]


def refused(run):
    """Return the one failing Check of a run that stopped (none when it did not): the line it
    stopped with, and what that means when it is a crash the lesson explains."""
    if not run.error:
        return []
    meaning = next((hint for text, hint in CRASH_HINTS if text in run.error), None)
    return [Check("it runs", False, f"the run stopped: {run.error}"
                  + (f"\n        meaning: {meaning}" if meaning else ""))]


def grade_step2(one, two, one_reference, two_reference):
    """one/two: the candidate's runs on 1 and 2 processes; the references: step 1 on 1 process,
    the course's step 2 on 2."""
    same_as_step1 = not one.error and one.losses == one_reference.losses and \
        one.predictions == one_reference.predictions
    joined = not two.error and two.processes_alone == 0 and two.accelerator_processes == 2
    same_training = joined and two.losses == two_reference.losses and \
        two.weights_equal and two.predictions == two_reference.predictions
    return [
        Check("1 process: the same losses and predictions as step 1, bit for bit", same_as_step1,
              "" if same_as_step1 else hint(one, one_reference), "like step 1"),
        Check("2 processes: one group, each process says it is one of 2", joined,
              "" if joined else hint(two, two_reference, {"alone", "refused"}),
              "one group"),
        Check("2 processes: the same training as the course's step 2 (one model, one schedule)",
              same_training, "" if same_training else "not one group (above)" if not joined
              else hint(two, two_reference), "same training"),
    ]


def grade_step3(run, lesson, unseen=None):
    """run: the candidate on 2 processes, beside the course's step 3 (lesson) in the same
    setting; unseen: the candidate in a setting it has not seen (2 machines of 1 process,
    evaluation batches of 5: UNSEEN_FLAGS), or None when it was not run."""
    if run.error:
        return refused(run)
    joined = run.processes_alone == 0 and run.accelerator_processes == 2 and \
        run.distributed_type == "DistributedType.MULTI_CPU"
    steps, lesson_steps = len(run.learning_rates), len(lesson.learning_rates)
    trained = steps == lesson_steps and run.weights == lesson.weights
    share, lesson_share = run.eval_forwarded, lesson.eval_forwarded
    own_share = share == lesson_share
    scored = run.scored[:1] == [measuring.VALIDATION_PAIRS] and \
        len(run.predictions or []) == measuring.VALIDATION_PAIRS
    equal = run.predictions == run.alone_predictions
    one_voice = run.writes == 1 and run.printed == 1 and run.bars == 1
    symptoms = {s.name: s.hint for s in diagnosis.process_symptoms(run)}
    gathered = f" ({run.gathered} gathered)" if run.gathered else ""
    checks = [
        Check("2 processes: one group, each process says it is one of 2", joined,
              "" if joined else symptoms.get("alone", "each process should report 2 processes"),
              "one group"),
        Check(f"it trained as the lesson does: the same weights after {lesson_steps} "
              f"optimizer steps", trained, "" if trained else
              "no optimizer step was taken: it did not train" if not steps else
              f"{steps} optimizer steps, where the lesson takes {lesson_steps}"
              if steps != lesson_steps else "its final weights differ from the lesson's",
              "trained"),
        Check(f"each process evaluated its own share ({' + '.join(map(str, lesson_share))} "
              f"pairs, the split and its duplicated tail)", own_share, "" if own_share else
              own_share_hint(share, lesson_share), "own share"),
        Check(f"the whole validation split scored once: {measuring.VALIDATION_PAIRS} pairs{gathered}",
              scored, "" if scored else symptoms.get("tail_counted") or symptoms.get(
                  "own_share") or f"the main process scored {run.scored}",
              "scored once"),
        Check("the same predictions as one process evaluating the same weights alone", equal,
              "" if equal else differing(run.predictions or [], run.alone_predictions),
              "own predictions"),
        Check("one process prints the result, shows the bar and writes metrics.json", one_voice,
              "" if one_voice else "; ".join(symptoms[k] for k in
                                             ("many_writers", "many_printers", "many_bars")
                                             if k in symptoms), "one voice"),
        Check("every process leaves the process group at the end", bool(run.left_group),
              "" if run.left_group else "a process exited while still in the process group: "
              "the lesson leaves it explicitly, at the end of the function",
              "left the group"),
    ]
    if unseen is not None:
        checks.append(unseen_check(unseen))
    return checks


def own_share_hint(share, lesson_share):
    """Say how the processes' own evaluations differ from the lesson's."""
    if not any(share):
        return "no process put the validation pairs through the model: predictions must come " \
               "from the model, evaluated by every process"
    if sorted(share)[-1] >= measuring.VALIDATION_PAIRS and sorted(share)[0] == 0:
        return (f"one process evaluated all {measuring.VALIDATION_PAIRS} pairs and the others none "
                f"({' + '.join(map(str, share))}): prepare() gives each process its own share "
                "of the evaluation loader, to evaluate at once and gather")
    if all(n >= measuring.VALIDATION_PAIRS for n in share):
        return (f"each process evaluated all {measuring.VALIDATION_PAIRS} pairs itself "
                f"({' + '.join(map(str, share))}): the evaluation loader should give each process "
                "its own share, as the training loader does, and the shares be gathered")
    return f"the processes evaluated {' + '.join(map(str, share))} pairs; the lesson's " \
           f"evaluate {' + '.join(map(str, lesson_share))}"


# a setting the exercise does not show: evaluation batches of 5 (408 pairs in 82 batches, 41
# per process: a duplicated tail of 2, not 8), on 2 machines of 1 process each
UNSEEN_FLAGS = [*run_plans.SHORT_RUN, "--eval-batch-size", "5"]


def unseen_check(run):
    """The candidate on 2 machines (1 process each, on 127.0.0.1) with UNSEEN_FLAGS."""
    name = "on 2 machines of 1 process, with evaluation batches of 5: the whole split once, " \
           "its weights' own predictions, one metrics.json"
    if run.error:
        return Check(name, False, f"the run stopped: {run.error}", "unseen setting")
    problems = []
    scored = run.scored[:1]
    if scored and scored == run.eval_forwarded[:1]:
        problems.append(f"the main process scored only its own share, {scored[0]} pairs of "
                        f"{measuring.VALIDATION_PAIRS}")
    elif scored != [measuring.VALIDATION_PAIRS]:
        problems.append(f"the main process scored {scored[0] if scored else 'no'} pairs for "
                        f"{measuring.VALIDATION_PAIRS}: how many predictions to keep depends on the "
                        f"split, not on this setting's number of processes and batch size")
    elif run.predictions != run.alone_predictions:
        problems.append(differing(run.predictions or [], run.alone_predictions))
    if run.writes != 1:
        problems.append(f"{run.writes} processes wrote metrics.json: on several machines, "
                        "each machine has a main process of its own, and the run has only one")
    return Check(name, not problems, "; ".join(problems), "unseen setting")


def differing(predictions, alone):
    """Return how a run's predictions differ from those of its weights evaluated alone."""
    if len(predictions) != len(alone):
        return f"{len(predictions)} predictions for {len(alone)} pairs"
    return f"{sum(a != b for a, b in zip(predictions, alone))} of {len(alone)} predictions differ"


def grade_step4(run, step3_reference):
    """run: the candidate through its notebook_launcher on 2 processes, dropout off; the
    reference: the course's step 3 on 2 processes, dropout off."""
    if run.error:
        return refused(run)
    symptoms = {s.name: s.hint for s in diagnosis.process_symptoms(run)}
    joined = run.processes_alone == 0 and run.processes_reporting == 2 and run.accelerator_processes == 2
    if run.processes_reporting < 2:
        symptoms["alone"] = ("only 1 process trained: main() should start training_function "
                             "with notebook_launcher(..., num_processes=2)")
    outside = run.models_created_before >= 1 and run.models_created_inside == 0
    fixed = run.lengths == [128]
    equal = run.predictions == step3_reference.predictions and \
        diagnosis.close(run.losses or [], step3_reference.losses)
    whole = run.scored[:1] == [measuring.VALIDATION_PAIRS] and run.writes == 1
    return [
        Check("notebook_launcher: 2 processes in one group, each says it is one of 2", joined,
              "" if joined else symptoms.get("alone", f"{run.processes_reporting} process(es) "
                                             "trained: main() should call notebook_launcher"),
              "one group"),
        Check("the model created once, before the launch, and passed in", outside,
              "" if outside else f"the model was created {run.models_created_inside} times "
              "inside the launched processes: on a TPU every core would load its own copy",
              "model outside"),
        Check("every batch padded to the same 128 tokens", fixed,
              "" if fixed else f"the model saw batches of {len(run.lengths)} different "
              f"lengths ({', '.join(map(str, run.lengths[:6]))}, ...): on XLA each new "
              "length compiles a new graph", "fixed shapes"),
        Check("with dropout off, step 3's predictions, and its losses to a relative 1e-4", equal,
              "" if equal else hint(run, step3_reference), "like step 3"),
        Check("the whole validation split scored once, one metrics.json", whole,
              "" if whole else "; ".join(symptoms.values()) or f"scored {run.scored}",
              "scored once"),
    ]


# the sets of runs a grading reads, each {name: Run}: one launch each
ONE_PROCESS = "1 process"  # step 2: step 1, step 2 and the candidates, on 1 process
TWO_PROCESSES = "2 processes"  # the candidates and the lesson where the lesson runs
TWO_MACHINES = "2 machines"  # step 3: the candidates in the setting no exercise shows
STEP3_REFERENCE = "step 3 without dropout"  # step 4: what it must equal


def one_process_runs(candidates, folder, time_limit=900):
    """Run step 1, step 2 and the candidates on one process, under accelerate launch (which
    gives it one thread); return {name: Run}."""
    scripts = {"step1": STEP_FILE[1], "lesson": STEP_FILE[2], **candidates}
    return run_plans.run_scripts(2, scripts, Path(folder) / "one", processes=1,
                                 launcher="accelerate", time_limit=time_limit)


def runs_for(step, candidates, folder, made=None, time_limit=900):
    """Return the sets of runs that grading `candidates` ({name: path}) as step `step` reads,
    {set name: {name: Run}}: each set not in `made` (sets run already, with the same flags
    and candidates) is run now, in one launch."""
    folder, made = Path(folder), made or {}
    needed = {
        2: {ONE_PROCESS: lambda: one_process_runs(candidates, folder, time_limit),
            TWO_PROCESSES: lambda: run_plans.run_scripts(
                2, {"lesson": STEP_FILE[2], **candidates}, folder / "two",
                time_limit=time_limit)},
        # the candidates in a launch of their own, before the lesson's: no output of the
        # lesson exists while they run, and a collective only some of their processes join
        # ends their launch (the others leave), instead of meeting the lesson's collectives
        3: {TWO_PROCESSES: lambda: {
                **run_plans.run_scripts(3, candidates, folder / "yours", time_limit=time_limit),
                **run_plans.run_scripts(3, {"lesson": STEP_FILE[3]}, folder / "two",
                                        time_limit=time_limit)},
            TWO_MACHINES: lambda: run_plans.run_on_two_machines(
                3, candidates, folder / "unseen", UNSEEN_FLAGS, time_limit)},
        4: {STEP3_REFERENCE: lambda: run_plans.run_scripts(
                3, {"lesson": STEP_FILE[3]}, folder / "step3", run_plans.step4_flags(folder),
                time_limit=time_limit),
            TWO_PROCESSES: lambda: run_plans.run_scripts(
                4, {"lesson": STEP_FILE[4], **candidates}, folder / "two",
                run_plans.step4_flags(folder), env=run_plans.LAUNCH_ENV.get(4),
                time_limit=time_limit)},
    }[step]
    return {name: made[name] if name in made else run() for name, run in needed.items()}


def grade(step, name, runs):
    """Return the Checks of candidate `name` from runs_for(...)."""
    if step == 2:
        return grade_step2(runs[ONE_PROCESS][name], runs[TWO_PROCESSES][name],
                           runs[ONE_PROCESS]["step1"], runs[TWO_PROCESSES]["lesson"])
    if step == 3:
        return grade_step3(runs[TWO_PROCESSES][name], runs[TWO_PROCESSES]["lesson"],
                           runs[TWO_MACHINES].get(name))
    return grade_step4(runs[TWO_PROCESSES][name], runs[STEP3_REFERENCE]["lesson"])


def before_launch(path):
    """Return the Checks made on the file before anything is launched: it is Python, and its
    own code (its code, docstrings and comments aside, neither runs nor imports the course's
    step files)."""
    notebook = path.with_suffix(".ipynb")
    if notebook.exists() and notebook.stat().st_mtime > path.stat().st_mtime + 1:
        return [Check("it is the file you saved last", False,
                      f"{notebook} was saved after {path.name}, which is what is graded: "
                      f"jupytext --sync {notebook} writes the notebook into it (pair them once "
                      f"with jupytext --set-formats ipynb,py:percent {path})")]
    text = path.read_text()
    try:
        tree = ast.parse(text, str(path))
    except SyntaxError as error:
        return [Check("it is valid Python", False,
                      f"line {error.lineno}: {error.msg} (python -m py_compile {path} shows it)")]
    docstrings = {id(body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef))
                  and (body := node.body) and isinstance(body[0], ast.Expr)
                  and isinstance(body[0].value, ast.Constant)}
    uses_reference = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in docstrings:
            uses_reference |= {folder for folder in FOLDERS.values() if folder in node.value}
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(
            node, ast.Attribute) else None
        if name in ("exec", "runpy", "importlib", "__import__", "run_path", "import_module"):
            uses_reference.add(name)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [alias.name for alias in node.names] + [getattr(node, "module", "") or ""]
            uses_reference |= {m for m in modules if m.split(".")[0] in
                               ("runpy", "importlib", *FOLDERS.values())}
    if uses_reference:
        return [Check("it is its own code", False,
                      f"it uses {', '.join(sorted(uses_reference))}: the exercise is graded on "
                      f"the code you write, not on running or importing the course's step files")]
    return []


def graded_within(args, folder):
    """Return the Checks of the student's file: its runs graded, or one failing Check when a
    launch ran past the time limit."""
    try:
        return grade(args.step, "yours", runs_for(args.step, {"yours": args.file.resolve()},
                                                  folder, time_limit=args.time_limit))
    except running.TimeLimitReached as stopped:
        return [Check(f"it finishes within the time limit ({args.time_limit} s)", False,
                      f"the run was {stopped}, and was stopped with every process it had "
                      f"started: a loop that never ends, or a process waiting for the "
                      f"others? (on a slow machine: --time-limit with more seconds)")]


def remove_references(folder):
    """Remove the lesson's own runs (the student's stay, to read): no later run on this
    machine finds the lesson's outputs."""
    for reference in [*folder.glob("*/lesson"), *folder.glob("*/step1"), folder / "step3"]:
        shutil.rmtree(reference, ignore_errors=True)


def points(step, check):
    """Return what a check is worth when it passes (0 for a check that stops grading)."""
    return POINTS[step].get(check.key, 0)


def score(step, checks):
    """Return (points scored, points the grade is out of)."""
    return sum(points(step, c) for c in checks if c.passed), total(step)


def results(step, path, checks, seconds):
    """Return Gradescope's results.json for the checks of one file (its autograder format:
    gradescope-autograders.readthedocs.io, specs): one test per check, its points and, when it
    failed, its hint as output; a check that stopped grading (not valid Python, a crash, the
    time limit) as one test worth every point the grade is out of, none scored."""
    scored, out_of = score(step, checks)
    stopped = len(checks) == 1 and not checks[0].key
    tests = [{"name": check.name,
              "score": points(step, check) if check.passed else 0,
              "max_score": out_of if stopped else points(step, check),
              "status": "passed" if check.passed else "failed",
              "output": check.hint, "visibility": "visible",
              "extra_data": {"check": check.key}} for check in checks]
    return {"score": scored, "execution_time": round(seconds),
            "output": f"{path} checked as step {step}: {scored} of {out_of} points",
            "visibility": "visible", "stdout_visibility": "visible", "tests": tests}


def main():
    parser = argparse.ArgumentParser(prog="python -m accelerate_course.check",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("step", type=int, choices=[2, 3, 4])
    parser.add_argument("file", type=Path)
    parser.add_argument("--time-limit", type=int, default=TIME_LIMIT, metavar="SECONDS",
                        help=f"stop a launch that runs longer (default {TIME_LIMIT}; more on a "
                             "slow machine)")
    parser.add_argument("--json", type=Path, metavar="RESULTS_JSON",
                        help="also write the grade in Gradescope's results.json format")
    args = parser.parse_args()
    if not args.file.is_file():
        sys.exit(f"error: {args.file} does not exist; write it first: make exercise STEP={args.step}")
    start = time.perf_counter()
    folder = Path(tempfile.mkdtemp(prefix=f"check-step{args.step}-"))
    print(f"checking {args.file} as step {args.step} (the runs: {folder})", flush=True)
    checks = before_launch(args.file)
    try:
        with running.stop_together():
            if not checks:
                checks = graded_within(args, folder)
    except running.Stopped as stop:
        remove_references(folder)
        running.end_command(stop, f"the check of {args.file} was stopped: no grade")
    remove_references(folder)
    for check in checks:
        print(f"  {'pass' if check.passed else 'FAIL'}  {check.name}"
              + ("" if check.passed else f"\n        hint: {check.hint}"))
    failed = sum(not c.passed for c in checks)
    seconds = time.perf_counter() - start
    scored, out_of = score(args.step, checks)
    print(f"{len(checks) - failed} of {len(checks)} checks passed in {seconds:.0f} s: "
          f"{scored} of {out_of} points")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results(args.step, args.file, checks, seconds),
                                        indent=1) + "\n")
        print(f"results written to {args.json}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
