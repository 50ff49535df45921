# -*- coding: utf-8 -*-
# Copyright: mlx-cluster contributors
# MIT License
"""Action plugin mlx_cluster_report: the artifacts of the runs so far (and this run's plan and
facts) -> the cluster report, ``<artifacts_dir>/report.html``.

Thin on purpose: ``report.collect`` reads the artifacts, ``report.render`` makes the page (both
plugins/plugin_utils/report.py); this plugin writes it only when it differs from the file there
(``changed`` measured; in check mode nothing is written). The documentation is
library/mlx_cluster_report.py (a stub, as for mlx_cluster_plan).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_files import loose_modes
from ansible_collections.mlx.cluster.plugins.plugin_utils import report

try:  # a controller set up before the metrics (scripts/controller.sh adds prometheus-client)
    from ansible_collections.mlx.cluster.plugins.plugin_utils import metrics
except ImportError:  # pragma: no cover - exercised by a test that hides the package
    metrics = None
from ansible_collections.mlx.cluster.plugins.plugin_utils.plain import plain

MODE = 0o600
METRICS_NAME = "metrics.prom"
# the file's name in node_exporter's textfile directory (its collector reads every *.prom there)
TEXTFILE_NAME = "mlx_cluster.prom"


def _write(path, data, mode=MODE):
    """Atomically: a temporary file beside it, then a rename."""
    fd, tmp = tempfile.mkstemp(prefix=".report.", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _differs(path, data, mode):
    try:
        with open(path, "rb") as fh:
            return fh.read() != data or (os.stat(path).st_mode & 0o7777) != mode
    except OSError:
        return True


def _put(path, data, mode, check_mode, folder, what):
    """Write `data` to `path` (mode `mode`) when it differs; -> whether it did (would)."""
    if not _differs(path, data, mode):
        return False
    if not check_mode:
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
            _write(path, data, mode)
        except OSError as exc:
            raise AnsibleActionFail(
                "mlx_cluster_report: cannot write %s: %s. Check that the user running ansible-playbook may "
                "write to %s (%s)." % (path, exc.strerror or exc, folder, what)
            ) from None
    return True


def _checked_folder(args):
    """The artifacts directory from the task's arguments; the plan and the facts, when given,
    must be mappings. A wrong argument fails the task naming it."""
    folder = args.get("artifacts_dir")
    if not isinstance(folder, str) or not folder:
        raise AnsibleActionFail(
            "mlx_cluster_report: artifacts_dir must be the artifacts directory (mlx_cluster_artifacts_dir)"
        )
    for key, kind, what in (
        ("plan", Mapping, "the mlx_cluster_plan fact"),
        ("facts", Mapping, "a mapping host -> mlx_cluster facts"),
    ):
        if args.get(key) is not None and not isinstance(args[key], kind):
            raise AnsibleActionFail("mlx_cluster_report: %s must be %s" % (key, what))
    return folder


def _modes_diff(folder, loose):
    """--diff of the artifacts' modes: (path, mode now, mode wanted) each, before and after."""
    return {
        "before_header": "%s (modes)" % folder,
        "after_header": "%s (modes)" % folder,
        "before": "".join("%04o %s\n" % (now, where) for where, now, _want in loose),
        "after": "".join("%04o %s\n" % (want, where) for where, _now, want in loose),
    }


def _make_private(loose):
    """chmod each (path, mode now, mode wanted) to the mode wanted; a refusal fails naming it."""
    for where, _now, want in loose:
        try:
            os.chmod(where, want)
        except OSError as exc:
            raise AnsibleActionFail(
                "mlx_cluster_report: cannot make %s private (mode %04o): %s" % (where, want, exc.strerror or exc)
            ) from None


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("artifacts_dir", "plan", "facts", "metrics_textfile_dir"))
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        folder = os.path.expanduser(_checked_folder(args))
        path = os.path.join(folder, report.REPORT_NAME)
        data = report.collect(folder)
        # this run's plan over the one an earlier run left (no plan.json yet when preflight
        # stops a first run)
        if args.get("plan") is not None:
            data.update(plan=plain(args["plan"]), plan_time="this run")
        if args.get("facts") is not None:
            data["macs"] = plain(args["facts"])
        page = report.render(data).encode("utf-8")
        check = self._task.check_mode
        wrote = _put(path, page, MODE, check, folder, "mlx_cluster_artifacts_dir")
        # The same numbers for Prometheus (node_exporter's textfile format), beside the report;
        # and, when asked, where a node_exporter on the controller reads textfiles (0644: it runs
        # as another user), written atomically as its collector requires.
        prom_path = os.path.join(folder, METRICS_NAME)
        textfile_dir = args.get("metrics_textfile_dir")
        if metrics is None:
            # the report is written all the same; the run does not fail for the metrics
            result.setdefault("warnings", []).append(
                "mlx_cluster_report: no metrics.prom: the controller's Python lacks prometheus-client. "
                "Fix: run scripts/controller.sh again (it installs what pyproject.toml lists), or "
                "pip install 'prometheus-client>=0.20,<1' into the Python that runs ansible-playbook"
            )
            prom_path, textfile_dir = None, None
        else:
            prom = metrics.text(data)
            wrote = _put(prom_path, prom, MODE, check, folder, "mlx_cluster_artifacts_dir") or wrote
        if textfile_dir:
            textfile_dir = os.path.expanduser(str(textfile_dir))
            if not os.path.isdir(textfile_dir):
                raise AnsibleActionFail(
                    "mlx_cluster_report: metrics_textfile_dir %s is not a directory: give node_exporter's "
                    "--collector.textfile.directory (mlx_cluster_metrics_textfile_dir), or leave it empty"
                    % textfile_dir
                )
            textfile = os.path.join(textfile_dir, TEXTFILE_NAME)
            wrote = _put(textfile, prom, 0o644, check, textfile_dir, "mlx_cluster_metrics_textfile_dir") or wrote
        # Every run: the artifacts directory 0700 and what is in it private (a directory that was
        # there before the toolkit, or a file copied in, keeps no group or other access). Check
        # mode changes nothing; --diff shows the modes before and after.
        loose = loose_modes(folder)
        if loose and self._task.diff:
            result["diff"] = [_modes_diff(folder, loose)]
        if not self._task.check_mode:
            _make_private(loose)
        result.update(
            changed=wrote or bool(loose),
            path=path,
            metrics=prom_path,
            modes=[{"path": where, "mode": "%04o" % now, "set": "%04o" % want} for where, now, want in loose],
        )
        return result
