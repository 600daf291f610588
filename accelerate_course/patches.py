"""The lab's patches: a step's variants (stepN_*/whatif/<name>.patch, one lesson line taken out
or done the other common way) and its invariants' additions (stepN_*/invariants/), each
applied to a copy of the step, never to the step itself.
"""

import re
import tempfile
from pathlib import Path
from typing import NamedTuple

from accelerate_course.steps import FOLDERS, REPO, code_of


class PatchError(Exception):
    """A variant's patch does not apply to its step as the step is today."""


class Variant(NamedTuple):
    step: int
    name: str
    title: str  # the patch's first line, after "What if: " (or "Invariant: ")
    note: str  # its next lines, before the diff, as one paragraph ("" when none)
    changes: list  # the patch's changed code lines, "-old" / "+new", comments left out
    path: Path
    note_zh: str = ""  # the note in Chinese: the lines after "zh-CN: ", before the diff

    def note_in(self, lang="en"):
        """Return the note in a language: "zh-CN" (the Chinese pages) or English."""
        return self.note_zh if lang == "zh-CN" else self.note


def variants(step, kind="whatif"):
    """Return the variants of a step in stepN_*/<kind>/ (the what-if variants, or with
    kind="invariants" the invariants' patches), in a fixed order (the patches' names)."""
    found = []
    for path in sorted((REPO / FOLDERS[step] / kind).glob("*.patch")):
        text = path.read_text()
        head = text.split("\n--- ", 1)[0].splitlines()
        title = head[0].split(": ", 1)[1].strip()
        # the English note, then (after a line that starts "zh-CN: ") the same in Chinese
        english, zh = head[1:], []
        for i, line in enumerate(head[1:], start=1):
            if line.startswith("zh-CN: "):
                english, zh = head[1:i], [line[len("zh-CN: ") :], *head[i + 1 :]]
                break
        note = " ".join(line.strip() for line in english if line.strip())
        note_zh = "".join(line.strip() for line in zh if line.strip())
        # the changed code without its comments: what the variant does
        changes = [
            line[0] + code_of(line[1:])
            for line in text.splitlines()
            if line.startswith(("+", "-"))
            and not line.startswith(("+++", "---"))
            and code_of(line[1:])
        ]
        found.append(Variant(step, path.stem, title, note, changes, path, note_zh))
    return found


def apply_patch(patch_path, text):
    """Return text with the unified diff in patch_path applied. A hunk is found by its code
    lines alone (context and removed lines without their comments, comment-only and blank
    lines skipped): a comment of the step can be mended without touching a patch. The step's
    own comments are kept; the patch's added lines go in as written, indented as the step's
    code around them now is. Raises PatchError naming
    the patch when a hunk's code is no longer in the step."""
    lines = text.splitlines(keepends=True)
    hunks = re.split(r"^@@ [^\n]*@@\n", Path(patch_path).read_text(), flags=re.M)[1:]
    code_at = [i for i, line in enumerate(lines) if code_of(line)]  # the step's code lines
    offset = 0  # hunks apply in order: the next is looked for after the last
    out = []
    done = 0  # the step's lines copied to out so far
    for number, hunk in enumerate(hunks, start=1):
        body = []
        for line in hunk.splitlines(keepends=True):
            if not line.startswith(("-", "+", " ")):
                if line.strip():
                    break  # the end of the diff
                line = " \n"  # a blank context line
            body.append((line[0], line[1:]))
        anchors = [code_of(line) for kind, line in body if kind != "+" and code_of(line)]
        start = next(
            (
                k
                for k in range(offset, len(code_at) - len(anchors) + 1)
                if [code_of(lines[i]) for i in code_at[k : k + len(anchors)]] == anchors
            ),
            None,
        )
        if not anchors or start is None:
            step_folder = Path(patch_path).resolve().parent.parent.name
            raise PatchError(
                f"{Path(patch_path).resolve().relative_to(REPO)}: hunk {number}: "
                f"its code is no longer in {step_folder}/train.py (a code line "
                "changed); update the patch to today's step"
            )
        out += lines[done : code_at[start]]
        done = code_at[start]
        matched = start
        # where the step's code now sits deeper or shallower than the patch's (an import
        # block moved into a try:), the added lines move with it
        pairs = [
            (line, lines[code_at[start + k]])
            for k, line in enumerate(line for kind, line in body if kind != "+" and code_of(line))
        ]
        shifts = [indent(step_line) - indent(patch_line) for patch_line, step_line in pairs]
        shift = shifts[0]
        for kind, line in body:
            if kind == "+":
                out.append(shifted(line, shift))
            elif not code_of(line):
                # a comment or blank line: followed where the step still has it there (kept
                # as context, left out as removed), else passed over
                if (
                    done < len(lines)
                    and not code_of(lines[done])
                    and lines[done].strip() == line.strip()
                ):
                    out += [lines[done]] if kind == " " else []
                    done += 1
            else:
                at = code_at[matched]
                # context: the step's lines up to this one, comments and all; removed: the
                # comments above it stay, the line goes
                out += lines[done : at + 1] if kind == " " else lines[done:at]
                shift = shifts[matched - start]
                done, matched = at + 1, matched + 1
        offset = matched
    return "".join(out + lines[done:])


def indent(line):
    """Return the number of spaces a line starts with."""
    return len(line) - len(line.lstrip(" "))


def shifted(line, shift):
    """Return line moved right (shift > 0) or left by shift spaces (a blank line unchanged)."""
    if not line.strip():
        return line
    return " " * shift + line if shift >= 0 else line[min(-shift, indent(line)) :]


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
