"""Knob helpers shared by the built-in templates."""

from __future__ import annotations


def inner_tile(cfg, name: str, extent, sizes, default):
    """A two-way split knob ``name`` of ``extent`` whose inner part is one of ``sizes``."""
    cfg.define_split(
        name,
        extent,
        num_outputs=2,
        policy="candidate",
        candidate=[[-1, n] for n in sizes],
        default=[-1, default],
    )
