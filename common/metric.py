"""Where the GLUE MRPC metric module lives, for `evaluate.load(GLUE_MRPC_METRIC)`."""

from pathlib import Path

# An absolute path: evaluate.load gives a local folder named like a hub metric ("glue") in
# the working directory priority, so the module sits in a folder of its own name.
GLUE_MRPC_METRIC = str(Path(__file__).resolve().parent / "glue_mrpc")
