"""Prebuilt legs (an interpreter that already has vLLM, as on the H200 image): resolving one whose
interpreter lacks its release is a leg-env error, which a dry run lists and a bisect skips. The
interpreter here is the project's own, which has no vLLM: a stand-in, not a GPU machine."""

from __future__ import annotations

import sys

import pytest

from harness.core.errors import LegEnvError
from harness.measure import leg as legmod


def _spec(version: str) -> legmod.LegSpec:
    return legmod.LegSpec(name="h200-0.26.0", label="0.26", device="cuda", python="3.11", vllm_dist="vllm",
                          vllm_version=version, prebuilt_python=sys.executable)


def test_prebuilt_python_without_its_release_is_a_leg_env_error():
    with pytest.raises(LegEnvError) as e:
        legmod.resolve(_spec("0.26.0"))
    msg = str(e.value)
    assert "h200-0.26.0.yaml: leg h200-0.26.0: check prebuilt python failed" in msg
    assert f"prebuilt python {sys.executable} does not have vllm==0.26.0" in msg and "\n" not in msg


def test_prebuilt_python_with_its_release_resolves_to_its_freeze():
    # pydantic is in the project's interpreter: a "leg" whose dist is pydantic resolves from the freeze.
    import pydantic

    spec = _spec(pydantic.VERSION).model_copy(update={"vllm_dist": "pydantic"})
    env = legmod.resolve(spec)
    assert f"pydantic=={pydantic.VERSION}" in env.lock.splitlines() and env.compat_id
