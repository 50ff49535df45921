"""The topology picture (module_utils/mlx_picture.py, action plugin and module mlx_picture):
Graphviz renders the DOT file as an SVG in ansible-playbook's own process on the controller;
without Graphviz the DOT file is the picture (a result, not a failure); a re-render of the same
plan is not a change; a `dot` that fails or hangs is named."""

from __future__ import annotations

import os
import shutil

import pytest

from ansible_collections.mlx.cluster.plugins.action.mlx_picture import ActionModule
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_picture import PictureError, render
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_run import Runner

DOT = "digraph cluster { m1 -> m2 }\n"


def fake_dot(tmp_path, body):
    """A `dot` stand-in: argv is `-Tsvg SRC`, the SVG on stdout; `body` is the shell after that."""
    path = tmp_path / "bin" / "dot"
    path.parent.mkdir(exist_ok=True)
    path.write_text('#!/bin/sh\nsrc="$2"\n' + body + "\n")
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def dotfile(tmp_path):
    src = tmp_path / "artifacts" / "topology.dot"
    src.parent.mkdir()
    src.write_text(DOT)
    return src


def test_rendered_then_the_same_plan_is_no_change(tmp_path, dotfile):
    dot = fake_dot(tmp_path, 'printf "<svg>%s</svg>" "$(cat "$src")"')
    dest = dotfile.with_suffix(".svg")
    first = render(str(dotfile), str(dest), dot, Runner(10))
    assert first == {"changed": True, "rendered": True, "dest": str(dest)}
    assert dest.read_text() == "<svg>" + DOT.strip() + "</svg>" and (dest.stat().st_mode & 0o777) == 0o600
    assert render(str(dotfile), str(dest), dot, Runner(10))["changed"] is False
    dotfile.write_text("digraph cluster { m1 -> m3 }\n")
    assert render(str(dotfile), str(dest), dot, Runner(10))["changed"] is True
    assert sorted(p.name for p in dest.parent.iterdir()) == ["topology.dot", "topology.svg"]  # no temporary left


def test_without_graphviz_the_dot_file_is_the_picture(tmp_path, dotfile):
    res = render(str(dotfile), str(dotfile.with_suffix(".svg")), str(tmp_path / "nowhere" / "dot"), Runner(10))
    assert res["changed"] is False and res["rendered"] is False
    assert "no Graphviz" in res["msg"] and str(dotfile) in res["msg"]
    assert not dotfile.with_suffix(".svg").exists()


def test_check_mode_renders_nothing(tmp_path, dotfile):
    dot = fake_dot(tmp_path, "echo x")
    res = render(str(dotfile), str(dotfile.with_suffix(".svg")), dot, Runner(10), check_mode=True)
    assert res["changed"] is True and res["rendered"] is False and not dotfile.with_suffix(".svg").exists()


@pytest.mark.parametrize(
    "body, words",
    [
        ('echo "syntax error in line 1" >&2; exit 1', ["could not render", "exit 1", "syntax error in line 1"]),
        ("sleep 30", ["did not answer within 1"]),
    ],
    ids=["fails", "hangs"],
)
def test_a_dot_that_fails_or_hangs_is_named_and_leaves_the_old_picture(tmp_path, dotfile, body, words):
    dest = dotfile.with_suffix(".svg")
    dest.write_text("<svg>before</svg>")
    with pytest.raises(PictureError) as exc:
        render(str(dotfile), str(dest), fake_dot(tmp_path, body), Runner(1))
    assert all(w in exc.value.msg for w in words), exc.value.msg
    assert dest.read_text() == "<svg>before</svg>"
    assert sorted(p.name for p in dest.parent.iterdir()) == ["topology.dot", "topology.svg"]


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz is not installed")
def test_real_graphviz(dotfile):
    res = render(str(dotfile), str(dotfile.with_suffix(".svg")), "dot", Runner(30))
    assert res["rendered"] and "<svg" in dotfile.with_suffix(".svg").read_text()


@pytest.fixture
def _action(make_action):
    def make(args, **kw):
        return make_action(ActionModule, args, module_result={"changed": True, "rendered": True}, **kw)

    return make


def test_the_controllers_picture_is_rendered_in_process(tmp_path, dotfile, _action):
    dot = fake_dot(tmp_path, 'echo "<svg/>"')
    action = _action({"src": str(dotfile), "dest": str(dotfile.with_suffix(".svg")), "dot": dot})
    res = action.run(task_vars={})
    assert res["changed"] and res["rendered"] and os.path.exists(dotfile.with_suffix(".svg"))
    action._execute_module.assert_not_called()
    failing = _action(
        {"src": str(dotfile), "dest": str(dotfile.with_suffix(".svg")), "dot": fake_dot(tmp_path, "exit 3")}
    ).run(task_vars={})
    assert failing["failed"] and "exit 3" in failing["msg"]


def test_elsewhere_the_module_runs(tmp_path, dotfile, _action):
    action = _action({"src": str(dotfile), "dest": str(dotfile.with_suffix(".svg"))}, transport="ssh")
    action.run(task_vars={})
    assert action._execute_module.call_args.kwargs["module_name"] == "mlx.cluster.mlx_picture"
