"""The node lock's typed refusal and the one wait on it (harness.measure.lock); real file locks under tmp_path."""

from __future__ import annotations

import threading
import time

import pytest

from harness.core.errors import NodeBusyError, UserError
from harness.measure import guard, lock


@pytest.fixture
def lock_file(tmp_path, monkeypatch):
    path = tmp_path / "measure.lock"
    monkeypatch.setenv("HARNESS_LOCK", str(path))
    return path


def test_a_busy_node_lock_is_a_typed_user_error(lock_file):
    with guard.node_lock():
        with pytest.raises(NodeBusyError) as got:
            with guard.node_lock():
                pass
    e = got.value
    assert isinstance(e, UserError) and e.lock == lock_file
    assert "another sweep is measuring on this node" in str(e) and '"pid"' in e.holder


def test_the_wait_retries_while_busy_says_so_once_then_gives_up(lock_file):
    said: list[str] = []
    calls = []

    def busy():
        calls.append(1)
        raise NodeBusyError(lock_file, "pid 1")

    t0 = time.monotonic()
    with pytest.raises(NodeBusyError):
        lock.while_busy(busy, wait_s=0.3, poll_s=0.05, say=said.append)
    assert time.monotonic() - t0 >= 0.3 and len(calls) >= 3
    assert len(said) == 1 and said[0].startswith("waiting for the node lock (up to 0 s): ")


def test_the_wait_does_not_retry_other_errors_whatever_their_text(lock_file):
    calls = []

    def refused():
        calls.append(1)
        raise UserError("another sweep is measuring (but this is a different refusal)")

    with pytest.raises(UserError, match="different refusal"):
        lock.while_busy(refused, wait_s=10, poll_s=0.05, say=lambda _: None)
    assert calls == [1]


def test_waiting_node_lock_takes_the_lock_once_it_is_released(lock_file):
    held, release = threading.Event(), threading.Event()

    def holder():
        with guard.node_lock():
            held.set()
            release.wait(5)

    th = threading.Thread(target=holder)
    th.start()
    held.wait(5)
    threading.Timer(0.3, release.set).start()
    said: list[str] = []
    with lock.waiting_node_lock(10, poll_s=0.05, say=said.append) as path:
        assert path == lock_file
        with pytest.raises(NodeBusyError):  # held by this block now
            with guard.node_lock():
                pass
    th.join()
    assert len(said) == 1
