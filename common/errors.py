"""How the course stops on bad input: one error line, no traceback."""


def fail(message):
    """Stop the run with one error line on stderr and exit code 1 (no traceback)."""
    raise SystemExit(f"error: {message}")
