"""One check of results.json as an exit code, for an autograding step: 0 when it scored its points.

    python .github/classroom/check_result.py results.json one_writer

It prints the check's points, and why it scored none: its own hint when it failed, or the
check that kept every check from scoring (the grade stopped before it: the reason).
"""
import json
import sys

path, key = sys.argv[1], sys.argv[2]
try:
    results = json.load(open(path, encoding="utf-8"))
except (OSError, ValueError) as error:
    sys.exit(f"no grade ({path}: {error}); see the step that graded the exercise")
tests = results.get("tests", [])
found = [t for t in tests if t.get("extra_data", {}).get("check") == key]
if not found:  # the grade stopped before this check: its first test, or the grade, says why
    sys.exit(f"{tests[0]['name']}: {tests[0]['output']}" if tests else results.get("output", "no grade"))
test = found[0]
print(f"{test['name']}: {test['score']} / {test['max_score']}")
if test["status"] != "passed" or test["score"] < test["max_score"]:
    sys.exit(test["output"])
