"""Write a student's starting file for a lesson: the step, with the lesson taken back out.

    python -m accelerate_course.exercise 3          (make exercise STEP=3: writes
                                                     exercises/step3/train.py)
    python -m accelerate_course.exercise 3 --print  (prints it instead)

The file is made from the step itself, never by hand: every hunk of the diff from step N-1
to step N (the lesson, the same hunks `diff -u` shows) is put back to step N-1's code, with a
`# TODO step N: ...` comment in its place whose words are the comments of the lesson's new
lines. So the exercise is step N-1 plus comments, runs as it is, and can never drift from
the step. `make check STEP=N FILE=...` grades it.
"""

import argparse
import re
import sys

from accelerate_course.steps import (
    FOLDERS,
    LESSONS,
    REPO,
    code_of,
    docstring_end,
    lesson_hunks,
    lesson_lines,
)

# a hunk whose new lines carry no comment gets one of these, by what it does
WITHOUT_COMMENT = {
    "adds": "a line of the lesson goes here",
    "changes": "the lesson changes the next line(s)",
    "removes": "the lesson takes the next line(s) out",
}


def comment_texts(lines):
    """Return the words of the comments in lines: each comment-only run as one text, and each
    comment after code as one."""
    texts, run = [], []
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("#"):
            run.append(stripped.lstrip("#").strip())
            continue
        if run:
            texts.append(" ".join(run))
            run = []
        code = code_of(line)
        if code and stripped != code:  # a comment after the code
            texts.append(stripped[len(code) :].strip().lstrip("#").strip())
    if run:
        texts.append(" ".join(run))
    return [text for text in texts if text]


def wrap(text, indent, width=96):
    """Return text as comment lines of at most width characters: `# text`, then `#   more`."""
    lines, current = [], ""
    for word in text.split():
        if current and len(indent) + 2 + len(current) + 1 + len(word) > width:
            lines.append(current)
            current = word
        else:
            current = f"{current} {word}".strip()
    if current:
        lines.append(current)
    # continuation lines are indented, so that a TODO never runs into a comment of the code
    return [
        f"{indent}# {line}" if i == 0 else f"{indent}#   {line}" for i, line in enumerate(lines)
    ]


def exercise(step):
    """Return the text of step `step`'s exercise."""
    before, after = lesson_lines(step)
    title = after[0].strip('"').strip()
    out = [
        '"""Exercise: ' + title[0].lower() + title[1:],
        "",
        f"This is step {step - 1}, with a TODO where each change of step {step} goes. "
        "Make the changes,",
        f"then check them: make check STEP={step} FILE=exercises/step{step}/train.py",
        '"""',
    ]
    start = docstring_end(before) + 1
    done = start  # the lines of the previous step copied so far
    for i1, i2, j1, j2 in lesson_hunks(step):
        if i2 <= start and j2 <= docstring_end(after) + 1:
            continue  # the docstring: replaced by the exercise's own above
        out += before[done:i1]  # unchanged lines up to the hunk
        done = i2
        i1 = max(i1, start)
        # the lesson's own comments: those the previous step has there already are not new
        texts = [
            text for text in comment_texts(after[j1:j2]) if text not in comment_texts(before[i1:i2])
        ]
        code = [line for line in after[j1:j2] + before[i1:i2] if line.strip()]
        indent = re.match(r"\s*", code[0]).group(0) if code else ""
        does = "removes" if not after[j1:j2] else "adds" if i1 == i2 else "changes"
        todos = texts or [WITHOUT_COMMENT[does]]
        # lines replaced by several explained changes: the first TODO above them, the others
        # below them, where that code goes (the cut goes after the loop, not inside it)
        old = [line for line in before[i1:i2] if line.strip()]
        above, below = (todos[:1], todos[1:]) if old else (todos, [])
        blank = next((k for k, line in enumerate(before[i1:i2]) if line.strip()), 0)
        out += before[i1 : i1 + blank]  # blank lines first: the TODO sits on what changes
        for text in above:
            out += wrap(f"TODO step {step}: {text}", indent)
        out += before[i1 + blank : i2]
        for text in below:
            out += wrap(f"TODO step {step}: {text}", re.match(r"\s*", old[-1]).group(0))
    out += before[done:]
    return "\n".join(out) + "\n"


def main():
    parser = argparse.ArgumentParser(
        prog="python -m accelerate_course.exercise", description=__doc__.splitlines()[0]
    )
    parser.add_argument("step", type=int, choices=LESSONS)
    parser.add_argument("--print", action="store_true", help="print it instead of writing it")
    parser.add_argument("--force", action="store_true", help="overwrite an existing exercise")
    args = parser.parse_args()
    text = exercise(args.step)
    if args.print:
        sys.stdout.write(text)
        return
    path = REPO / "exercises" / f"step{args.step}" / "train.py"
    if write_once(
        path,
        text,
        args.force,
        f"python -m accelerate_course.exercise {args.step} --force",
        f"python -m accelerate_course.exercise {args.step} --print > train.py",
    ):
        print(
            f"wrote {path.relative_to(REPO)}: step {args.step - 1} with "
            f"{text.count(f'# TODO step {args.step}:')} TODOs for step {args.step}'s lesson"
        )
    print(f"run it:    {run_command(args.step, path.relative_to(REPO))}")
    print(f"check it:  make check STEP={args.step} FILE={path.relative_to(REPO)}")


def write_once(path, text, force, again, elsewhere=None):
    """Write a student's starting file, never over their work: a file that exists with changes
    is kept, in one line that says how to start again (`again`), unless force. Return whether
    it was written. A folder that cannot be written (a read-only clone) ends the command in
    one line naming the fix."""
    shown = path.relative_to(REPO) if path.is_relative_to(REPO) else path
    if path.exists() and path.read_bytes() != text.encode() and not force:
        print(
            f"kept {shown}: it has your changes (to start again from the untouched file: {again})"
        )
        try:
            path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as error:  # an editor's Windows encoding: Python reads UTF-8
            print(
                f"note: {shown} is not UTF-8 (byte {error.start + 1} is not), and Python "
                "reads a script as UTF-8: save it again as UTF-8 in your editor"
            )
        return False
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as error:
        fix = f", or write it elsewhere: {elsewhere}" if elsewhere else ""
        sys.exit(
            f"error: cannot write {shown} ({error.strerror or error}): clone the course "
            f"into a folder you can write to{fix}"
        )
    return True


def run_command(step, path):
    """Return the command that runs the exercise of a step: the step's own Run: line (its
    docstring), with the exercise in place of the step and an output folder of its own."""
    folder = FOLDERS[step]
    lines = (REPO / folder / "train.py").read_text().splitlines()
    docstring = "\n".join(lines[: docstring_end(lines)])
    run = docstring.split("Run:", 1)[1].split("\nRead:")[0].replace("\\\n", " ")
    command = " ".join(run.split())
    return command.replace(f"{folder}/train.py", str(path)).replace(
        f"outputs/step{step}", f"outputs/exercise{step}"
    )


if __name__ == "__main__":
    main()
