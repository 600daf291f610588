"""Where a graded file runs: as a user of its own, who can write only the grading's scratch
folder, when the grader has root (Gradescope runs its autograder as root; the lab's workflow
runs the grader with sudo on GitHub's runner; a teacher's `sudo make check`).

For each grading the grader creates a user (graded-<8 hex>, no home, no shell, no group but
its own), hands it the folders the file's runs write, launches the runs as that user with an
environment of the course's variables only (no token, no runner's file), and at the end
kills every process that user has, in any session, whatever its environment, then removes
the user. That user cannot write the course's checkout, the environment's packages, the
workspace, or the grade: they belong to another user. Without root, nothing of this is
possible: the grader says so in one line and runs the file as itself (check.py).
"""

import contextlib
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

# the variables a graded run is given, besides the lab's own (lab_runs.lab_environment) and
# HOME and TMPDIR (its scratch folder): nothing that names a token, a runner's file or a
# path of the grader's
KEPT = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "COURSE_LANG", "TERM", "PYTHONPATH")


def running(process):
    """Whether a process still runs (ended, or a zombie not yet reaped: not running)."""
    import psutil

    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def without_root():
    """Return why graded runs cannot run as a user of their own here ("" when they can)."""
    if not hasattr(os, "geteuid"):
        return "not a POSIX system"
    if os.geteuid() != 0:
        return "the grader does not run as root"
    if not shutil.which("useradd") or not shutil.which("userdel"):
        return "useradd and userdel are not installed"
    return ""


# a POSIX ACL as Linux keeps it in the extended attribute system.posix_acl_access
# (linux/posix_acl_xattr.h): a version, then (tag, permissions, id) entries, sorted by tag
ACL = "system.posix_acl_access"
ACL_VERSION, USER_OBJ, USER, GROUP_OBJ, MASK, OTHER = 2, 0x01, 0x02, 0x04, 0x10, 0x20
NO_ID = 0xFFFFFFFF


def deny_in_acl(path, uid):
    """Give uid no right on path in its ACL; return its ACL before (None: it had none)."""
    import errno
    import struct

    try:
        before = os.getxattr(path, ACL)
    except OSError as error:
        if error.errno != errno.ENODATA:
            raise
        before = None
    if before:
        entries = [
            struct.unpack_from("<HHI", before, 4 + 8 * i) for i in range((len(before) - 4) // 8)
        ]
    else:
        mode = os.stat(path).st_mode
        entries = [
            (USER_OBJ, (mode >> 6) & 7, NO_ID),
            (GROUP_OBJ, (mode >> 3) & 7, NO_ID),
            (OTHER, mode & 7, NO_ID),
        ]
    entries = [e for e in entries if not (e[0] == USER and e[2] == uid)] + [(USER, 0, uid)]
    if not any(e[0] == MASK for e in entries):  # named entries need a mask: the group's rights
        entries.append((MASK, next(e[1] for e in entries if e[0] == GROUP_OBJ), NO_ID))
    entries.sort(key=lambda e: (e[0], e[2]))
    os.setxattr(
        path,
        ACL,
        struct.pack("<I", ACL_VERSION) + b"".join(struct.pack("<HHI", *e) for e in entries),
    )
    return before


def restore_acl(path, before):
    """Put path's ACL back as deny_in_acl found it."""
    with contextlib.suppress(OSError):
        if before is None:
            os.removexattr(path, ACL)
        else:
            os.setxattr(path, ACL, before)


def enterable_temp():
    """Return a folder for a grading's runs that other users may enter (every folder above it
    o+x): the temporary folder where it is one (TMPDIR), else /tmp, where the graded user must
    reach its own folders."""
    import tempfile

    temp = Path(tempfile.gettempdir()).resolve()
    if all(folder.stat().st_mode & 0o001 for folder in [temp, *temp.parents]):
        return temp
    return Path("/tmp")


def closed_to_others(path):
    """Return the first folder on the way to path that other users may not enter (a user with
    no group but its own passes by the "other" bits), else path itself."""
    for folder in [*reversed(path.parents), path]:
        if folder.is_dir() and not folder.stat().st_mode & stat.S_IXOTH:
            return folder
    return path


class GradedUser:
    """A user made for one grading (with-block): uid, gid, the Popen arguments that run a
    process as it, and the environment it sees."""

    def __init__(self):
        self.name = f"graded-{uuid.uuid4().hex[:8]}"
        self.ended = 0  # processes of the graded file's that were still running when ended

    def __enter__(self):
        made = subprocess.run(
            [
                "useradd",
                "--system",
                "--no-create-home",
                "--home-dir",
                "/nonexistent",
                "--shell",
                "/usr/sbin/nologin",
                "--user-group",
                self.name,
            ],
            capture_output=True,
            text=True,
        )
        if made.returncode:
            raise OSError(f"useradd {self.name} failed: {made.stderr.strip()}")
        import pwd

        entry = pwd.getpwnam(self.name)
        self.uid, self.gid = entry.pw_uid, entry.pw_gid
        return self

    def __exit__(self, *exc):
        self.end_processes()
        subprocess.run(["userdel", self.name], capture_output=True)
        import grp

        with contextlib.suppress(KeyError):  # a distribution whose userdel leaves the group
            grp.getgrnam(self.name)
            subprocess.run(["groupdel", self.name], capture_output=True)

    @contextlib.contextmanager
    def denied(self, folders):
        """Deny this user the folders (a POSIX ACL entry giving it no right: it cannot list,
        enter or read them), for the with-block; every other user's rights stay as they were,
        and each folder's ACL is put back as it was at the end. A folder whose file system
        keeps no ACL is left open (its name is yielded in the list of those left open)."""
        kept, left_open = [], []
        try:
            for folder in folders:
                try:
                    kept.append((folder, deny_in_acl(folder, self.uid)))
                except OSError:
                    left_open.append(folder)
            yield left_open
        finally:
            for folder, before in kept:
                restore_acl(folder, before)

    def popen(self):
        """Return Popen's keyword arguments that start a process as this user."""
        return dict(user=self.uid, group=self.gid, extra_groups=[], umask=0o022)

    def scratch(self, folder):
        """Make folder (and its parents, the grader's) a folder this user owns and may write;
        return it."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        os.chown(folder, self.uid, self.gid)
        folder.chmod(0o700)
        return folder

    def environment(self, env, scratch):
        """Return env cut to what a graded run needs: KEPT, the lab's own variables (HF_*,
        ACCELERATE_*, COURSE_*, ...), HOME and TMPDIR in its scratch folder."""
        lab = (
            "HF_",
            "ACCELERATE_",
            "COURSE_",
            "CUDA_",
            "OMP_",
            "TOKENIZERS_",
            "PYTHONUNBUFFERED",
            "MASTER_",
            "WORLD_SIZE",
            "RANK",
            "LOCAL_",
        )
        kept = {k: v for k, v in env.items() if k in KEPT or k.startswith(lab)}
        kept.pop("COURSE_TOKEN", None)
        tmp = Path(scratch) / "tmp"
        if not tmp.exists():
            tmp.mkdir()
            os.chown(tmp, self.uid, self.gid)
        return dict(kept, HOME=str(scratch), TMPDIR=str(tmp), XDG_CACHE_HOME=str(tmp))

    def can_read(self, paths):
        """Return the first of paths this user cannot read (a folder: list and enter), or None."""
        probe = (
            "import os, sys\n"
            "for p in sys.argv[1:]:\n"
            "    mode = os.R_OK | (os.X_OK if os.path.isdir(p) else 0)\n"
            "    if not os.access(p, mode): print(p); break\n"
        )
        try:
            seen = subprocess.run(
                [sys.executable, "-S", "-c", probe, *map(str, paths)],
                capture_output=True,
                text=True,
                cwd="/",
                **self.popen(),
            )
        except OSError:  # the Python itself, or a folder above it, is not the user's to run
            return closed_to_others(Path(sys.executable).resolve())
        if seen.returncode:
            return closed_to_others(Path(sys.executable).resolve())
        return Path(seen.stdout.strip()) if seen.stdout.strip() else None

    def end_processes(self):
        """Kill every process of this user, in any session or process group, whatever its
        environment (kill(-1) sent as the user reaches every process it owns); return how
        many there were."""
        import psutil

        ended = 0
        for _ in range(20):  # a process may start another while the first kill is on its way
            left = [
                p
                for p in psutil.process_iter(["uids", "status"])
                if p.info["uids"]
                and self.uid in (p.info["uids"].real, p.info["uids"].effective)
                and p.info["status"] != psutil.STATUS_ZOMBIE
            ]  # (ended: not running)
            if not left:
                self.ended += ended
                return ended
            ended = max(ended, len(left))
            subprocess.run(
                [sys.executable, "-S", "-c", f"import os; os.kill(-1, {int(signal.SIGKILL)})"],
                cwd="/",
                **self.popen(),
            )
            # until each has ended: a killed process whose parent is gone stays a zombie until
            # init reaps it (psutil.wait_procs would wait its whole timeout for that)
            until = time.monotonic() + 2
            while time.monotonic() < until and any(running(p) for p in left):
                time.sleep(0.02)
        self.ended += ended
        return ended


# every process a graded file starts carries this variable, set to this grading's own value:
# found by it at the end, in any session or process group (a file may start a process in a
# session of its own), and ended
MARKER = "COURSE_GRADED_RUN"


def marked_processes(value):
    """Return this user's processes whose environment holds MARKER=value (psutil; a process
    that cannot be read, or has ended, is skipped)."""
    import psutil

    found = []
    for process in psutil.process_iter(["pid", "uids"]):
        if (
            process.pid == os.getpid()
            or process.info["uids"] is None
            or process.info["uids"].real != os.getuid()
        ):
            continue
        with contextlib.suppress(psutil.Error, OSError):
            if process.environ().get(MARKER) == value:
                found.append(process)
    return found


def end_marked(value):
    """Kill every process the grading started that still runs, in any session; return how
    many there were."""
    import psutil

    left = marked_processes(value)
    for process in left:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(left, timeout=10)
    return len(left)


class AsGrader:
    """Where there is no root: the graded file's runs run as the grader itself (the same
    interface as GradedUser), each launch's environment marked with MARKER, and every
    process carrying that mark ended after each launch and at the end, in any session."""

    def __init__(self):
        self.marker = uuid.uuid4().hex
        self.ended = 0

    def __enter__(self):
        os.environ[MARKER] = self.marker  # every launch's environment is a copy of this one
        return self

    def __exit__(self, *exc):
        self.end_processes()

    def popen(self):
        return {}

    def denied(self, folders):
        return contextlib.nullcontext([])  # no user of its own to deny anything

    def scratch(self, folder):
        Path(folder).mkdir(parents=True, exist_ok=True)
        return Path(folder)

    def environment(self, env, scratch):
        return env

    def end_processes(self):
        ended = end_marked(self.marker)
        self.ended += ended
        return ended
