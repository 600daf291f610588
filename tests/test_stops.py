"""One Ctrl-C stops a whole course command: the commands that run launches one after another
(make course, make what-if, make check, the benchmark, make test-classroom) stop at once, the
running step says so in its own line, the command in one line, no later launch starts, no
process is left (accelerate_course/running.py). Each test starts the command as a terminal
starts a job (a session of its own), waits until a launch is under way, and sends the real
signal: SIGINT to the whole process group, as Ctrl-C does, or SIGTERM to the command's own pid,
as kill does. Every process the command started, however deep, is watched while it runs and
must be gone at the end.
"""

import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest
from conftest import REPO, STEPS, offline_env, run_command

pytestmark = pytest.mark.runs


def stop_mid_run(command, ready, sig, to_group, **env):
    """Start command; when ready(its output so far) is true and a step is running, send sig
    (to its process group, or to its pid); return (exit code, output, the processes it had
    started that are still there)."""
    log = REPO / "outputs" / f"stop-{os.getpid()}-{time.monotonic_ns()}.log"
    log.parent.mkdir(exist_ok=True)
    with open(log, "w") as out:
        process = subprocess.Popen(
            command,
            cwd=REPO,
            env=offline_env(**env),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    root, seen = psutil.Process(process.pid), {}
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and process.poll() is None:
        for member in root.children(recursive=True):
            seen.setdefault(member.pid, member)
        if ready(log.read_text(errors="replace")) and any(
            "train.py" in line or "lab_driver" in line for line in map(command_line, seen.values())
        ):
            break
        time.sleep(0.2)
    assert process.poll() is None, log.read_text()[-3000:]  # still running: stopped mid-run
    time.sleep(1)  # inside the training loop, not at its first line
    for member in root.children(recursive=True):
        seen.setdefault(member.pid, member)
    (os.killpg if to_group else os.kill)(process.pid, sig)
    process.wait(timeout=120)
    # a process the command started may still be ending its own work a moment after the
    # command itself has ended (the grader ends its graded user's processes and removes the
    # user: about 0.5 s, more on a loaded machine): what is still there after 10 s is left
    until = time.monotonic() + 10
    time.sleep(1)
    while time.monotonic() < until and any(still_there(p) for p in seen.values()):
        time.sleep(0.2)
    output = log.read_text(errors="replace")
    log.unlink()
    left = [p for p in seen.values() if still_there(p)]
    return process.returncode, output, [command_line(p) or f"pid {p.pid}" for p in left]


def still_there(process):
    """Whether a process is still running (ended, or a zombie not yet reaped: not there)."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def command_line(process):
    """A process's command line, or "" once it has ended (a zombie not yet reaped included)."""
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""


def cpu_seconds(process):
    """The CPU time a process has used so far (0 once it has ended)."""
    try:
        times = process.cpu_times()
        return times.user + times.system
    except psutil.Error:
        return 0


def progress(text):
    return "it/s]" in text or "s/it]" in text


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_one_signal_stops_make_course(tmp_path, sig):
    # Ctrl-C on make course as typed (make and the runner get it, as a terminal sends it to
    # the foreground group), or SIGTERM to the runner: during steps 1 and 2, side by side
    folder = tmp_path / "course"
    if sig == signal.SIGINT:
        command, to_group = ["make", "course", f"ARGS=--output-dir {folder}"], True
    else:
        command = [
            sys.executable,
            "-m",
            "accelerate_course.run_course",
            "--output-dir",
            str(folder),
        ]
        to_group = False

    def ready(text):
        logs = [folder / f"step{n}.running" / "train.log" for n in (1, 2)]
        return all(log.exists() and progress(log.read_text()) for log in logs)

    code, output, left = stop_mid_run(command, ready, sig, to_group)
    name = "Ctrl-C (SIGINT)" if sig == signal.SIGINT else "SIGTERM"
    lines = [line.strip() for line in output.splitlines()]
    step_lines = [
        line
        for line in lines
        if line.startswith("step 1: stopped") or line.startswith("step 2: stopped")
    ]
    assert step_lines == [
        f"step {n}: stopped by {name} before the end of the run: no metrics were written"
        for n in (1, 2)
    ], output[-3000:]
    assert (
        f"stopped by {name}: the course was stopped during steps 1 and 2; steps 3, 4 not "
        "started: no table, no plot"
    ) in lines, output[-3000:]
    # the runner's exit code, as a shell reports a process killed by the signal; make, killed
    # by the same Ctrl-C, says so in its own line
    if sig == signal.SIGINT:
        assert code == -signal.SIGINT, code
        # (make[1]: when make itself runs under make, as in make test)
        assert re.search(r"^make(\[\d+\])?: \*\*\* \[Makefile", output, re.M), output[-3000:]
    else:
        assert code == 128 + signal.SIGTERM
    assert not list(folder.glob("step3*"))  # no later step started
    assert not list(folder.glob("step*/metrics.json"))
    # the stopped steps' logs are kept apart; no result is where a finished one would be
    assert sorted(p.name for p in folder.glob("step*")) == ["step1.failed", "step2.failed"]
    assert "Traceback" not in output
    assert left == []


def test_sigterm_stops_make_course_during_step_3(tmp_path):
    # a launcher (accelerate launch, whose workers run in sessions of their own) told to stop
    folder = tmp_path / "course"
    command = [
        sys.executable,
        "-m",
        "accelerate_course.run_course",
        "--steps",
        "3",
        "4",
        "--output-dir",
        str(folder),
    ]
    log = folder / "step3.running" / "train.log"
    code, output, left = stop_mid_run(
        command, lambda text: log.exists() and progress(log.read_text()), signal.SIGTERM, False
    )
    assert code == 128 + signal.SIGTERM, output[-3000:]
    # the step's line: one of its 2 processes', each of which says so in its own line
    assert re.search(
        r"step 3: stopped by SIGTERM before the end of the run \(process [01] of "
        r"2\): no metrics were written",
        output,
    ), output[-3000:]
    assert (
        "stopped by SIGTERM: the course was stopped during step 3; step 4 not started: no "
        "table, no plot"
    ) in output
    assert not list(folder.glob("step4*"))
    assert left == []


def test_ctrl_c_stops_the_what_if_lab(tmp_path):
    folder = tmp_path / "whatif"
    command = [
        sys.executable,
        "-m",
        "accelerate_course.whatif",
        "--step",
        "3",
        "4",
        "--output-dir",
        str(folder),
    ]

    def ready(text):
        outs = list((folder / "step3").glob("runs/*/rank0.out"))
        return any(progress(out.read_text(errors="replace")) for out in outs)

    code, output, left = stop_mid_run(command, ready, signal.SIGINT, True)
    assert code == 128 + signal.SIGINT, output[-3000:]
    assert output.strip().splitlines()[-1] == (
        "stopped by Ctrl-C (SIGINT): the what-if lab was stopped during step 3; step 4 not started"
    )
    assert not (folder / "step4").exists()
    assert left == []


def test_sigterm_stops_the_grader(tmp_path):
    command = [sys.executable, "-m", "accelerate_course.check", "3", str(STEPS[3])]
    code, output, left = stop_mid_run(
        command, lambda text: "checking" in text, signal.SIGTERM, False
    )
    assert code == 128 + signal.SIGTERM, output[-3000:]
    assert output.strip().splitlines()[-1] == (
        f"stopped by SIGTERM: the check of {STEPS[3]} was stopped: no grade"
    )
    assert "pass" not in output and "FAIL" not in output
    assert left == []


def test_ctrl_c_stops_the_benchmark(tmp_path):
    command = [
        sys.executable,
        "-m",
        "accelerate_course.maintain.benchmark",
        "--repeats",
        "1",
        "--output-dir",
        str(tmp_path / "bench"),
    ]

    # the benchmark sends a step's output nowhere, and its folder appears only with its
    # metrics, at the end: its step (the one whose output goes under tmp_path) is in its
    # training loop once its process has used more CPU than importing the libraries takes
    # (about 6 s here)
    def training(text):
        lines = ((p, command_line(p)) for p in psutil.process_iter())
        return any(
            cpu_seconds(p) > 10 for p, line in lines if "train.py" in line and str(tmp_path) in line
        )

    code, output, left = stop_mid_run(command, training, signal.SIGINT, True)
    assert code == 128 + signal.SIGINT, output[-3000:]
    assert output.strip().splitlines()[-1] == (
        "stopped by Ctrl-C (SIGINT): the benchmark was stopped: no table"
    )
    assert left == []


def test_sigterm_stops_make_test_classroom():
    # the tests stopped mid-grading (kill, or a CI runner's cancel): pytest's own interruption,
    # the grading's processes stopped with it, and the exit code of SIGTERM
    command = [
        sys.executable,
        "-m",
        "pytest",
        "tests/test_classroom.py",
        "-x",
        "-s",
        "-p",
        "no:cacheprovider",
    ]

    def grading(text):  # the grader's launch is under way: its driver processes run
        return any(
            "lab_driver" in " ".join(p.info["cmdline"] or [])
            for p in psutil.process_iter(["cmdline"])
        )

    code, output, left = stop_mid_run(
        command, grading, signal.SIGTERM, False, COURSE_CLASSROOM_TEST="1"
    )
    assert code == 128 + signal.SIGTERM, output[-3000:]
    assert "Stopped" in output and "passed" not in output.splitlines()[-1], output[-3000:]
    assert left == []


def test_a_signal_while_a_process_starts_stops_it_too(tmp_path):
    # SIGTERM arrives after the fork, before subprocess.Popen returns (where a raised Stopped
    # would lose the Popen, and with it the process): sent from inside Popen's
    # _execute_child, right after the child exists; the started process must be stopped too,
    # and the command must still end as stopped (test_sigterm_stops_make_test_classroom once
    # left a grader running so, when the signal came as the next grading started)
    script = tmp_path / "starting.py"
    script.write_text(
        "import os, signal, subprocess, sys\n"
        "from accelerate_course import running\n"
        "execute_child = subprocess.Popen._execute_child\n"
        "def signalled_after_the_fork(self, *args):\n"
        "    execute_child(self, *args)\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "subprocess.Popen._execute_child = signalled_after_the_fork\n"
        "try:\n"
        "    running.run([([sys.executable, '-c', 'import time; time.sleep(60)'], {})])\n"
        "except running.Stopped as stop:\n"
        "    print('stopped by', stop.name)\n"
    )
    with open(tmp_path / "output", "w") as out:  # a file: a process left behind holds no pipe
        process = subprocess.Popen(
            [sys.executable, str(script)],
            cwd=REPO,
            env=offline_env(),
            stdout=out,
            text=True,
            start_new_session=True,
        )
    process.wait(timeout=120)
    output = (tmp_path / "output").read_text()
    left = [command_line(p) for p in psutil.process_iter() if "time.sleep(60)" in command_line(p)]
    for member in psutil.process_iter():
        if "time.sleep(60)" in command_line(member):
            member.kill()
    assert output.strip() == "stopped by SIGTERM"
    assert left == []


def test_a_test_past_its_time_limit_leaves_no_forked_process(tmp_path):
    # conftest.run_command's time limit stops the command and what it forked (step 4's
    # notebook_launcher forks its processes; subprocess.run's timeout killed the command alone,
    # and the forked ones ran on)
    token = f"forked-{tmp_path.name}"
    script = (
        "import os, sys, time\n"
        "if os.fork() == 0:\n"
        "    os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(60)', "
        f"'{token}'])\n"
        "time.sleep(60)\n"
    )
    with pytest.raises(pytest.fail.Exception, match="still running after 2 s"):
        run_command([sys.executable, "-c", script], timeout=2)
    left = [p.pid for p in psutil.process_iter() if token in command_line(p)]
    for pid in left:
        psutil.Process(pid).kill()
    assert left == []


def test_a_closed_terminal_stops_make_course_as_ctrl_c_does(tmp_path):
    # the runner in a terminal of its own (a pty: its controlling terminal, as a shell's job
    # has), closed during step 3: the kernel sends SIGHUP, and every later write to the
    # terminal fails (EIO). The step's folder is kept as a stopped step's, no process is left.
    import fcntl
    import pty
    import termios

    folder = tmp_path / "course"
    master, slave = pty.openpty()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "accelerate_course.run_course",
            "--steps",
            "3",
            "--output-dir",
            str(folder),
        ],
        cwd=REPO,
        env=offline_env(),
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
        preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
    )
    os.close(slave)
    root, seen, said = psutil.Process(process.pid), {}, b""
    log = folder / "step3.running" / "train.log"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and not (log.exists() and progress(log.read_text())):
        for member in root.children(recursive=True):
            seen.setdefault(member.pid, member)
        try:  # read what the terminal shows, so that the runner never waits on a full pty
            said += (
                os.read(master, 65536)
                if __import__("select").select([master], [], [], 0.2)[0]
                else b""
            )
        except OSError:
            break
    assert process.poll() is None, said.decode(errors="replace")[-3000:]
    time.sleep(1)
    for member in root.children(recursive=True):
        seen.setdefault(member.pid, member)
    os.close(master)  # the terminal closes
    process.wait(timeout=120)
    until = time.monotonic() + 10
    while time.monotonic() < until and any(still_there(p) for p in seen.values()):
        time.sleep(0.2)
    assert sorted(p.name for p in folder.glob("step*")) == ["step3.failed"]
    assert (
        "stopped by SIGTERM before the end of the run"
        in (folder / "step3.failed" / "train.log").read_text()
    )
    assert [command_line(p) for p in seen.values() if still_there(p)] == []
