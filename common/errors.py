"""How the course stops on bad input: one error line, no traceback."""

import os
import time


def fail(message: str):
    """Exit with one `error:` line (code 1). Of a launch's processes, which all meet the same
    input, the main one (rank 0) says it; the others exit with the same code, in silence, a few
    seconds later: a launcher that sees one process fail ends the others, and would otherwise
    end the main one before its line is out (seen here with notebook_launcher)."""
    if os.environ.get("RANK", "0") != "0":
        time.sleep(3)
        raise SystemExit(1)
    raise SystemExit(f"error: {message}")
