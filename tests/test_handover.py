"""The front-end clock of a pass (harness/measure/worker/handover.py) on a STAND-IN LLM object: its
entry points hand requests to an `llm_engine.add_request` one by one, then wait, as vLLM's do. The
real engine's split is checked in test_crosscheck_one_engine's real one-engine block."""

from __future__ import annotations

import time

import pytest

from tests.conftest import worker_module

handover = worker_module("handover.py", "worker_handover")


class Engine:
    def __init__(self) -> None:
        self.added: list[str] = []

    def add_request(self, request_id: str) -> str:
        time.sleep(0.002)  # input processing
        self.added.append(request_id)
        return request_id


class StandInLLM:
    """generate: prepare 2 ms, hand each request over (2 ms each), then the engine's 30 ms; chat
    renders each prompt (5 ms) and then calls generate, as older vLLMs' chat did."""

    def __init__(self) -> None:
        self.llm_engine = Engine()

    def generate(self, prompts: list[str]) -> list[str]:
        for p in prompts:
            self.llm_engine.add_request(p)
        time.sleep(0.03)
        return prompts

    def chat(self, prompts: list[str]) -> list[str]:
        time.sleep(0.005 * len(prompts))
        return self.generate(prompts)

    def boom(self) -> None:
        self.llm_engine.add_request("x")
        raise RuntimeError("engine died")


def test_each_outermost_call_splits_at_its_last_request_handed_over():
    llm = StandInLLM()
    with handover.Clock(llm) as clock:
        llm.generate(["a", "b", "c"])
        llm.chat(["d", "e"])          # its inner generate is not a call of its own
    s = clock.summary()
    assert s["requests"] == 5 and len(clock.calls) == 2
    assert s["handover_s"] + s["tail_s"] == pytest.approx(s["call_s"])
    assert 0.010 <= s["add_s"] <= s["handover_s"]          # five adds of 2 ms, inside the handover
    assert s["handover_s"] - s["add_s"] >= 0.010            # chat's rendering, before its adds
    assert 0.060 <= s["tail_s"] < s["call_s"]              # two engine waits of 30 ms
    last = clock.summary(last_only=True)
    assert last["requests"] == 2 and last["call_s"] < s["call_s"]


def test_the_instance_is_restored_and_nothing_is_split_outside_a_call():
    llm = StandInLLM()
    with pytest.raises(RuntimeError), handover.Clock(llm) as clock:
        llm.llm_engine.add_request("outside")                # no entry point around it: not counted
        llm.boom()
    assert "generate" not in vars(llm) and "chat" not in vars(llm) and "add_request" not in vars(llm.llm_engine)
    assert clock.summary() is None                           # boom is no entry point: no call split
    with handover.Clock(object()) as bare:                   # an LLM without these names: nothing patched
        pass
    assert bare.summary() is None
