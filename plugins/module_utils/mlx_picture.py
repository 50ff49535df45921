# -*- coding: utf-8 -*-
"""The topology picture: Graphviz `dot` renders the DOT file as an SVG (the module mlx_picture,
and its action plugin on the controller, which runs this in ansible-playbook's own process).

Without Graphviz the DOT file is the picture: that is a result, not a failure. The SVG is
rendered into a temporary file beside it and renamed into place only when it differs, so a
re-render of the same plan is not a change and a reader never sees half a file.
"""

from __future__ import annotations

import os
import shutil
import tempfile

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_run import COMMAND_TIMEOUT_SPEC, CommandTimeout

ARGUMENT_SPEC = dict(
    src=dict(type="path", required=True),
    dest=dict(type="path", required=True),
    dot=dict(type="str", default="dot"),
    **COMMAND_TIMEOUT_SPEC,
)
# The picture is for reading, like the files beside it that a user opens (the report).
SVG_MODE = 0o644
NO_GRAPHVIZ = ("no Graphviz `{dot}` on this machine's PATH: the DOT file {src} is the picture "
               "(install Graphviz, e.g. `brew install graphviz`, for an SVG)")


class PictureError(Exception):
    """`dot` failed or did not answer; `msg` says which file and what it printed."""

    def __init__(self, msg):
        super().__init__(msg)
        self.msg = msg


def find_dot(dot, path=None):
    """The Graphviz binary `dot` names (a path, or a name looked up on `path`/PATH), or None."""
    if os.path.isabs(dot):
        return dot if os.access(dot, os.X_OK) else None
    return shutil.which(dot, path=path)


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def render(src, dest, dot, runner, check_mode=False):
    """Render `src` (DOT) to `dest` (SVG) with Graphviz `dot` (find_dot), commands bounded by
    `runner` (mlx_run.Runner). Returns the result: {changed, rendered, dest[, msg]}."""
    dot_bin = find_dot(dot)
    if dot_bin is None:
        return {"changed": False, "rendered": False, "dest": dest,
                "msg": NO_GRAPHVIZ.format(dot=dot, src=src)}
    if check_mode:
        return {"changed": True, "rendered": False, "dest": dest,
                "msg": "check mode: the picture would be rendered again from " + src}
    fd, tmp = tempfile.mkstemp(prefix=".topology-", suffix=".svg", dir=os.path.dirname(dest) or ".")
    os.close(fd)
    try:
        try:
            rc, _out, err = runner.run([dot_bin, "-Tsvg", "-o", tmp, src])
        except CommandTimeout as exc:
            raise PictureError(exc.msg) from None
        except OSError as exc:
            raise PictureError(f"`{dot_bin}` could not be started: {exc}") from None
        if rc != 0:
            raise PictureError(f"`{dot_bin} -Tsvg` could not render {src} (exit {rc}): {err.strip()}")
        if _read(tmp) == _read(dest):
            return {"changed": False, "rendered": True, "dest": dest}
        os.chmod(tmp, SVG_MODE)
        os.replace(tmp, dest)
        return {"changed": True, "rendered": True, "dest": dest}
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
