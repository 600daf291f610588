"""The processes notebook_launcher forks connect only once all of them are forked.

Why: notebook_launcher (accelerate 1.15, launchers.py) starts its processes with torch
elastic's start_method="fork", one after another, while the launching process already serves
their rendezvous store (a TCPStore) on a thread of its own. That thread names each process
that connects with getnameinfo (torch 2.13's formatSockAddr, read in the source), which holds
glibc's resolver lock for a moment. A process forked in that moment starts with the lock
held and no thread to release it, and its own getnameinfo, when it connects, waits forever.
Measured here (2 cores of an Intel Xeon model 167, `step4_tpu_notebook/train.py
--num-processes 8 --max-train-steps 2`), before this gate: 1 launch of 49 hung so, and 2 of 12
while /etc/resolv.conf was touched in a loop (glibc then rereads it under the lock, so the
moment lasts longer); py-spy showed the forked process in __lll_lock_wait_private under
getnameinfo. With it: 0 of 40, and 0 of 30 with the file touched.

The gate: a pipe made before the launch. Each forked process waits, before it does anything,
until the launching process has forked all of them and closed its end of the pipe; only then
do they connect, and no fork happens while the store thread resolves a name. A launching
process that dies closes the pipe too, and a wait never lasts more than WAIT_SECONDS.
"""

import os
import select
import time

WAIT_SECONDS = 120


def connect_after_all_forked(n):
    """Hold each of the next n processes this process forks until all n are forked."""
    launching = os.getpid()
    read_end, write_end = os.pipe()
    forked = 0

    def after_fork_in_launcher():
        nonlocal forked
        if os.getpid() != launching or forked == n:
            return
        forked += 1
        if forked == n:  # the last one is forked: the processes may connect now
            os.close(write_end)
            os.close(read_end)

    def after_fork_in_process():
        if os.getppid() != launching or forked == n:
            return  # a process forked later, or by a process this one started
        os.close(write_end)  # the pipe ends (reads nothing) once the launcher closes its end
        deadline = time.monotonic() + WAIT_SECONDS
        while time.monotonic() < deadline:
            ready, _, _ = select.select([read_end], [], [], deadline - time.monotonic())
            if ready and not os.read(read_end, 1):
                break
        os.close(read_end)

    os.register_at_fork(after_in_parent=after_fork_in_launcher,
                        after_in_child=after_fork_in_process)
