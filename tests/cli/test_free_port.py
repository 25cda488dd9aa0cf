"""`free_port` picks the ports the test and bench launchers hand to child processes (`turngate
dev`, the Temporal dev server): below the kernel's ephemeral range, which outgoing connections
take their local ports from, so none of those can take a port between the pick and the bind."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from turngate import devserver
from turngate.devserver import PICKED_PORTS_FROM, free_port

#: where this machine's kernel starts handing out ports (its own choice lies at or above it)
KERNEL_RANGE_START = devserver._ephemeral_ports_start()


def _range_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, start: int) -> None:
    path = tmp_path / "ip_local_port_range"
    path.write_text(f"{start}\t60999\n")
    monkeypatch.setattr(devserver, "_EPHEMERAL_RANGE_FILE", path)


def test_a_picked_port_is_below_the_ephemeral_range_and_bindable() -> None:
    start = devserver._ephemeral_ports_start()
    for _ in range(20):
        port = free_port()
        assert PICKED_PORTS_FROM <= port < start
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


@pytest.mark.parametrize(
    ("start", "lowest", "highest"),
    [
        (PICKED_PORTS_FROM + 2, PICKED_PORTS_FROM, PICKED_PORTS_FROM + 1),
        (PICKED_PORTS_FROM + 1, KERNEL_RANGE_START, 65535),
    ],
    ids=["room-for-two", "no-room-kernel-picks"],
)
def test_the_range_boundary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, start: int, lowest: int, highest: int
) -> None:
    """Ports from PICKED_PORTS_FROM up to just under the ephemeral range; with no room there,
    the kernel's choice."""
    _range_file(tmp_path, monkeypatch, start)
    for _ in range(10):
        assert lowest <= free_port() <= highest


def test_a_taken_port_is_never_picked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Room for two ports, one of them listened on: the other one every time."""
    _range_file(tmp_path, monkeypatch, PICKED_PORTS_FROM + 2)
    with socket.socket() as taken:
        try:
            taken.bind(("127.0.0.1", PICKED_PORTS_FROM))
        except OSError:
            pytest.skip(f"port {PICKED_PORTS_FROM} is in use on this machine")
        taken.listen()
        assert {free_port() for _ in range(10)} == {PICKED_PORTS_FROM + 1}


def test_an_unreadable_range_file_means_the_usual_range(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(devserver, "_EPHEMERAL_RANGE_FILE", tmp_path / "missing")
    assert devserver._ephemeral_ports_start() == 32768
    assert PICKED_PORTS_FROM <= free_port() < 32768
