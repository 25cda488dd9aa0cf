"""Make ``xdist_group`` marks group tests again on pytest >= 9.2.

Under ``--dist loadgroup`` pytest-xdist's worker appends ``@<group>`` to each marked test's node
id, and its scheduler deals tests with the same suffix to one worker. It does so by setting the
item's ``_nodeid``, which pytest 9.2 no longer reads (node ids became structured): the suffix is
silently lost and every test is dealt alone (pytest-xdist issue 1386). This hook, run after
xdist's, adds the suffix where it is missing; where xdist's own still works it finds it there and
does nothing.
"""

from __future__ import annotations

import pytest


def group_of(item: pytest.Item) -> str | None:
    """The group xdist gives a test: its ``xdist_group`` names, sorted and joined; or None."""
    names = {
        str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
        for mark in item.iter_markers("xdist_group")
    }
    return "_".join(sorted(names)) if names else None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not getattr(config.option, "loadgroup", False):  # set on xdist workers only
        return
    missing = [
        (item, group)
        for item in items
        if (group := group_of(item)) is not None and not item.nodeid.endswith(f"@{group}")
    ]
    if not missing:
        return
    from _pytest.nodeid import NodeId  # pytest >= 9.2, the versions where the suffix is missing

    for item, group in missing:
        item._id = NodeId.parse(f"{item.nodeid}@{group}")
