"""The simulated Macs' ps: macOS's line width (BSD ps, adv_cmds ps.c), over the machine's procps."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "simcluster" / "shims"))
import macos  # noqa: E402


@pytest.mark.parametrize(
    "args, environ, tty, columns, width",
    [
        (["-ax", "-o", "pid=,args="], {}, False, 0, 79),  # a module's ps: no terminal
        (["-ax", "-w", "-o", "pid=,args="], {}, False, 0, 131),
        (["-ax", "-ww", "-o", "pid=,args="], {}, False, 0, None),
        (["-axww", "-o", "pid=,args="], {}, False, 0, None),
        (["-ww", "-o", "args=", "-p", "42"], {}, False, 0, None),
        (["-ax", "-o", "pid=,args="], {}, True, 200, 199),
        (["-ax", "-w", "-o", "args="], {}, True, 200, 199),
        (["-ax", "-o", "args="], {"COLUMNS": "300"}, False, 0, 300),
        # a `w` inside an option's value is no -w: -o's value, -p's, -U's
        (["-ax", "-o", "pid=,wchan=,args="], {}, False, 0, 79),
        (["-U", "www", "-o", "args="], {}, False, 0, 79),
        (["-owchan"], {}, False, 0, 79),
    ],
)
def test_ps_cuts_lines_where_macos_ps_does(args, environ, tty, columns, width):
    assert macos.ps_width(args, environ, tty, columns) == width
