"""A run stopped by Ctrl-C or by SIGTERM says so in one line, writes nothing, and exits.

Without this, Ctrl-C prints a traceback from wherever training happened to be, and SIGTERM
(what `kill`, a job scheduler or a notebook's "interrupt" sends) ends the process without a
word. Nothing else is needed to lose nothing: metrics.json is written only at the very end,
and whole or not at all (common/output.py).
"""

import os
import signal
import sys


class Stopped(KeyboardInterrupt):
    """Raised by SIGTERM, as KeyboardInterrupt is by SIGINT (Ctrl-C)."""


def raise_stopped(signum, frame):
    raise Stopped(signum)


def report_stops():
    """From now on in this process: SIGTERM raises Stopped, and a stop that reaches the top
    prints one line (on one process of a launch: the one of rank 0) and exits with 128 + the
    signal's number, as a shell reports a process killed by it (130 for Ctrl-C, 143 for
    SIGTERM)."""
    signal.signal(signal.SIGTERM, raise_stopped)
    previous_hook = sys.excepthook

    def hook(kind, value, traceback):
        # torch.distributed.elastic raises SignalException in a process that launched others
        # (notebook_launcher's), after it has stopped them
        launcher_stopped = kind.__name__ == "SignalException" and hasattr(value, "sigval")
        if not (issubclass(kind, KeyboardInterrupt) or launcher_stopped):
            return previous_hook(kind, value, traceback)
        signum = int(value.sigval) if launcher_stopped else \
            value.args[0] if isinstance(value, Stopped) else signal.SIGINT
        if os.environ.get("RANK", "0") == "0":
            name = "Ctrl-C (SIGINT)" if signum == signal.SIGINT else signal.Signals(signum).name
            # the real stderr: torch.distributed's own excepthook, which calls this one, points
            # sys.stderr at a buffer while it runs, and this process ends before it prints that
            print(f"\nstopped by {name} before the end of the run: no metrics were written",
                  file=sys.__stderr__, flush=True)
        sys.stdout.flush()
        os._exit(128 + signum)

    sys.excepthook = hook
