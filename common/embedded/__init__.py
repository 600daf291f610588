"""The embedded default, shipped with the course: where its files are.

Its builders (accelerate_course/maintain/embedded/) are the maintainers' code; a class gets the
files only.
"""

from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"  # the MRPC-shaped pairs
SST2 = HERE / "sst2"  # the SST-2-shaped sentences
CHECKPOINT = HERE / "checkpoint"  # the tiny BERT
