"""Runs the tests will read later, made ahead in a thread while other tests run.

Many tests wait on one process at a time (a Ctrl-C test, a refused launch, a step of one
thread): a core stays idle. The shared runs that later tests read (the take-home's grades,
the full default runs, the grader's runs of a lesson) are made meanwhile, in one thread of
their own, the one read last first:

    ahead = Ahead(tmp_path_factory.mktemp)
    ahead.add(grade, ahead.in_a_folder(grade))     # queued at the session's start
    ahead.result(grade, ahead.in_a_folder(grade))  # a test reads it: waits for it, or makes it

A run not started yet when a test reads it is taken off the queue and made by the test
itself; one under way is waited for. What a run reads that another thread may make too
(tests/helpers/shared_runs.py) is made once, under a lock. Signals reach the main thread
only: its handler stops the thread's processes with its own (accelerate_course/running.py),
and stop() kills what is left when the session ends.
"""

import concurrent.futures
import threading

from accelerate_course import running

THREAD = "tests-ahead"  # the thread's name: the unit tests' guard lets it start processes


class Ahead:
    def __init__(self, folder_for):
        """folder_for(name) gives a new folder (pytest's tmp_path_factory.mktemp)."""
        self.folder_for = folder_for
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=THREAD)
        self._queued = {}
        self._lock = threading.Lock()

    def add(self, name, make):
        """Queue make() (its result read later as result(name, ...))."""
        with self._lock:
            self._queued[name] = self._pool.submit(make)

    def in_a_folder(self, function):
        """Return make(): function(a new folder named after it)."""
        return lambda: function(self.folder_for(function.__name__))

    def result(self, name, make):
        """Return make()'s result: the queued run's (waited for), or made here if it was not
        queued or had not started."""
        with self._lock:
            future = self._queued.get(name)
            if future is None or future.cancel():
                self._queued[name] = future = concurrent.futures.Future()
                future.set_running_or_notify_cancel()
                mine = True
            else:
                mine = False
        if mine:
            try:
                future.set_result(make())
            except BaseException as error:
                future.set_exception(error)
                raise
        return future.result()

    def stop(self):
        """Drop what has not started; kill the processes of what has until it has ended (the
        main thread has none running when the session ends: every run of its own has ended)."""
        with self._lock:
            for future in self._queued.values():
                future.cancel()
            ended = self._pool.submit(lambda: None)  # starts once the thread's run has ended
        while not ended.done():
            running.kill_trees(running.still_running())
            concurrent.futures.wait([ended], timeout=0.2)
        self._pool.shutdown()
