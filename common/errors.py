"""How the course stops on bad input: one error line, no traceback."""

from common.launcher_exit import report_line


def fail(message):
    """Stop the run with one error line on stderr and exit code 1 (no traceback); a launcher
    of the course's environment is told the line, and adds nothing after it."""
    report_line(f"error: {message}", 1)
    raise SystemExit(f"error: {message}")
