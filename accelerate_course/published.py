"""Where the course is published and at which version: pyproject.toml's [tool.accelerate-course]
repository and [project] version, read once for the notebooks, their links and a graded lab.
"""

import tomllib
from pathlib import Path

from accelerate_course.steps import REPO


def project():
    """Return pyproject.toml, read."""
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def named_repository():
    """Return the course's repository on GitHub as pyproject.toml names it ('' until published)."""
    return project()["tool"]["accelerate-course"]["repository"]


def repository():
    """Return the course's repository on GitHub, or a placeholder that says what to write there."""
    return named_repository() or "https://github.com/OWNER/COURSE"


def version_tag():
    """Return the tag of this version: the notebooks install the course from it, and a graded
    lab grades with the teacher's copy at it."""
    return f"v{project()['project']['version']}"


def grader_repository():
    """Return where a graded lab clones its grader from: a teacher's private copy's own
    repository (pyproject.toml's grader-repository, written by make private-copy), else the
    course's."""
    return project()["tool"]["accelerate-course"].get("grader-repository") or named_repository()


def grader_tag():
    """Return the tag a graded lab clones its grader at: the private copy's (grader-tag), else
    this version's."""
    return project()["tool"]["accelerate-course"].get("grader-tag") or version_tag()


def course_source():
    """Return where a notebook opened without the course installs it from: the repository at
    this version's tag ('' while pyproject.toml names no repository)."""
    named = named_repository()
    return f"git+{named}@{version_tag()}" if named else ""


def on_github(path):
    """Return the address of a file of the course, at this version's tag, on GitHub."""
    return f"{repository()}/blob/{version_tag()}/{path}"


def notebook_links(notebook):
    """Return the badges that open a notebook of the course (its path) on Colab and on Kaggle,
    at this version's tag."""
    on_branch = on_github(Path(notebook).resolve().relative_to(REPO).as_posix())
    colab = on_branch.replace("https://github.com/", "https://colab.research.google.com/github/")
    return (
        f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]({colab}) "
        f"[![Open in Kaggle](https://kaggle.com/static/images/open-in-kaggle.svg)]"
        f"(https://kaggle.com/kernels/welcome?src={on_branch})"
    )


def codespaces_link():
    """Return the badge that opens the course's repository in a GitHub Codespace (its dev
    container, .devcontainer/devcontainer.json)."""
    owner_course = repository().removeprefix("https://github.com/")
    return (
        "[![Open in GitHub Codespaces](https://github.com/codespaces/badge.svg)]"
        f"(https://codespaces.new/{owner_course}?quickstart=1)"
    )
