"""A/A sweeps: two (or more) leg names that resolve to one and the same stack.

An A/A measures one release against itself under two names (environment/legs/cpu-0.32.0.yaml and
cpu-0.32.0-aa.yaml differ only in their name): whatever the tables call faster or slower there is a
false call. The sweep finds such legs from what it actually resolved, not from the leg files' names:
two legs are one stack when, for every (model, arm) the sweep measures, their envs have the same
resolved lock, the same declared additions (extras, patches by content hash), the same environment
variables, device, Python and vLLM release, plugins allowed and prebuilt interpreter. Their names, labels and descriptions may
differ. The sweep prints it and records it in study.yaml as `aa` (harness.schema.study.AAGroup): one
entry per group of legs that are one stack, with the sha256 of the lock they share and of the whole
stack key (every (model, arm) env's).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from harness.core.errors import UserError
from harness.measure.leg import LegEnv


def lock_digest(env: LegEnv) -> str:
    return hashlib.sha256(env.lock.encode()).hexdigest()


def stack_key(env: LegEnv) -> str:
    """Everything of an env that could make its engine behave differently, names and labels left out."""
    leg = env.leg
    what = {"lock": env.lock, "additions": list(env.additions), "env": dict(sorted(leg.env.items())),
            "device": leg.device, "python": leg.python, "vllm": [leg.vllm_dist, leg.vllm_version], "allowed_plugins": sorted(leg.allowed_plugins),
            "prebuilt_python": leg.prebuilt_python, "pythonpath": list(leg.pythonpath)}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


def aa_groups(envs: Mapping[tuple[str, str, str], LegEnv], legs: list[str]) -> list[dict[str, object]]:
    """Groups (two legs or more, in sweep order) whose envs are one stack for every (model, arm):
    [{"legs": [...], "lock_sha256": ...}]. `envs` is keyed (leg, model, arm), as sweep.resolve_envs gives."""
    per_leg: dict[str, tuple[tuple[str, str, str], ...]] = {}
    for ln in legs:
        keys = sorted((m, a, stack_key(e)) for (l, m, a), e in envs.items() if l == ln)
        per_leg[ln] = tuple(keys)
    groups: dict[tuple[tuple[str, str, str], ...], list[str]] = {}
    for ln in legs:
        if per_leg[ln]:
            groups.setdefault(per_leg[ln], []).append(ln)
    out = []
    for members in groups.values():
        if len(members) < 2:
            continue
        # The lock every member shares; with several (model, arm) envs, the first (model, arm)'s.
        first = next(e for (l, _, _), e in sorted(envs.items()) if l == members[0])
        stack = hashlib.sha256(json.dumps(per_leg[members[0]]).encode()).hexdigest()
        out.append({"legs": members, "lock_sha256": lock_digest(first), "stack_sha256": stack})
    return out


def planned_groups(planned: list) -> list[dict[str, object]]:
    """aa_groups over a sweep's planned runs (harness.measure.sweep.PlannedRun), legs in plan order."""
    envs = {(p.spec.leg_env.leg.name, p.spec.model.name, p.spec.arm.name): p.spec.leg_env for p in planned}
    return aa_groups(envs, list(dict.fromkeys(k[0] for k in envs)))


def say_aa(groups: list[dict[str, object]]) -> list[str]:
    """What the sweep prints about its A/A groups (nothing when there are none)."""
    return [f"A/A: legs {', '.join(g['legs'])} resolve to one stack (lock sha256 {str(g['lock_sha256'])[:12]}): "  # type: ignore[arg-type]
            "no difference between them is real; the study records it as `aa` in study.yaml" for g in groups]


def merge_aa(path: str, recorded: object, groups: list[dict[str, object]]) -> list[dict[str, object]] | None:
    """study.yaml's `aa` after this sweep: the groups recorded before plus this sweep's. A leg recorded in
    a group whose lock this sweep resolves differently is refused: the study's A/A claim would be stale."""
    before = [dict(g) for g in recorded] if isinstance(recorded, list) else []
    for g in groups:
        for old in before:
            shared = set(old.get("legs", [])) & set(g["legs"])  # type: ignore[arg-type]
            if shared and old.get("stack_sha256") != g["stack_sha256"]:
                raise UserError(f"{path}: aa: legs {', '.join(sorted(shared))} were recorded as one stack "
                                f"({str(old.get('stack_sha256'))[:12]}); this sweep resolves them to "
                                f"{str(g['stack_sha256'])[:12]}: measure into a new study")
        same = next((old for old in before if old.get("stack_sha256") == g["stack_sha256"]), None)
        if same is None:
            before.append(dict(g))
        else:
            same["legs"] = list(dict.fromkeys([*same["legs"], *g["legs"]]))  # type: ignore[misc]
    return before or None
