"""The tests' runs of every step, shared: each launch made once, when something first reads it.

Many checks read the same runs: a step's comparison with the one before it, its what-if table,
the grading of its exercise, of its variants and of step 3's mistakes. Starting processes is
most of what a short run costs (about 6 s of imports each), so the runs that can share a
launch do (accelerate_course/lab_driver.py runs them one after the other in the same
processes), and a launch that nothing reads is never made:

    runs = SharedRuns(folder_for, selected=(3,))   # the steps whose checks will read runs
    runs(3).measured["lesson"]                     # step 3's lab launch, made now
    runs(3).graded["exercise"]                     # + the grader's other settings, made now

A launch may also be made ahead, in tests/helpers/ahead.py's thread, while other tests run:
each property is made once, under its StepRuns' lock, and a test that reads it meanwhile waits.

Per step (StepRuns), in order of what each property launches:
- measured: the step and its what-if variants in one launch (lab.what_if), with the step's
  exercise beside them, and whatever the caller adds (`extra`: step 3's grid of sizes and the
  mistakes a grader must fail, in the tests), and for step 3, step 4's reference (step 3
  with dropout off) when step 4's checks read runs too;
- one: the one-process launch (step 1, step 2, step 3, and whatever the caller adds:
  `on_one_process`), which the comparisons of steps 1-3 read; where step 2's lab launch is
  read too, it and the grader's one-process launch of step 2 run beside that lab's own
  one-process launch, three launches of 1 process on the 2 cores;
- two_machines (step 3): the setting no exercise shows (2 machines of 1 process, with the
  grader's flags for it) for the runs named in `unseen`, with whatever the caller adds to that
  launch (`on_two_machines`: in the tests, the README's command as 2 machines started by srun);
- runs: what grading needs besides (check.runs_for): the grader's own settings, where they
  are not the lab's (step 2 on 1 process, and step 4, with check.PREDICTING_RUN's flags);
- graded: check.grade of the lesson and of every other script.
"""

import functools
import threading

from accelerate_course import check, exercise, lab, lab_runs, patches
from accelerate_course.steps import TRAIN_PY

GRADED_STEP4_REFERENCE = "step 4's graded reference"  # in step 3's lab launch (see StepRuns)


def made_once(method):
    """A property made once per StepRuns, under its lock: what one thread (the tests', or
    tests/helpers/ahead.py's) is making, another waits for instead of making it again."""

    @property
    @functools.wraps(method)
    def made(self):
        with self.lock:
            if method.__name__ not in self.made:
                self.made[method.__name__] = method(self)
            return self.made[method.__name__]

    return made


class StepRuns:
    """The lab's runs of one step (see the module's docstring), each launch made when first read."""

    def __init__(
        self,
        step,
        folder,
        extra=None,
        unseen=(),
        step3_reference=None,
        selected=(1, 2, 3, 4),
        on_one_process=None,
        on_two_machines=None,
        machine_env=None,
    ):
        """extra: {name: script, or (script, env, flags)} run in the step's lab launch beside
        its variants; unseen: the names graded again in step 3's unseen setting (none: grading
        then runs every script there); step3_reference(name): a callable giving step 4's
        reference runs from step 3's lab launch ("lesson without dropout" for the lab, and
        GRADED_STEP4_REFERENCE for the grader), or None (then each runs alone); selected:
        the steps whose checks read runs in this session (a run that only another step's checks
        read is made only when they do); on_one_process: {name: (script, env, flags)} run last
        in the one-process launch (last: a run's process-wide settings cannot reach the others);
        on_two_machines: {name: (script, env, flags)} run in step 3's two-machine launch
        besides; machine_env(rank): what else each machine's launcher sees there (a
        cluster's variables), as lab_runs.run_on_two_machines takes it."""
        self.step, self.folder, self.unseen = step, folder, list(unseen)
        self.lock, self.made = threading.RLock(), {}
        self.on_one_process = on_one_process or {}
        self.on_two_machines, self.machine_env = on_two_machines or {}, machine_env
        self.step3_reference, self.selected = step3_reference, selected
        self.extra = {}
        if step > 1:
            path = folder / "exercise" / "train.py"
            path.parent.mkdir(parents=True)
            path.write_text(exercise.exercise(step))
            self.extra["exercise"] = path
        self.extra.update(extra or {})
        if step == 3 and 4 in selected:  # step 4's reference, in step 3's launch
            self.extra["lesson without dropout"] = (TRAIN_PY[3], {}, lab_runs.lab_flags(4, folder))
            # and the reference step 4's grading compares with (check.STEP3_REFERENCE)
            self.extra[GRADED_STEP4_REFERENCE] = (TRAIN_PY[3], {}, check.step4_flags(folder))
        # the scripts graded besides the lesson: variants, exercise, and the extras that are
        # plain scripts (not a helper run with flags of its own, not the grader's reference)
        self.scripts = {
            **patches.variant_scripts(step, folder=folder),
            **{
                name: path
                for name, path in self.extra.items()
                if not isinstance(path, tuple) and name != check.REFERENCE
            },
        }
        del self.scripts["lesson"]
        self.grading = check.grading_of(str(step)) if step > 1 else None

    @property
    def _shares_one_process_round(self):
        """Whether step 2's launches of 1 process run beside its lab's own (_beside): where
        step 2's lab launch is read in this session."""
        return self.step == 2 and 2 in self.selected

    @property
    def _beside(self):
        """Step 2's launches of 1 process, when its lab launch is read in this session: the
        one-process launch and the grader's (check.one_process_batch), run beside the lab's
        own one-process invariants (lab.what_if's beside), three launches of 1 process on the
        2 cores instead of one after another."""
        if not self._shares_one_process_round:
            return []
        return [
            lab_runs.lab_batch(
                2, self.one_process_scripts, self.folder / "one", processes=1, launcher="accelerate"
            ),
            check.one_process_batch(
                {"step1": TRAIN_PY[1], **self.candidates}, self.folder / "graded" / "one"
            ),
        ]

    @made_once
    def _what_if(self):
        return lab.what_if(self.step, self.folder, extra=self.extra, beside=self._beside)

    @property
    def rows(self):
        """The what-if table's rows (lab.Row), as the lesson's page shows them."""
        return self._what_if.rows

    @property
    def invariant_rows(self):
        """The invariants table's rows (invariants.InvariantRow)."""
        return self._what_if.invariant_rows

    @property
    def measured(self):
        """{name: measuring.measure(...)} of every run of the step's lab launches."""
        return self._what_if.measured

    @property
    def one_process_scripts(self):
        return {
            "step1": TRAIN_PY[1],
            "lesson": TRAIN_PY[2],
            "step3": TRAIN_PY[3],
            **self.on_one_process,
        }

    @property
    def candidates(self):
        """The scripts the grader grades: the lesson and every other script."""
        return {"lesson": TRAIN_PY[self.step], **self.scripts}

    @made_once
    def one(self):
        """The one-process launch, under accelerate launch (one thread): step 1, step 2
        ("lesson"), step 3, and last `on_one_process`; beside step 2's lab launch when that
        is read too (_beside)."""
        if self._shares_one_process_round:
            return self._what_if.beside[0]
        return lab_runs.run_scripts(
            2, self.one_process_scripts, self.folder / "one", processes=1, launcher="accelerate"
        )

    @made_once
    def step3_without_dropout(self):
        """Step 3 on 2 processes with dropout off, the lab's flags (step 4's lesson compares
        with it): from step 3's lab launch when that launch is read anyway, else alone."""
        made = self.step3_reference("lesson without dropout") if self.step3_reference else None
        return (
            made
            or lab_runs.run_scripts(
                3,
                {"lesson": TRAIN_PY[3]},
                self.folder / "step3",
                lab_runs.lab_flags(4, self.folder),
            )["lesson"]
        )

    @made_once
    def two_machines(self):
        """Step 3 on 2 machines of 1 process each, in one launch: the scripts named in
        `unseen` with the grader's flags for it (check.UNSEEN_FLAGS), and `on_two_machines`
        with their own; {name: measuring.measure(...)}, each run's folder in folder/two_machines."""
        scripts = {name: self.scripts.get(name, TRAIN_PY[3]) for name in self.unseen}
        return lab_runs.run_on_two_machines(
            3,
            {**scripts, **self.on_two_machines},
            self.folder / "two_machines",
            check.UNSEEN_FLAGS,
            machine_env=self.machine_env,
        )

    @made_once
    def runs(self):
        """Everything grading reads (check.runs_for), the run sets made already with the
        grader's flags passed in: the lab's launch of 2 processes for steps 2 and 3 (its
        reference: step 2 itself, or step 2 run beside step 3's variants), and step 3's
        two-machine launch. Step 2 on 1 process and step 4 run with the grader's own flags
        (check.PREDICTING_RUN), in launches of their own."""
        made = {}
        if self.step == 2:
            made[check.TWO_PROCESSES] = {**self.measured, check.REFERENCE: self.measured["lesson"]}
            if self._shares_one_process_round:
                made[check.ONE_PROCESS] = self._what_if.beside[1]
        reference = (
            self.step3_reference(GRADED_STEP4_REFERENCE)
            if self.step == 4 and self.step3_reference
            else None
        )
        if reference:
            made[check.STEP3_REFERENCE] = {check.REFERENCE: reference}
        if self.step == 3:
            made[check.TWO_PROCESSES] = self.measured
            if self.unseen:
                made[check.TWO_MACHINES] = {name: self.two_machines[name] for name in self.unseen}
        return check.runs_for(self.grading, self.candidates, self.folder / "graded", made)

    @made_once
    def graded(self):
        """{name: the grader's checks} for the lesson and every other script."""
        return {
            name: check.grade(self.grading, name, self.runs) for name in ["lesson", *self.scripts]
        }

    def score(self, name):
        """Return (points scored, points the grade is out of) of a script."""
        return check.score(self.grading, self.graded[name])

    def __getitem__(self, name):
        return self.measured[name]


class SharedRuns:
    """runs(step) -> that step's StepRuns, made once. folder_for(step) gives a fresh folder;
    extra_for(step, folder) the caller's extra scripts of a step's lab launch; on_one_process,
    what step 2's one-process launch runs besides; unseen, the names graded again in step 3's
    unseen setting; on_two_machines and machine_env, what step 3's two-machine launch runs
    besides and what its launchers see (see StepRuns)."""

    def __init__(
        self,
        folder_for,
        selected=(1, 2, 3, 4),
        extra_for=None,
        on_one_process=None,
        unseen=(),
        on_two_machines=None,
        machine_env=None,
    ):
        self.folder_for, self.selected = folder_for, selected
        self.extra_for = extra_for or (lambda step, folder: {})
        self.on_one_process = on_one_process
        self.step3_two_machines = dict(
            unseen=unseen, on_two_machines=on_two_machines, machine_env=machine_env
        )
        self.made, self.lock = {}, threading.Lock()

    def step3_reference(self, name):
        """Step 4's reference `name` (step 3 with dropout off), from step 3's lab launch when
        that launch is read anyway; else None: it then runs alone."""
        return self(3)[name] if 3 in self.selected else None

    def __call__(self, step):
        with self.lock:  # tests/helpers/ahead.py's thread may ask for it too
            if step not in self.made:
                folder = self.folder_for(step)
                self.made[step] = StepRuns(
                    step,
                    folder,
                    self.extra_for(step, folder),
                    step3_reference=self.step3_reference if step == 4 else None,
                    selected=self.selected,
                    on_one_process=self.on_one_process if step == 2 else None,
                    **(self.step3_two_machines if step == 3 else {}),
                )
            return self.made[step]
