"""How many random cases each property test draws (hypothesis's max_examples).

The whole suite (`bash scripts/test.sh`, what CI runs) draws each test's full count. The quick
tier (`bash scripts/test.sh --quick`, which sets MLXC_TEST_TIER=quick) draws a quarter of it, and
at least 25: the same properties on fewer random cases, so that the tier, which runs the linters
too, answers within its two minutes (bench/NOTES.md, "The quick tier: where its CPU goes").
"""

from __future__ import annotations

import os

QUICK = os.environ.get("MLXC_TEST_TIER") == "quick"


def examples(full: int) -> int:
    """The number of cases to draw for a test that draws `full` in the whole suite (never more)."""
    return min(full, max(25, full // 4)) if QUICK else full
