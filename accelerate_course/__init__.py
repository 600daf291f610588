"""The course's own commands, installed with it (`pip install -e .`, which `make install` runs),
so that they import each other and `common` without any path set by hand.

For a class (each behind a make target):
    steps       the list of steps: their folders and how a lesson is read from them
    run_course  make course: every step, launched as this machine allows, and the results table
    whatif      make what-if: what breaks without each lesson line (lab + lab_driver run them)
    exercise    make exercise: a lesson as an exercise
    check       make check: the grader

For the course's maintainers: accelerate_course.maintain.
"""
