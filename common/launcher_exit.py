"""How a launcher's own process ends: with the course's one line, and within seconds of a stop.

A launcher (accelerate launch, torchrun, or step 4's process that calls notebook_launcher)
prints its own traceback when one of its processes fails, after the line in which that process
said why; and while it waits for a machine that never comes, a stop signal does not end it
(torchrun's static rendezvous waits 600 s). So, in a launcher's process:
- it gives the processes it starts a folder (COURSE_LAUNCH_REPORTS, in their environment);
  a process of the course that ends with its own line (a bad input, a stop, a lost peer)
  writes that line there (report_line) before it exits;
- when the launch then fails, the launcher adds nothing: no traceback, none of torch elastic's
  log lines; it exits with that process's exit code, so the course's line is the last one;
- when it fails before any process of the course said anything, because of the user's
  default config file (accelerate config), it says so in one line with the course's file;
- a stop signal it has not acted on within STOP_SECONDS ends it, with its processes, in one
  line.
The course's environment runs install() at the start of every Python process, through a .pth
line (accelerate_course/install.py writes it); it acts only in a launcher's process. Only the
standard library is imported until a launcher needs more.
"""

import json
import os
import signal
import sys
import threading
import time

REPORTS = "COURSE_LAUNCH_REPORTS"
STOP_SECONDS = 10  # a stopped launcher gets this long to end by itself
# the words that start a launcher's process: a console script, or python -m
LAUNCHERS = {"accelerate": "accelerate launch", "torchrun": "torchrun",
             "accelerate.commands.launch": "accelerate launch",
             "accelerate.commands.accelerate_cli": "accelerate launch",
             "torch.distributed.run": "torchrun", "torch.distributed.launch": "torchrun"}
COURSE_CONFIG = "configs/cpu-2-processes.yaml"

_launcher = None  # the launcher this process is, once install() found one


def launcher_name(argv):
    """Return the launcher a process's command line starts ("accelerate launch", "torchrun"),
    or None."""
    words = [os.path.basename(word) for word in argv[1:3]]
    if words[:1] == ["-m"]:
        words = words[1:]
    name = LAUNCHERS.get(words[0]) if words else None
    if words and words[0] in ("accelerate", "accelerate.commands.accelerate_cli") \
            and "launch" not in argv:
        return None  # accelerate config, env, ...: not a launch
    return name


def report_line(line, exit_code):
    """Write, for the launcher that started this process, the line it ends with (no-op when
    no launcher of the course's environment started it)."""
    folder = os.environ.get(REPORTS)
    if not folder or not os.path.isdir(folder):
        return
    record = {"line": line, "exit_code": exit_code, "rank": os.environ.get("RANK"),
              "time": time.time()}
    path = os.path.join(folder, f"{os.getpid()}.json")
    try:
        with open(path + ".tmp", "w") as f:
            json.dump(record, f)
        os.replace(path + ".tmp", path)
    except OSError:
        pass  # the launcher then ends as it would without the course


def reports():
    """Return the lines the launched processes ended with, first first."""
    folder = os.environ.get(REPORTS)
    found = []
    for name in sorted(os.listdir(folder)) if folder and os.path.isdir(folder) else []:
        if name.endswith(".json"):
            try:
                with open(os.path.join(folder, name)) as f:
                    found.append(json.load(f))
            except (OSError, ValueError):
                pass
    return sorted(found, key=lambda record: record["time"])


def start_reports():
    """Give the processes this one starts a folder to report in (removed at exit)."""
    import atexit
    import shutil
    import tempfile
    if os.environ.get(REPORTS) and os.path.isdir(os.environ[REPORTS]):
        return  # a launcher above this one gave it already
    folder = tempfile.mkdtemp(prefix="course-launch-")
    os.environ[REPORTS] = folder
    atexit.register(shutil.rmtree, folder, True)


def user_config_problem(value):
    """Return one line when accelerate launch stopped because of the user's default config
    file (it reads it when no --config_file is given), else None."""
    if _launcher != "accelerate launch" or "--config_file" in sys.argv:
        return None
    try:
        from accelerate.commands.config import default_config_file
    except Exception:
        return None
    if not os.path.isfile(default_config_file):
        return None
    kind = ""
    try:
        with open(default_config_file) as f:
            kind = next((line.split(":", 1)[1].strip() for line in f
                         if line.startswith("distributed_type:")), "")
    except OSError:
        pass
    said = str(value).strip().splitlines()[0].rstrip(".") if str(value).strip() else type(value).__name__
    return (f"error: accelerate launch read your own config file ({default_config_file}"
            f"{', distributed_type ' + kind if kind else ''}) and stopped: {said}; the course "
            f"names its own file, which is then the only one read: ACCELERATE_USE_CPU=1 "
            f"accelerate launch --config_file {COURSE_CONFIG} ...")


def end_quietly(kind, value, traceback, previous=None):
    """sys.excepthook of a launcher: when a launched process of the course said why it ended,
    exit with its code and nothing more; else one line for the user's config file, or the
    hook that was there before."""
    said = reports()
    if said:
        sys.stdout.flush()
        os._exit(said[0]["exit_code"] or 1)
    line = user_config_problem(value) if issubclass(kind, Exception) else None
    if line:
        print(line, file=sys.stderr, flush=True)
        os._exit(1)
    (previous or sys.__excepthook__)(kind, value, traceback)


def quiet_after_a_report(handle):
    """Wrap logging.Logger.handle: torch's launch records and Accelerate's are dropped once a
    launched process has said why it ended (they would follow its line with their own)."""
    def wrapped(self, record):
        if record.name.startswith(("torch.distributed", "torch.multiprocessing", "accelerate")) \
                and reports():
            return False
        return handle(self, record)
    return wrapped


def watch_stops():
    """End this process, with the processes it started, STOP_SECONDS after a stop signal it
    has not ended on by itself (one line, exit 128 + the signal's number). A signal's handler
    runs only when the main thread comes back to Python; the wakeup fd is written at once.
    SIGTERM, which reaches the launcher alone, is handed on to its processes (Ctrl-C in a
    terminal reaches them already, or through the launcher: never twice)."""
    read, write = os.pipe()
    os.set_blocking(write, False)
    try:
        signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    except ValueError:
        return  # not the main thread
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        # SIGTERM's default ends the launcher at once, its processes left running; a Python
        # handler (raising, as Ctrl-C does) lets it end as it ends on Ctrl-C
        signal.signal(signal.SIGTERM, signal.default_int_handler)

    def watch():
        signum = os.read(read, 1)[0]
        if signum == signal.SIGTERM:
            signal_children(signal.SIGTERM)
        time.sleep(STOP_SECONDS)
        name = "Ctrl-C (SIGINT)" if signum == signal.SIGINT else signal.Signals(signum).name
        signal_children(signal.SIGKILL, recursive=True)
        if not reports():
            print(f"\nstopped by {name}: {_launcher} had not ended {STOP_SECONDS} s later "
                  "(waiting for another machine?), so it was ended with its processes; no "
                  "metrics were written", file=sys.__stderr__, flush=True)
        os._exit(128 + signum)

    threading.Thread(target=watch, daemon=True, name="course-stop-watch").start()


def signal_children(signum, recursive=False):
    """Send signum to the processes this one started (and theirs: recursive), with psutil
    where it is installed."""
    try:
        import psutil
        children = psutil.Process().children(recursive=recursive)
    except Exception:
        return
    for child in children:
        try:
            child.send_signal(signum)
        except Exception:
            pass


def install(argv=None):
    """In a launcher's process: report folder, one-line end, stop watch. Elsewhere: nothing."""
    name = launcher_name(sys.orig_argv if argv is None else argv)
    if name is not None:
        become_launcher(name)


def become_launcher(name, watch=True):
    """Make this process end as a launcher of the course does (see the module's docstring):
    accelerate launch's and torchrun's at their start, step 4's before notebook_launcher."""
    global _launcher
    _launcher = name
    start_reports()
    previous = sys.excepthook
    sys.excepthook = lambda kind, value, tb: end_quietly(kind, value, tb, previous)
    import logging
    logging.Logger.handle = quiet_after_a_report(logging.Logger.handle)
    if watch:
        watch_stops()
