"""An action plugin of the collection as Ansible makes one for a task, with the module run
replaced by a mock (`_execute_module`, returning `module_result`)."""

from __future__ import annotations

from unittest import mock

import pytest


@pytest.fixture
def make_action():
    def make(cls, args, transport="local", become=False, check_mode=False, diff=False, module_result=None):
        task = mock.MagicMock(args=args, check_mode=check_mode, diff=diff, async_val=0)
        action = cls(
            task,
            mock.MagicMock(transport=transport),
            mock.MagicMock(become=become),
            loader=None,
            templar=None,
            shared_loader_obj=None,
        )
        action._execute_module = mock.MagicMock(return_value=module_result or {"changed": True})
        return action

    return make
