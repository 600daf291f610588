"""Running the course's commands' processes so that one Ctrl-C (or SIGTERM) stops everything.

Every process a course command starts (a step, a launcher, the lab's driver) starts in a
process group of its own (start()). A terminal's Ctrl-C then reaches the command alone, and
the command hands the signal on, once, to each group it started: a step gets exactly one
SIGINT and says so in its own line (common/launch.py, stop_in_one_line); a launcher
(accelerate launch, torchrun) gets one and stops its workers, which run in sessions of their
own. SIGTERM to the command (what `kill` and make send) and SIGHUP (the terminal closed) are
handed on as SIGTERM.
While inside stop_together(), such a signal also raises Stopped in the command, which waits
for its processes to end (GRACE seconds), kills what is left of their process trees, and
ends with one line and 128 + the signal's number: 130 for Ctrl-C, 143 for SIGTERM.
"""

import contextlib
import os
import signal
import subprocess
import threading
import time

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
GRACE = 30  # seconds a stopped process gets to end by itself before its tree is killed

_children = []  # the processes start() started that may still run
_received = []  # the stop signals this command got, while inside stop_together()
_starting = []  # non-empty while start() starts a process: a stop waits until it is known


class Stopped(KeyboardInterrupt):
    """The command was told to stop (Ctrl-C, SIGTERM or SIGHUP). A KeyboardInterrupt, so that
    what does not know it (pytest, a library's cleanup) treats it as Ctrl-C."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self):
        return (
            "Ctrl-C (SIGINT)" if self.signum == signal.SIGINT else signal.Signals(self.signum).name
        )

    @property
    def exit_code(self):
        return 128 + self.signum


class TimeLimitReached(Exception):
    """A launch ran past its time limit; it was stopped, with every process it had started."""

    def __init__(self, seconds):
        super().__init__(f"still running after {seconds:.0f} s")
        self.seconds = seconds


def _hand_on(signum, frame):
    """The command's handler of the stop signals: hand the signal on to every group start()
    made (SIGHUP as SIGTERM: a step ends on SIGTERM with its line), and raise Stopped the
    first time (a second signal only hands itself on: the cleanup of the first goes on).
    While start() starts a process, start() raises it, once the process is known."""
    first = not _received
    _received.append(signum)
    for process in _children:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGTERM if signum == signal.SIGHUP else signum)
    if first and not _starting:
        raise Stopped(signum)


@contextlib.contextmanager
def stop_together():
    """While inside: a stop signal is handed on to every process start() started, and raises
    Stopped here. Nested uses share the outer one. Outside the main thread, where Python
    delivers no signal, it does nothing: the processes started there are stopped by the main
    thread's handler (it hands a signal on to every process start() started) or by their owner."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is _hand_on
    ):
        yield
        return
    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    for signum in STOP_SIGNALS:
        signal.signal(signum, _hand_on)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _received.clear()


def start(command, started, **popen):
    """Start command (subprocess.Popen's arguments) in a process group of its own, append its
    Popen to the list started, and return it. A stop signal the command gets inside
    stop_together() is handed on to it; one that arrives while it starts (after the fork,
    before Popen returns, where raising would lose the process) is raised here, after."""
    stops_before = len(_received)
    _starting.append(command)
    try:
        process = subprocess.Popen(command, process_group=0, **popen)
        process.started = time.monotonic()
        _children.append(process)
        started.append(process)
    finally:
        _starting.pop()
    if _received:  # told to stop while this was starting: it stops too
        os.killpg(process.pid, signal.SIGTERM)
        if not stops_before:
            raise Stopped(_received[0])
    return process


def still_running():
    """Return the processes start() started whose run() has not ended yet (in any thread)."""
    return list(_children)


def tree(process):
    """Return the process and every process it started that still runs (psutil)."""
    import psutil

    try:
        root = psutil.Process(process.pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def kill_trees(processes, seen=()):
    """Kill each process and every process it started (those seen before too: a launcher's
    workers outlive it in sessions of their own), and wait until they are gone."""
    import psutil

    members = {p.pid: p for p in seen}
    for process in processes:
        members.update((p.pid, p) for p in tree(process))
    for member in members.values():
        with contextlib.suppress(psutil.NoSuchProcess):
            member.kill()
    for process in processes:
        process.wait()
    psutil.wait_procs(list(members.values()), timeout=10)


def run(commands, seconds=None):
    """Run commands ([(Popen's args, {Popen's keyword arguments}), ...]) side by side, each
    in a process group of its own, and wait until all have ended; return their Popen objects
    (returncode, and started and ended on the time.monotonic() clock).
    Past `seconds` (None: no limit) every tree is killed and TimeLimitReached raised. On a
    stop signal the processes, told to stop too, get GRACE seconds to end by themselves;
    then what is left of their trees is killed, and Stopped is raised."""
    with stop_together():
        processes = []
        try:
            for args, popen in commands:
                start(args, processes, **popen)
            wait(processes, seconds)
            return processes
        except KeyboardInterrupt as stop:
            if not isinstance(stop, Stopped):  # not through the handler: hand it on here
                for process in processes:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(process.pid, signal.SIGINT)
            end_stopped(processes)
            raise
        finally:
            for process in processes:
                if process in _children:
                    _children.remove(process)


def wait(processes, seconds=None):
    """Wait until every process has ended, noting when each did (its `ended`, on the
    time.monotonic() clock, as its `started`); return their exit codes (see run)."""
    deadline = None if seconds is None else time.monotonic() + seconds
    while True:
        for process in processes:
            if not hasattr(process, "ended") and process.poll() is not None:
                process.ended = time.monotonic()
        if all(hasattr(process, "ended") for process in processes):
            return [process.returncode for process in processes]
        if deadline is not None and time.monotonic() > deadline:
            kill_trees(processes)
            raise TimeLimitReached(seconds)
        time.sleep(0.05)


def end_stopped(processes):
    """Give processes that were told to stop GRACE seconds to end by themselves (a step says
    so in its own line; a launcher stops its workers), then kill what is left of their trees."""
    seen = [member for process in processes for member in tree(process)]
    ends = time.monotonic() + GRACE
    while any(process.poll() is None for process in processes) and time.monotonic() < ends:
        seen += [member for process in processes for member in tree(process)]
        time.sleep(0.2)
    kill_trees(processes, seen)


def say_if_heard(text, file=None):
    """Print text, unless the terminal is gone (closed: SIGHUP, then writes fail with EIO):
    a stopped command still ends as it should where no one reads it."""
    import sys

    try:
        print(text, file=file or sys.stdout, flush=True)
    except OSError:
        pass


def end_command(stop, what):
    """End the command that was stopped: one line (what it did and did not do), and the exit
    code a shell gives a process killed by the signal."""
    import sys

    say_if_heard(f"stopped by {stop.name}: {what}", file=sys.stderr)
    sys.exit(stop.exit_code)
