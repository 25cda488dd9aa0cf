"""StorageDeadline: bounded attempts under one overall deadline (real threads, real sleeps)."""

from __future__ import annotations

import threading
import time

import pytest

from turngate.artifacts import ArtifactUnavailableError
from turngate.artifacts.deadline import StorageDeadline


def test_transient_failures_are_retried_until_one_succeeds() -> None:
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ArtifactUnavailableError("HTTP 500")
        return "stored"

    deadline = StorageDeadline(10)
    assert deadline.call("manifest", flaky) == "stored"
    assert deadline.attempts == 3


def test_a_permanent_failure_is_not_retried() -> None:
    deadline = StorageDeadline(10)

    def denied() -> None:
        raise ArtifactUnavailableError("AccessDenied (HTTP 403)", retryable=False)

    with pytest.raises(ArtifactUnavailableError, match="AccessDenied") as caught:
        deadline.call("manifest", denied)
    assert deadline.attempts == 1 and not caught.value.retryable


def test_transient_failures_past_the_deadline_end_as_permanent() -> None:
    def failing() -> None:
        raise ArtifactUnavailableError("HTTP 503")

    started = time.monotonic()
    with pytest.raises(ArtifactUnavailableError, match="deadline of 1 s passed") as caught:
        StorageDeadline(1).call("manifest", failing)
    assert not caught.value.retryable
    assert "HTTP 503" in str(caught.value)
    assert time.monotonic() - started < 1 + 2.5  # at most one backoff step past it


def test_a_call_that_never_returns_is_abandoned_at_the_deadline() -> None:
    release = threading.Event()
    started = time.monotonic()
    with pytest.raises(ArtifactUnavailableError, match="did not answer"):
        StorageDeadline(0.5).call("manifest", lambda: release.wait(30))
    assert time.monotonic() - started < 5
    release.set()


def test_an_attempt_cut_off_by_the_deadline_still_names_the_failure_before_it() -> None:
    release = threading.Event()
    calls: list[int] = []

    def fails_then_hangs() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise ArtifactUnavailableError("InternalError (HTTP 500)")
        release.wait(30)

    with pytest.raises(ArtifactUnavailableError) as caught:
        StorageDeadline(0.8).call("manifest", fails_then_hangs)
    release.set()
    assert "did not answer; before that: InternalError (HTTP 500)" in str(caught.value)


def test_check_fails_only_once_the_deadline_passed() -> None:
    now = [100.0]
    deadline = StorageDeadline(2, clock=lambda: now[0])
    now[0] = 101.99
    deadline.check("artifacts")
    now[0] = 102.0
    with pytest.raises(ArtifactUnavailableError, match="too late"):
        deadline.check("artifacts")


def test_other_errors_pass_through_unretried() -> None:
    deadline = StorageDeadline(10)
    with pytest.raises(ValueError, match="bad pack"):
        deadline.call("prompt snapshot", lambda: (_ for _ in ()).throw(ValueError("bad pack")))
    assert deadline.attempts == 1


def test_the_deadline_setting_is_bounded() -> None:
    from pydantic import ValidationError

    from turngate.settings import load_settings

    assert load_settings().artifact_deadline_s == 15.0
    assert load_settings(artifact_deadline_s=60).artifact_deadline_s == 60
    assert load_settings(artifact_deadline_s=0.001).artifact_deadline_s == 0.001
    for bad in (60.001, 0, -1):
        with pytest.raises(ValidationError):
            load_settings(artifact_deadline_s=bad)


def test_the_worker_boundary_carries_the_deadline() -> None:
    from turngate.settings import load_settings
    from turngate.worker.boundary import load_boundary

    assert load_boundary(load_settings(artifact_deadline_s=7.5)).artifact_deadline_s == 7.5
