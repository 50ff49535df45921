# -*- coding: utf-8 -*-
"""The progress file of a long-running module, read by its action plugin while the job runs.

`model_rsync` and `mlx_launch` take `progress_file`: a path where they keep one small JSON
object up to date while their command runs (model_rsync: bytes sent, the model's size, rate;
mlx_launch: the benchmark's latest progress lines). The action plugin of the same name runs the
module as a plain task would and, meanwhile, reads this file on the same machine over a second
SSH session with one bounded command, printing a line per host at most every
`progress_interval` seconds (`plugin_utils/progress.py`). The file is written whole each time
(a temporary file renamed over it), so a reader never sees half of it; it lives in the task's
temporary directory, which the action removes when the module's run returns. The action's read
waits on the machine for the text `"done": true` in it (json.dump's default separators; the
plugin's DONE_TEXT, tested against this writer), which the module writes when it ends.

A progress file that cannot be written never fails the job: writing stops, and the module
says so in a warning at the end.
"""

from __future__ import annotations

import json
import os

# Seconds between two writes of the file (a copy updates its bytes many times a second).
WRITE_EVERY = 0.5


class ProgressWriter:
    """Keeps `path` holding the latest state (a dict), rewritten at most every WRITE_EVERY s."""

    def __init__(self, path, every=WRITE_EVERY):
        self.path = path
        self.every = every
        self.error = None
        self._last = None

    def update(self, state, now, force=False):
        """Write `state` when WRITE_EVERY seconds passed since the last write (or `force`)."""
        if not self.path or self.error is not None:
            return False
        if not force and self._last is not None and now - self._last < self.every:
            return False
        tmp = f"{self.path}.tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(state, f, sort_keys=True)
            os.replace(tmp, self.path)
        except (OSError, TypeError, ValueError) as exc:
            self.error = f"cannot write the progress file {self.path}: {exc}"
            return False
        self._last = now
        return True
