"""The lab's patches: a step's variants (stepN_*/whatif/<name>.patch, one lesson line taken out
or done the other common way) and its invariants' additions (stepN_*/invariants/), each
applied to a copy of the step, never to the step itself.
"""

import re
import tempfile
from pathlib import Path
from typing import NamedTuple

from accelerate_course.steps import FOLDERS, REPO


class PatchError(Exception):
    """A variant's patch does not apply to its step as the step is today."""



class Variant(NamedTuple):
    step: int
    name: str
    title: str        # the patch's first line, after "What if: " (or "Invariant: ")
    note: str         # its next lines, before the diff, as one paragraph ("" when none)
    changes: list     # the patch's changed lines, "-old" / "+new"
    path: Path



def variants(step, kind="whatif"):
    """Return the variants of a step in stepN_*/<kind>/ (the what-if variants, or with
    kind="invariants" the invariants' patches), in a fixed order (the patches' names)."""
    found = []
    for path in sorted((REPO / FOLDERS[step] / kind).glob("*.patch")):
        text = path.read_text()
        head = text.split("\n--- ", 1)[0].splitlines()
        title = head[0].split(": ", 1)[1].strip()
        note = " ".join(line.strip() for line in head[1:] if line.strip())
        changes = [line for line in text.splitlines()
                   if line.startswith(("+", "-")) and not line.startswith(("+++", "---"))]
        found.append(Variant(step, path.stem, title, note, changes, path))
    return found



def apply_patch(patch_path, text):
    """Return text with the unified diff in patch_path applied: each hunk's old lines must be
    found exactly as they are in the patch. Raises PatchError naming the patch otherwise."""
    lines = text.splitlines(keepends=True)
    hunks = re.split(r"^@@ [^\n]*@@\n", Path(patch_path).read_text(), flags=re.M)[1:]
    offset = 0
    for number, hunk in enumerate(hunks, start=1):
        old, new = [], []
        for line in hunk.splitlines(keepends=True):
            if line.startswith("-"):
                old.append(line[1:])
            elif line.startswith("+"):
                new.append(line[1:])
            elif line.startswith(" "):
                old.append(line[1:])
                new.append(line[1:])
            elif line.strip():
                break  # the end of the diff
        at = next((i for i in range(offset, len(lines) - len(old) + 1)
                   if lines[i:i + len(old)] == old), None)
        if at is None:
            step_folder = Path(patch_path).resolve().parent.parent.name
            raise PatchError(f"{Path(patch_path).resolve().relative_to(REPO)}: hunk {number} no "
                             f"longer applies to {step_folder}/train.py (its lines changed); "
                             "update the patch to today's step")
        lines[at:at + len(old)] = new
        offset = at + len(new)
    return "".join(lines)



def variant_scripts(step, names=None, folder=None):
    """Write the step and its variants (all, or those named) as scripts into folder; return
    {name: path}, the step itself as 'lesson' first."""
    folder = Path(folder or tempfile.mkdtemp(prefix=f"whatif-step{step}-"))
    step_text = (REPO / FOLDERS[step] / "train.py").read_text()
    scripts = {"lesson": REPO / FOLDERS[step] / "train.py"}
    for variant in variants(step):
        if names is not None and variant.name not in names:
            continue
        path = folder / "scripts" / variant.name / "train.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(apply_patch(variant.path, step_text))
        scripts[variant.name] = path
    return scripts
