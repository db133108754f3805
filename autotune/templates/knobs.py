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


def add_row_flop(cfg, per_element: float, rows, cols: int) -> None:
    """``cfg.add_flop`` of a row-wise template: ``per_element`` operations per element of
    ``rows x cols``; none where ``rows`` is a size bound at call (a ``pt.var``: a module
    built for every row count, which tuning does not measure)."""
    if isinstance(rows, int):
        cfg.add_flop(per_element * rows * cols)
