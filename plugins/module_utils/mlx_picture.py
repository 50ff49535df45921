# -*- coding: utf-8 -*-
"""The topology picture: Graphviz `dot` renders the DOT file as an SVG (the module mlx_picture,
and its action plugin on the controller, which runs this in ansible-playbook's own process).

Without Graphviz the DOT file is the picture: that is a result, not a failure. `dot` prints the
SVG, which is written as mlx_files writes a file: only when it differs (a re-render of the same
plan is not a change), atomically (a reader never sees half a file).
"""

from __future__ import annotations

import os
import shutil

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_files import FilesError, write_files
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_run import COMMAND_TIMEOUT_SPEC, CommandTimeout

ARGUMENT_SPEC = dict(
    src=dict(type="path", required=True),
    dest=dict(type="path", required=True),
    dot=dict(type="str", default="dot"),
    **COMMAND_TIMEOUT_SPEC,
)
# The picture is for reading, like the files beside it that a user opens (the report).
SVG_MODE = "0600"  # as every artifact: the user's alone
NO_GRAPHVIZ = (
    "no Graphviz `{dot}` on this machine's PATH: the DOT file {src} is the picture "
    "(install Graphviz, e.g. `brew install graphviz`, for an SVG)"
)


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


def render(src, dest, dot, runner, check_mode=False):
    """Render `src` (DOT) to `dest` (SVG) with Graphviz `dot` (find_dot), commands bounded by
    `runner` (mlx_run.Runner); the SVG is written as mlx_files writes a file (module_utils
    mlx_files.write_files: only when it differs, atomically). Returns the result: {changed,
    rendered, dest[, msg]}."""
    dot_bin = find_dot(dot)
    if dot_bin is None:
        return {"changed": False, "rendered": False, "dest": dest, "msg": NO_GRAPHVIZ.format(dot=dot, src=src)}
    if check_mode:
        return {
            "changed": True,
            "rendered": False,
            "dest": dest,
            "msg": "check mode: the picture would be rendered again from " + src,
        }
    try:
        rc, svg, err = runner.run([dot_bin, "-Tsvg", src])
    except CommandTimeout as exc:
        raise PictureError(exc.msg) from None
    except OSError as exc:
        raise PictureError(f"`{dot_bin}` could not be started: {exc}") from None
    if rc != 0:
        raise PictureError(f"`{dot_bin} -Tsvg` could not render {src} (exit {rc}): {err.strip()}")
    try:
        written = write_files([{"path": dest, "content": svg, "mode": SVG_MODE}])
    except FilesError as exc:
        raise PictureError(exc.msg) from None
    return {"changed": written["changed"], "rendered": True, "dest": dest}
