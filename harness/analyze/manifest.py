"""MANIFEST.md: the runtime stack each leg was measured under, as the canonical runs recorded it.

A "version comparison" compares whole runtime stacks, so every distinct version seen within a leg is
listed with how many models ran under it; a leg measured under more than one version of anything
is flagged non-homogeneous. Versions a record does not hold print "not recorded".
"""

from __future__ import annotations

import re

import pandas as pd

from harness.analyze.canonical import Canonical, provenance_note
from harness.analyze.fmt import markdown_table
from harness.analyze.order import _legs, model_order

NOT_RECORDED = "not recorded"

# (column in the canonical cells, heading, distribution a pin of it names)
PACKAGES: tuple[tuple[str, str, str | None], ...] = (
    ("vllm", "vllm", "vllm"),
    ("torch", "torch", "torch"),
    ("torch_cuda", "CUDA", None),
    ("transformers", "transformers", "transformers"),
    ("cutlass", "nvidia-cutlass-dsl", "nvidia-cutlass-dsl"),
)


def _pinned(pins: tuple[str, ...], dist: str | None) -> bool:
    return dist is not None and any(re.split(r"[<>=!~ ;\[]", p, maxsplit=1)[0].strip().lower() == dist
                                    for p in pins)


def versions(canon: Canonical) -> pd.DataFrame:
    """One row per (leg, package, version): the models measured under it and whether a pin chose it.

    Counted over the canonical runs; a model counts under every version its runs recorded.
    """
    rows = []
    cells = canon.cells
    for leg, label in _legs(canon):
        c = cells[cells["leg"] == leg]
        for col, heading, dist in PACKAGES:
            groups: dict[str, dict] = {}
            for r in c.itertuples():
                v = getattr(r, col)
                key = NOT_RECORDED if v is None or (isinstance(v, float) and pd.isna(v)) else str(v)
                g = groups.setdefault(key, {"models": [], "pinned": False})
                if r.model not in g["models"]:
                    g["models"].append(r.model)
                g["pinned"] |= _pinned(r.pins, dist)
            for v, g in groups.items():
                rows.append({"leg": leg, "label": label, "package": heading, "version": v,
                             "models": len(g["models"]), "model_names": tuple(g["models"]), "pinned": g["pinned"]})
    return pd.DataFrame(rows, columns=["leg", "label", "package", "version", "models", "model_names", "pinned"])


def _plural(n: int) -> str:
    return f"{n} model{'s' if n != 1 else ''}"


def stack_table(canon: Canonical) -> pd.DataFrame:
    """The "Runtime stack per leg" table as printed: one row per leg, one column per package."""
    v = versions(canon)
    order = {m: i for i, m in enumerate(model_order(canon.dataset))}
    rows = []
    for leg, label in _legs(canon):
        row: dict[str, str] = {"leg": label}
        mixed = []
        for _, heading, _ in PACKAGES:
            g = v[(v["leg"] == leg) & (v["package"] == heading)]
            # The leg's own resolution first, pinned versions after it, larger groups first.
            g = g.assign(_nr=g["version"] == NOT_RECORDED).sort_values(["_nr", "pinned", "models", "version"],
                                                                       ascending=[True, True, False, True])
            if len(g) == 0:
                row[heading] = NOT_RECORDED
            elif len(g) == 1:
                row[heading] = g["version"].iloc[0]
            else:
                parts = []
                for r in g.itertuples():
                    names = sorted(r.model_names, key=lambda m: (order.get(m, len(order)), m))
                    who = f"1 model: `{names[0]}`" if r.models == 1 else _plural(r.models)
                    parts.append(f"{r.version} ({who})")
                row[heading] = " → ".join(parts)
                if (g["version"] != NOT_RECORDED).sum() > 1:
                    mixed.append(heading)
        row["homogeneous"] = "yes" if not mixed else "no: " + ", ".join(mixed)
        rows.append(row)
    return pd.DataFrame(rows)


def devices_table(canon: Canonical) -> pd.DataFrame:
    cells = canon.cells
    rows = []
    for leg, label in _legs(canon):
        c = cells[cells["leg"] == leg]
        devs = list(dict.fromkeys(str(d) for d in c["device"].dropna()))
        hosts = list(dict.fromkeys(str(h) for h in c["host"].dropna()))
        rows.append({"leg": label, "device": " / ".join(devs) or NOT_RECORDED,
                     "hosts": " / ".join(hosts) or NOT_RECORDED})
    return pd.DataFrame(rows)


def patches_md(canon: Canonical) -> list[str]:
    """The extras and patches a leg's venv had on top of its lock (environment/legs/*.yaml), as its
    canonical runs' manifests recorded them."""
    cells = canon.cells
    if "leg_patches" not in cells:
        return []
    lines: list[str] = []
    for leg, label in _legs(canon):
        c = cells[cells["leg"] == leg]
        extras = sorted({x for xs in c["leg_extras"] for x in xs})
        patches = sorted({x for xs in c["leg_patches"] for x in xs})
        if extras or patches:
            lines.append(f"- **{label}**: " + "; ".join(
                [f"extra `{x}`" for x in extras] + [f"patch `{x}` (environment/patches/)" for x in patches]))
    return ["## Extras and patches on top of the lock", "", *lines, ""] if lines else []


def manifest_md(canon: Canonical) -> str:
    """MANIFEST.md: runtime stack per leg, non-homogeneous legs, devices, and the pins in use."""
    lines = [f"# Manifest — {canon.study.title or canon.study.name}", ""]
    note = provenance_note(canon)
    if note:
        lines += [f"**{note}**", ""]
    lines += ["## Runtime stack per leg", "",
              "Counted over the canonical runs (CANONICAL.md). Where a leg ran under more than one version, "
              "each is listed with the models that ran under it: the leg's own resolution first, pinned "
              "versions after.", ""]
    st = stack_table(canon)
    lines += [markdown_table(st), ""]
    flagged = st[st["homogeneous"] != "yes"]
    if len(flagged):
        lines += ["## Non-homogeneous legs", ""]
        v = versions(canon)
        order = {m: i for i, m in enumerate(model_order(canon.dataset))}
        for r in flagged.itertuples():
            lines.append(f"- **{r.leg}** was measured under more than one {r.homogeneous.removeprefix('no: ')}:")
            for pkg in r.homogeneous.removeprefix("no: ").split(", "):
                g = v[(v["label"] == r.leg) & (v["package"] == pkg) & (v["version"] != NOT_RECORDED)]
                for x in g.itertuples():
                    pinned = " (pinned)" if x.pinned else ""
                    names = sorted(x.model_names, key=lambda m: (order.get(m, len(order)), m))
                    lines.append(f"  - {pkg} {x.version}{pinned}: " + ", ".join(f"`{m}`" for m in names))
        lines.append("")
    lines += ["## Devices and hosts", "", markdown_table(devices_table(canon)), ""]
    lines += patches_md(canon)
    pins = canon.cells[canon.cells["pins"].map(len) > 0]
    if len(pins):
        lines += ["## Pins", ""]
        for (leg, model), g in pins.groupby(["leg_label", "model"], sort=False):
            lines.append(f"- {leg} `{model}`: " + ", ".join(f"`{p}`" for p in sorted({p for ps in g['pins'] for p in ps})))
        lines.append("")
    return "\n".join(lines)
