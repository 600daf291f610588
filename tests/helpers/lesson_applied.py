"""Lesson 3 applied to a loop mechanically, at test time: the solution of a take-home task
that no file holds (takehome/), and the known mistakes made the same way.

    applied(text)                            -> the loop, on several processes as lesson 3 says
    applied(text, gather="gather")           -> the same without dropping the duplicated tail
    applied(text, skip="sentence_losses")    -> one list of the evaluation left ungathered
    applied(text, writer="is_local_main_process" or None)
                                             -> the writer per machine, or every process

The loop is an Accelerate loop (lesson 2 done) whose training_function creates `accelerator`,
evaluates after `model.eval()` in the first `for` loop that follows it, and keeps what it
evaluates with `.append(...)` or `.add_batch(...)`. The rules are lesson 3's, none of them
about a particular loop: every tensor the evaluation loop keeps is gathered from every
process (with gather_for_metrics, which drops the duplicated tail); print becomes
accelerator.print and the progress bar shows on one process per machine; once every process
has got there, the main process alone saves the model and writes metrics.json; every process
leaves the process group at the end.
"""

import ast


def applied(text, gather="gather_for_metrics", skip=None, writer="is_main_process"):
    """Return the loop's text with lesson 3 applied (see the module's docstring)."""
    tree = ast.parse(text)
    function = next(
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and node.name == "training_function"
    )
    edits = []  # (line, column, end line, end column, new text): 1-based lines, as ast gives

    def source(node):
        return ast.get_source_segment(text, node)

    def wrap(node):
        edits.append(
            (
                node.lineno,
                node.col_offset,
                node.end_lineno,
                node.end_col_offset,
                f"accelerator.{gather}({source(node)})",
            )
        )

    body = function.body
    evaluated = next(
        i
        for i, node in enumerate(body)
        if isinstance(node, ast.Expr) and source(node).strip() == "model.eval()"
    )
    loop = next(node for node in body[evaluated:] if isinstance(node, ast.For))
    for node in ast.walk(loop):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr == "append" and not (skip and source(node.func.value) == skip):
                wrap(node.args[0])
            elif node.func.attr == "add_batch":
                for keyword in node.keywords:
                    wrap(keyword.value)
    for node in ast.walk(function):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id == "print":
                edits.append(
                    (
                        node.func.lineno,
                        node.func.col_offset,
                        node.func.end_lineno,
                        node.func.end_col_offset,
                        "accelerator.print",
                    )
                )
            elif node.func.id == "tqdm":
                end = node.args[-1]
                edits.append(
                    (
                        end.end_lineno,
                        end.end_col_offset,
                        end.end_lineno,
                        end.end_col_offset,
                        ", disable=not accelerator.is_local_main_process",
                    )
                )
    # whole lines: the writer guarded, and the end of the function
    indent = " " * body[0].col_offset

    def writes(node):  # write_metrics(...), or `with saving_model(...) as folder:`
        call = (
            node.value
            if isinstance(node, ast.Expr)
            else node.items[0].context_expr
            if isinstance(node, ast.With)
            else None
        )
        return isinstance(call, ast.Call) and getattr(call.func, "id", None) in (
            "write_metrics",
            "saving_model",
        )

    lines = text.splitlines(keepends=True)
    guarded = []  # [first line, last line] of each run of writes, its comments above it too
    for i, node in enumerate(body):
        if writer and writes(node):
            if guarded and i and writes(body[i - 1]):
                guarded[-1][1] = node.end_lineno
            else:
                first = node.lineno
                while lines[first - 2].strip().startswith("#"):
                    first -= 1
                guarded.append([first, node.end_lineno])
    operations = [
        (line, column, "edit", (end_line, end_column, new))
        for line, column, end_line, end_column, new in edits
    ]
    operations += [(first, -1, "guard", last) for first, last in guarded]
    operations.append((function.end_lineno + 1, -1, "end", None))
    # from the end of the text backwards: an operation never moves the lines of one still to come
    for line, column, kind, more in sorted(operations, reverse=True):
        if kind == "edit":
            end_line, end_column, new = more
            first, last = lines[line - 1], lines[end_line - 1]
            lines[line - 1 : end_line] = [first[:column] + new + last[end_column:]]
        elif kind == "guard":
            lines[line - 1 : more] = [
                f"{indent}accelerator.wait_for_everyone()\n",
                f"{indent}if accelerator.{writer}:\n",
                *("    " + old for old in lines[line - 1 : more]),
            ]
        else:
            lines[line - 1 : line - 1] = [f"{indent}accelerator.end_training()\n"]
    return "".join(lines)


def added_lines(before, after):
    """Return the code lines `after` has and `before` has not (stripped): what a solution
    adds, the lines no file given to a student may hold."""
    known = {line.strip() for line in before.splitlines()}
    return sorted(
        {
            line.strip()
            for line in after.splitlines()
            if line.strip() and line.strip() not in known and not line.strip().startswith("#")
        }
    )
