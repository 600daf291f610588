"""How the course stops on bad input: one error line, no traceback."""

import os


def fail(message: str):
    """Exit with one `error:` line (code 1). Of a launch's processes, which all meet the same
    input, the main one (rank 0) says it; the others exit with the same code, in silence."""
    raise SystemExit(1 if os.environ.get("RANK", "0") != "0" else f"error: {message}")
