"""Where Temporal refuses to register search attributes (Temporal Cloud's OperatorService, a role
without operator rights), turngate starts anyway, logs the exact commands to run and reports the
missing attributes in /status."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from temporalio.client import Client

from tests.connection.refusing_frontend import refusing_frontend
from tests.stack import make_settings, running_stack
from turngate.temporal_client import connect, ensure_search_attributes
from turngate.workflows.shared import SEARCH_ATTRIBUTES

ALL = [key.name for key in SEARCH_ATTRIBUTES]


async def test_listing_and_adding_refused(caplog: pytest.LogCaptureFixture) -> None:
    with refusing_frontend(list_allowed=False) as address:
        client = await Client.connect(address, namespace="acme.a1b2c")
        with caplog.at_level(logging.WARNING, logger="turngate.temporal_client"):
            state = await ensure_search_attributes(client)
    assert state.added == [] and state.missing == ALL
    cli, cloud = state.commands
    assert cli.startswith("temporal operator search-attribute create --namespace acme.a1b2c ")
    assert cloud.startswith("tcld namespace search-attributes add --namespace acme.a1b2c ")
    for name in ALL:
        assert f"--name {name} --type Keyword" in cli
        assert f"--search-attribute {name}=Keyword" in cloud
    assert cli in caplog.text and cloud in caplog.text  # the exact commands are logged


async def test_only_adding_refused_reports_just_the_missing_ones() -> None:
    with refusing_frontend(list_allowed=True, known=ALL[:4]) as address:
        client = await Client.connect(address)
        state = await ensure_search_attributes(client)
    assert state.missing == ALL[4:]
    assert all(name not in state.commands[0] for name in ALL[:4])


async def test_the_api_starts_anyway_and_status_lists_what_is_missing(tmp_path: Path) -> None:
    with refusing_frontend(list_allowed=False) as address:
        settings = make_settings(tmp_path, address)
        async with running_stack(settings, worker=False) as stack:
            status = (await stack.http.get("/status")).json()
        client = await connect(settings)
        assert client.namespace == "default"
    assert status["temporal"]["missing_search_attributes"] == ALL
    assert status["temporal"]["reachable"] is False  # visibility is refused too on this server
