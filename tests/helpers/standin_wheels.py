"""Stand-in wheels and local package indexes, for pip's real resolver to choose between.

    index(folder, {"torch": ["2.13.0+cpu"]}) -> "file://.../simple"

Each stand-in is a real wheel (PEP 427: the package, its METADATA, WHEEL and RECORD) of a few
hundred bytes whose name and version are those of the release it stands for, in a folder laid
out as a PEP 503 simple index; pip reads it as it reads PyPI or PyTorch's indexes.
"""

import base64
import hashlib
import zipfile
from pathlib import Path


def wheel(folder, name, version):
    """Write name-version-py3-none-any.whl into folder; return its path."""
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f'__version__ = "{version}"  # a stand-in\n',
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: standin\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    files[f"{dist}/RECORD"] = "\n".join(record + [f"{dist}/RECORD,,"]) + "\n"
    path = Path(folder) / f"{name}-{version}-py3-none-any.whl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        for name_in, text in files.items():
            archive.writestr(name_in, text)
    return path


def index(folder, releases):
    """Write a simple index of stand-in wheels ({name: [version, ...]}) into folder; return
    its URL."""
    root = Path(folder) / "simple"
    for name, versions in releases.items():
        project = root / name
        links = [wheel(project, name, version).name for version in versions]
        (project / "index.html").write_text(
            "<!DOCTYPE html><html><body>\n"
            + "".join(f'<a href="{link}">{link}</a><br>\n' for link in links)
            + "</body></html>\n"
        )
    (root / "index.html").write_text(
        "<!DOCTYPE html><html><body>\n"
        + "".join(f'<a href="{name}/">{name}</a><br>\n' for name in releases)
        + "</body></html>\n"
    )
    return root.resolve().as_uri()
