"""A run stopped by Ctrl-C or by SIGTERM, or one of whose processes lost another, or whose
port another program holds, says so in one line, writes nothing, and exits.

Without this, Ctrl-C prints a traceback from wherever training happened to be, and SIGTERM
(what `kill`, a job scheduler or a notebook's "interrupt" sends) ends the process without a
word. A process whose peer went away gets the backend's error at its next collective (gloo:
"Connection reset by peer"); a launch whose port is taken, torch's store error (EADDRINUSE).
metrics.json is written only at the very end, whole or not at all (common/output.py), so a
stop loses nothing.

A stop signal can also arrive where Python cannot raise it cleanly: inside a weakref callback
(Python prints "Exception ignored" and goes on) or while the process already reports an error
(torch.distributed's excepthook). Each signal is therefore remembered, and such a run still
ends as stopped.
"""

import os
import re
import signal
import sys

from common.launcher_exit import report_line, reports


class Stopped(KeyboardInterrupt):
    """Raised by SIGTERM, as KeyboardInterrupt is by SIGINT (Ctrl-C)."""


# the stop signals this process received: Python loses the exception a signal raises while it
# runs a weakref callback or a __del__ (it prints "Exception ignored" and goes on), and the
# process then ends on whatever error comes next, typically its peers' absence
received = []
# the excepthook end_in_one_line hands every other error to (Python's own, unless one was set)
previous_excepthook = sys.excepthook


def raise_stopped(signum, frame):
    """The handler of Ctrl-C and SIGTERM: remember the signal, and raise its exception unless
    the process is already reporting the error that ends it."""
    received.append(signum)
    if not reporting_an_error(frame):
        raise KeyboardInterrupt if signum == signal.SIGINT else Stopped(signum)


def reporting_an_error(frame):
    """Return whether the frame a signal arrived in runs inside sys.excepthook: the course's
    end_in_one_line, or torch.distributed's hook that wraps it. An exception raised there
    would replace the course's line with a traceback of the hook ("Error in sys.excepthook");
    end_in_one_line reads `received` instead."""
    hooks = {end_in_one_line.__code__, getattr(sys.excepthook, "__code__", None)}
    while frame is not None:
        if frame.f_code in hooks:
            return True
        frame = frame.f_back
    return False


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
    """From now on in this process: Ctrl-C raises KeyboardInterrupt and SIGTERM raises Stopped,
    each remembered in `received`; and an uncaught error ends the process through
    end_in_one_line."""
    signal.signal(signal.SIGINT, raise_stopped)
    signal.signal(signal.SIGTERM, raise_stopped)
    global previous_excepthook
    if sys.excepthook is not end_in_one_line:  # a second call changes nothing
        previous_excepthook, sys.excepthook = sys.excepthook, end_in_one_line


def end_in_one_line(kind, value, traceback):
    """sys.excepthook: a stop that reaches the top, or any error after a stop signal, prints
    one line (on one process of a launch: the one of rank 0) and exits with 128 + the signal's
    number, as a shell reports a process killed by it (130 for Ctrl-C, 143 for SIGTERM); an
    error that says the run's port is taken, or that another process of the run went away,
    prints one line and exits with 1; any other error goes to the hook that was there before."""
    if kind.__name__ == "SignalException" and hasattr(value, "sigval"):
        # torch.distributed.elastic raises it in a process that launched others
        # (notebook_launcher's), after it has stopped them
        signum = int(value.sigval)
    elif received:  # stopped, whatever error followed
        signum = received[0]
    elif issubclass(kind, KeyboardInterrupt):  # raised by something other than a signal
        signum = signal.SIGINT
    else:
        port, reason = port_taken(value), lost_a_peer(value)
        if not (port or reason):
            return previous_excepthook(kind, value, traceback)
        if reason and reports():  # another process of the run said why it stopped
            sys.stdout.flush()
            os._exit(1)
        if port:
            line = (f"port {port} is taken on this machine (another run, or another user's, "
                    "listens on it); run again with --port 0 to use a free port")
        else:
            rank, size = os.environ.get("RANK", "0"), os.environ.get("WORLD_SIZE", "1")
            line = (f"process {rank} of {size} lost another process of this run ({reason}) and "
                    "stops too, with nothing written; the output of the process that stopped "
                    "first says why")
        report_line(f"error: {line}", 1)
        print(f"\nerror: {line}", file=sys.__stderr__, flush=True)
        sys.stdout.flush()
        os._exit(1)
    name = "Ctrl-C (SIGINT)" if signum == signal.SIGINT else signal.Signals(signum).name
    line = f"stopped by {name} before the end of the run: no metrics were written"
    report_line(line, 128 + signum)
    if os.environ.get("RANK", "0") == "0":
        # the real stderr: torch.distributed's own excepthook, which calls this one, points
        # sys.stderr at a buffer while it runs, and this process ends before it prints that
        print(f"\n{line}", file=sys.__stderr__, flush=True)
    sys.stdout.flush()
    os._exit(128 + signum)
