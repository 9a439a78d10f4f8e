"""Where the project's shared material (reference outputs, traces) is: ``../shared`` beside the
checkout (as CI lays it out), else /work/shared, overridable with MUSTER_SHARED."""

import os
from pathlib import Path

_HERE = Path(__file__).resolve().parent


def shared_dir() -> Path:
    env = os.environ.get("MUSTER_SHARED")
    candidates = [Path(env)] if env else []
    candidates += [_HERE.parent.parent / "shared", Path("/work/shared")]
    for c in candidates:
        if (c / "reference").is_dir():
            return c
    return candidates[-1]


SHARED = shared_dir()
