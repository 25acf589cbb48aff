"""Which releases a bisect searches, and the leg each one is measured on.

The releases between the good and the bad leg come from the package index, or are given
(`harness search bisect --versions`) on a machine that cannot reach an index (an offline GPU host). Either
way they are ordered from the good side to the bad side, and a given one must lie strictly between
the two legs' releases: a release outside that range is no step of the search.

A release's leg:
- a leg uv builds: the good leg's stack with only the vLLM release changed (`derived_leg`), which is
  the release's own reviewed leg file when that file names the same stack;
- a prebuilt leg (vLLM installed into a folder of its own beside the machine image's interpreter):
  the release's own reviewed leg file, named like the good leg with the release in place of its own
  (`h200-0.24.0` -> `h200-0.25.0`). The folder on PYTHONPATH is where that release lives, so the
  good leg's stack "with only the release changed" would measure the good leg's vLLM again; without
  a file the release has no leg, and is skipped with that reason rather than measured on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from packaging.version import InvalidVersion, Version

from harness.core.errors import UserError
from harness.measure import leg as legmod
from harness.measure.leg import LegSpec

# What a derived leg changes, and what a reviewed leg file of the same stack may say differently.
STACK_FIELDS = frozenset({"name", "label", "description", "vllm_version"})
# A prebuilt leg's folder on PYTHONPATH holds its release: it differs between releases as they do.
PREBUILT_FIELDS = STACK_FIELDS | {"pythonpath"}


def kind_name(template: LegSpec, version: str) -> str:
    """The template's name with `version` in place of its release (`cpu-0.27.1` -> `cpu-0.29.0`)."""
    if template.name.endswith(template.vllm_version):
        return template.name[: -len(template.vllm_version)] + version
    return f"{template.name}-as-{version}"


def derived_leg(template: LegSpec, version: str) -> LegSpec:
    """`template` with only the vLLM release changed; named like the template (`cpu-0.29.0`)."""
    name = kind_name(template, version)
    derived = template.model_copy(update={
        "name": name, "label": version, "vllm_version": version,
        "description": f"{template.vllm_dist}=={version} on leg {template.name}'s stack (derived by bisect)"})
    if name in legmod.known_legs():
        known = legmod.load_leg(name)
        if known.model_dump(exclude=STACK_FIELDS) == derived.model_dump(exclude=STACK_FIELDS):
            return known  # the same stack already has a reviewed leg file: use its name and label
        derived = derived.model_copy(update={"name": f"{name}+bisect"})
    return derived


def releases_between(good: LegSpec, bad: LegSpec, on_index: Sequence[Version]) -> list[str]:
    """Index releases strictly between the two, ordered from the good side to the bad side."""
    g, b = Version(good.vllm_version), Version(bad.vllm_version)
    lo, hi = min(g, b), max(g, b)
    between = sorted(v for v in on_index if lo < v < hi)
    return [str(v) for v in (between if g < b else reversed(between))]


def given_between(good: LegSpec, bad: LegSpec, given: Sequence[str]) -> list[str]:
    """The releases given on the command line, checked and in search order (good side first)."""
    seen: dict[Version, str] = {}
    for text in given:
        try:
            v = Version(text)
        except InvalidVersion:
            raise UserError(f"--versions: {text!r} is not a version") from None
        if v in seen:
            raise UserError(f"--versions: {text!r} is given twice (as {seen[v]!r} too)")
        seen[v] = text
    g, b = Version(good.vllm_version), Version(bad.vllm_version)
    lo, hi = min(g, b), max(g, b)
    outside = [seen[v] for v in seen if not lo < v < hi]
    if outside:
        verb = "is" if len(outside) == 1 else "are"
        raise UserError(f"--versions: {', '.join(outside)} {verb} not strictly between the good leg {good.name}'s "
                        f"release {good.vllm_version} and the bad leg {bad.name}'s {bad.vllm_version}")
    return releases_between(good, bad, list(seen))


def stack_differences(reference: LegSpec, other: LegSpec) -> list[str]:
    """The fields in which `other` differs from `reference` beyond its release (and, when both are
    prebuilt, the folder that holds it)."""
    keep = PREBUILT_FIELDS if reference.prebuilt_python and other.prebuilt_python else STACK_FIELDS
    a, b = reference.model_dump(exclude=keep), other.model_dump(exclude=keep)
    return sorted(k for k in a if a[k] != b[k])


def _reviewed_prebuilt(good: LegSpec, version: str) -> LegSpec | None:
    name = kind_name(good, version)
    if name not in legmod.known_legs():
        return None
    leg, path = legmod.load_leg(name), legmod.leg_path(name)
    if Version(leg.vllm_version) != Version(version):
        raise UserError(f"{path}: vllm_version is {leg.vllm_version}, not {version} as the leg's name says")
    if not leg.prebuilt_python or (leg.device, leg.vllm_dist) != (good.device, good.vllm_dist):
        raise UserError(f"{path}: not a prebuilt {good.device} leg of {good.vllm_dist} like the good leg "
                        f"{good.name}, so it cannot stand for release {version} in a bisect from it")
    return leg


@dataclass(frozen=True)
class ReleaseLegs:
    legs: dict[str, LegSpec]                                        # version -> its leg
    missing: dict[str, tuple[str, str]] = field(default_factory=dict)  # version -> (leg name, why none)
    notes: list[str] = field(default_factory=list)

    def names(self, order: Sequence[str]) -> dict[str, str]:
        """version -> leg name in `order`, measured or not (a missing leg by the name it would have)."""
        return {v: self.legs[v].name if v in self.legs else self.missing[v][0] for v in order}


def release_legs(good: LegSpec, bad: LegSpec, between: Sequence[str]) -> ReleaseLegs:
    """A leg for every release between `good` and `bad`, or the reason there is none; plus notes on
    legs that differ from the good one in more than the release."""
    legs: dict[str, LegSpec] = {good.vllm_version: good, bad.vllm_version: bad}
    missing: dict[str, tuple[str, str]] = {}
    derived: list[str] = []
    for v in between:
        if not good.prebuilt_python:
            legs[v] = derived_leg(good, v)
            if legs[v].name not in legmod.known_legs():
                derived.append(v)
            continue
        leg = _reviewed_prebuilt(good, v)
        if leg is None:
            name = kind_name(good, v)
            missing[v] = (name, f"no leg file {legmod.leg_path(name)}: a release of the prebuilt leg {good.name} "
                                f"needs a leg of its own (its vLLM sits in a folder of its own)")
        else:
            legs[v] = leg
    notes = []
    differ = stack_differences(good, bad)
    if differ:
        tail = ("; the releases between without a leg file of their own are measured on the good leg's stack"
                if derived else "")
        notes.append(f"the good and bad legs differ in more than the vLLM release ({', '.join(differ)}){tail}")
    for v in between:
        if v in legs and v not in derived and (d := stack_differences(good, legs[v])):
            notes.append(f"leg {legs[v].name} ({v}) differs from the good leg in more than the vLLM release "
                         f"({', '.join(d)})")
    return ReleaseLegs(legs=legs, missing=missing, notes=notes)
