"""Shared test set-up: Hypothesis profiles and the import path for test helpers.

``tests/`` is not a package; this conftest puts it on ``sys.path`` so that
``import strategies`` works from any test directory, whatever the import mode.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hypothesis import HealthCheck, settings

_HERE = str(Path(__file__).resolve().parent)
for _path in (_HERE, str(Path(_HERE) / "integration")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

# "dev" is quick for the edit-test loop; "ci" tries harder. Neither uses a
# deadline (timing on shared CI machines is noise) and neither derandomizes, so
# every run explores new examples; failures are replayed from the database.
settings.register_profile(
    "dev",
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "ci",
    max_examples=80,
    deadline=None,
    derandomize=False,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))
