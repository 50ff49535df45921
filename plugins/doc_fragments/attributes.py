# -*- coding: utf-8 -*-
"""Attributes the collection's modules share (as community.general's attributes fragment does):
`mlx.cluster.attributes` is the common case, full check mode and no diff. A module that differs
documents its own `attributes:`, which take precedence over the fragment's."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
attributes:
  check_mode:
    support: full
    description: Runs in check mode and reports what it would change without changing it.
  diff_mode:
    support: none
    description: Returns no diff.
"""
