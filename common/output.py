"""Writing a run's results: metrics.json, written whole or not at all."""

import json
import os
import tempfile
from pathlib import Path


def write_metrics(output_dir, args, results):
    """Write the results dict plus the hyperparameters in args to <output_dir>/metrics.json,
    and print where. The file is written to a temporary name in the same folder and renamed
    into place, so a crash never leaves half a file. Returns the path written.
    """
    path = Path(output_dir) / "metrics.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    record = dict(results, hyperparameters=vars(args))
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".metrics-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=1)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    print(f"metrics written to {path}", flush=True)
    return path
