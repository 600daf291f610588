"""A run stopped by Ctrl-C or by SIGTERM, or one of whose processes lost another, or whose
port another program holds, says so in one line, writes nothing, and exits.

Without this, Ctrl-C prints a traceback from wherever training happened to be, and SIGTERM
(what `kill`, a job scheduler or a notebook's "interrupt" sends) ends the process without a
word. A process of a multi-machine run whose peer went away (its machine stopped, its job
was cancelled) gets the backend's error at its next collective: measured here with gloo on
two "machines" on loopback, within seconds, as a page of traceback ending in "Connection
reset by peer". A launch whose port is taken (step 4's --port, on a shared server where
another user's run holds it) gets torch's store error, "The server socket has failed to
listen on any local network address. port: 29500, ... name: EADDRINUSE". Nothing else is
needed to lose nothing: metrics.json is written only at the very end, and whole or not at
all (common/output.py).
"""

import os
import re
import signal
import sys


class Stopped(KeyboardInterrupt):
    """Raised by SIGTERM, as KeyboardInterrupt is by SIGINT (Ctrl-C)."""


def raise_stopped(signum, frame):
    raise Stopped(signum)


def lost_a_peer(value):
    """Return the backend's reason if the exception says that another process of the run went
    away (torch.distributed's DistError family, or gloo's error on a connection a peer
    closed), else None."""
    import torch.distributed as dist
    text = str(value)
    closed = isinstance(value, RuntimeError) and "gloo" in text and "by peer" in text
    if not (closed or isinstance(value, getattr(dist, "DistError", ()))):
        return None
    line = next((part for part in text.splitlines() if part.strip()), type(value).__name__)
    return line.split("] ", 1)[-1].split(". ")[0]


def port_taken(value):
    """Return the port if the error says that the run could not listen on its port because
    another program holds it (torch.distributed's store, EADDRINUSE), else None."""
    import torch.distributed as dist
    text = str(value)
    if not (isinstance(value, getattr(dist, "DistNetworkError", ())) and "EADDRINUSE" in text):
        return None
    port = re.search(r"port: (\d+)", text)
    return port.group(1) if port else "?"


def report_stops():
    """From now on in this process: SIGTERM raises Stopped; an error that says the run's port is
    taken, or that another process of the run went away, prints one line and exits with 1;
    and a stop that reaches the top prints one line (on one process of a launch: the one of
    rank 0) and exits with 128 + the signal's number, as a shell reports a process killed by
    it (130 for Ctrl-C, 143 for SIGTERM)."""
    signal.signal(signal.SIGTERM, raise_stopped)
    previous_hook = sys.excepthook

    def hook(kind, value, traceback):
        # torch.distributed.elastic raises SignalException in a process that launched others
        # (notebook_launcher's), after it has stopped them
        launcher_stopped = kind.__name__ == "SignalException" and hasattr(value, "sigval")
        port, reason = port_taken(value), lost_a_peer(value)
        if port or reason:
            if port:
                line = (f"port {port} is taken on this machine (another run, or another "
                        "user's, listens on it); run again with --port 0 to use a free port")
            else:
                rank, size = os.environ.get("RANK", "0"), os.environ.get("WORLD_SIZE", "1")
                line = (f"process {rank} of {size} lost another process of this run ({reason}) "
                        "and stops too, with nothing written; the output of the process that "
                        "stopped first says why")
            print(f"\nerror: {line}", file=sys.__stderr__, flush=True)
            sys.stdout.flush()
            os._exit(1)
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
