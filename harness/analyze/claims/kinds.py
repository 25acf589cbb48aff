"""The claim kinds: each reads the canonical runs and returns its claims with the sentence the data
supports. Kinds of a step (`fn(ctx, pair)`) run once per pair of consecutive legs; kinds of the
study (`fn(ctx)`) once. Which kinds a study checks is `harness.analyze.claims.REGISTRY` with the
study's own `report.claims`."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from harness.analyze import stats
from harness.analyze.canonical import Canonical
from harness.analyze.verdicts import study_verdicts
from harness.analyze.tables import fmt_tok_s, ticked
from harness.analyze import wording as w
from harness.analyze.claims.base import (
    Claim, ClaimParams, Context, Pair, Step, below, cells_by_key, flat, model_class, models, pair_id, passes,
    steps, table_rows,
)

# --- kinds of a step between two legs -------------------------------------------------------------


def newly_running(ctx: Context, pair: Pair) -> list[Claim]:
    from harness.analyze.failure import attributions_by_model

    canon, old, new = ctx.canon, pair.old, pair.new
    ms = models(canon)
    back = [m for m in ms if passes(canon, new[0], m) and not passes(canon, old[0], m)]
    lost = [m for m in ms if passes(canon, old[0], m) and not passes(canon, new[0], m)]
    att = attributions_by_model(canon.dataset, series=canon.series)
    pinned = att[(att["leg"] == old[0]) & (att["status"] == "passes only pinned")]
    pins = sorted({p for ps in pinned["pins"] for p in ps})
    parts = []
    if back:
        parts.append(f"{w.n(len(back), 'model')} {w.v(len(back), 'runs', 'run')} on {new[1]} that "
                     f"{w.v(len(back), 'does', 'do')} not on {old[1]} "
                     f"({', '.join(map(ticked, back))})")
    if len(pinned):
        parts.append(f"{w.n(len(pinned), 'model')} {w.v(len(pinned), 'runs', 'run')} on {old[1]} only under a "
                     f"dependency pin "
                     f"({', '.join(f'`{p}`' for p in pins)})")
    if lost:
        parts.append(f"{w.n(len(lost), 'model')} {w.v(len(lost), 'runs', 'run')} on {old[1]} but not on {new[1]} "
                     f"({', '.join(map(ticked, lost))})")
    holds = bool(back or len(pinned))
    sentence = ("; ".join(parts) + ".") if parts else f"Every model runs on both {old[1]} and {new[1]}."
    sentence = w.cap(sentence)
    return [Claim(id=f"runs-at-all@{pair_id(old[1], new[1])}", group=f"{old[1]} → {new[1]}", holds=holds,
                  claim=f"on {old[1]}, some models do not run, or run only under a pin, that run on {new[1]}",
                  sentence=sentence,
                  evidence={"back": back, "lost": lost, "pinned": list(pinned["model"]), "pins": pins})]


def general(ctx: Context, pair: Pair) -> list[Claim]:
    rows, old, new, p = pair.rows, pair.old[1], pair.new[1], ctx.params
    if not rows:
        return []
    med = float(np.median([s.r for s in rows]))
    holds = flat(med, p)
    head = "not a general speedup" if holds else ("a general speedup" if med > 1 else "a general slowdown")
    sentence = (f"Across the {w.n(len(rows), 'throughput row')} measured on both legs it is {head}: the median "
                f"ratio is {w.x(med)}.")
    tested = [s.v for s in rows if s.v is not None and s.v.cls not in ("single pass", "missing")]
    if tested and not holds:
        # A median is not a verdict: say what the study's tests decided for the same rows.
        from harness.analyze.verdicts import step_sentence
        sentence = sentence[:-1] + f" (by its median; the tests: {step_sentence(tested).replace('(model, workload) cell', 'throughput row')})."
    return [Claim(id=f"no-general-speedup@{pair_id(old, new)}", group=f"{old} → {new}", holds=holds,
                  claim=f"{old} → {new} is not a general speedup (median throughput ratio within {p.band:.0%} of 1)",
                  sentence=sentence, evidence={"median": med, "rows": len(rows)})]


def _best_per_model(rows: Iterable[Step]) -> list[Step]:
    best: dict[str, Step] = {}
    for s in rows:
        if s.model not in best or s.r > best[s.model].r:
            best[s.model] = s
    return sorted(best.values(), key=lambda s: -s.r)


def single_jump(ctx: Context, pair: Pair) -> list[Claim]:
    rows, old, new, p = pair.rows, pair.old[1], pair.new[1], ctx.params
    if not rows:
        return []
    big = _best_per_model(s for s in rows if s.r >= p.jump)
    holds = len(big) == 1
    if holds:
        s = big[0]
        sentence = (f"The single large jump is {ticked(s.model)} {s.workload} at {w.x(s.r)} "
                    f"({fmt_tok_s(s.old)} → {fmt_tok_s(s.new)} tok/s).")
    elif big:
        sentence = (f"{w.n(len(big), 'model')} {w.v(len(big), 'gains', 'gain')} {p.jump:.1f}x or more: "
                    + w.names([f"{ticked(s.model)} {s.workload} at {w.x(s.r)}" for s in big]) + ".")
    else:
        top = max(rows, key=lambda s: s.r)
        sentence = (f"No model gains {p.jump:.1f}x or more; the largest ratio is {ticked(top.model)} {top.workload} "
                    f"at {w.x(top.r)}.")
    return [Claim(id=f"single-jump@{pair_id(old, new)}", group=f"{old} → {new}", holds=holds,
                  claim=f"exactly one model gains {p.jump:.1f}x or more from {old} to {new}", sentence=sentence,
                  evidence={"models": [s.model for s in big]})]


def winners(ctx: Context, pair: Pair) -> list[Claim]:
    rows, old, new, p = pair.rows, pair.old[1], pair.new[1], ctx.params
    if not rows:
        return []
    win = _best_per_model(s for s in rows if s.r >= p.win)
    holds = bool(win)
    if holds:
        sentence = ("The winners are " if len(win) > 1 else "The one winner is ") + w.names(
            [f"{ticked(s.model)} {s.workload} at {w.x(s.r)}" for s in win]) + "."
    else:
        sentence = f"No model gains {p.win:.1f}x or more from {old} to {new}."
    return [Claim(id=f"winners@{pair_id(old, new)}", group=f"{old} → {new}", holds=holds,
                  claim=f"some models gain {p.win:.1f}x or more from {old} to {new}", sentence=sentence,
                  evidence={"models": [s.model for s in win], "ratios": [s.r for s in win]})]


def _flat_class(rows: list[Step], cls: str, old: str, new: str, p: ClaimParams) -> Claim | None:
    mine = [s for s in rows if s.cls == cls]
    if not mine:
        return None
    out = [s for s in mine if not flat(s.r, p)]
    inside = [s.r for s in mine if flat(s.r, p)]
    holds = not out
    ci = [s for s in mine if s.ratio.low is not None]
    within = sum(1 for s in ci if s.ratio.low <= 1 <= (s.ratio.high or 0))
    ci_note = (f"; the 95% interval contains 1.00x on {within} of {len(ci)} rows" if ci else "")
    if holds:
        sentence = f"{w.cap(cls)} models are essentially flat ({w.span_range(inside)}{ci_note})."
    else:
        excepts = w.names([f"{ticked(s.model)} {s.workload} at {w.x(s.r)}" for s in out])
        rng = f" ({w.span_range(inside)})" if inside else ""
        sentence = (f"{w.cap(cls)} models are flat in {len(inside)} of {len(mine)} rows{rng}; "
                    f"not flat: {excepts}{ci_note}.")
    return Claim(id=f"flat-{cls.lower()}@{pair_id(old, new)}", group=f"{old} → {new}", holds=holds,
                 claim=f"{old} → {new} is flat on {cls} models (every throughput ratio within {p.band:.0%} of 1)",
                 sentence=sentence, evidence={"class": cls, "in_band": inside, "ci_note": ci_note,
                                              "out": [(s.model, s.workload, s.r) for s in out]})


def flat_classes(ctx: Context, pair: Pair) -> list[Claim]:
    """One claim per plain class (`report.model_classes.plain`): flat from one leg to the next."""
    plain = ctx.classes.plain if ctx.classes is not None else ()
    found = (_flat_class(pair.rows, cls, pair.old[1], pair.new[1], ctx.params) for cls in plain)
    return [c for c in found if c is not None]


# --- kinds of the whole study ---------------------------------------------------------------------


def reference_flat(ctx: Context) -> list[Claim]:
    """The first dense model's first throughput workload, across every leg."""
    canon, legs, p = ctx.canon, ctx.legs, ctx.params
    cells = cells_by_key(canon)
    for model, workload in table_rows(canon, "throughput"):
        if model_class(model, ctx.classes) != "dense":
            continue
        vals = [cells.get((leg, model, workload)) for leg, _ in legs]
        if any(v is None for v in vals):
            continue
        xs = [float(v["value"]) for v in vals]  # type: ignore[index]
        sp = max(xs) / min(xs) - 1
        shown = " / ".join(fmt_tok_s(x) for x in xs)
        holds = stats.flat_across(xs, p.band)
        if holds:
            sentence = (f"Plain dense {ticked(model)} ({workload}) lands within {sp:.1%} across "
                        f"{w.all_legs(len(legs))} ({shown} tok/s).")
        else:
            lo, hi = int(np.argmin(xs)), int(np.argmax(xs))
            sentence = (f"Plain dense {ticked(model)} ({workload}) is not flat across the legs: {shown} tok/s, "
                        f"{sp:.0%} between {legs[lo][1]} and {legs[hi][1]}.")
        return [Claim(id="reference-flat", group="across", holds=holds, sentence=sentence,
                      claim=f"the first dense model's throughput is flat (within {p.band:.0%}) across every leg",
                      evidence={"model": model, "workload": workload, "values": xs, "spread": sp})]
    return []


def regressions(canon: Canonical, legs: list[tuple[str, str]], p: ClaimParams) -> list[tuple[Step, int]]:
    """(step, index of its old leg) for every throughput step slower by more than the band, worst first."""
    found = []
    for i, ((a, _), (b, _)) in enumerate(zip(legs, legs[1:])):
        found += [(s, i) for s in steps(canon, a, b) if below(s.r, p)]
    return sorted(found, key=lambda t: t[0].r)


_MONOTONIC = "version progress is not monotonic (some row is slower on a newer leg by more than {band:.0%})"


def not_monotonic(ctx: Context) -> list[Claim]:
    canon, legs, p = ctx.canon, ctx.legs, ctx.params
    regs = regressions(canon, legs, p)
    if not regs:
        return [Claim(id="not-monotonic", group="progress", holds=False,
                      claim=_MONOTONIC.format(band=p.band),
                      sentence=(f"Version progress is monotonic in this data: no throughput row is slower on a "
                                f"newer leg by more than {p.band:.0%}."), evidence={"regressions": []})]
    s, i = regs[0]
    a, b = legs[i][1], legs[i + 1][1]
    sentence = (f"Version progress is not monotonic. {ticked(s.model)} is slower on {b} than on {a} "
                f"({s.workload} {fmt_tok_s(s.old)} → {fmt_tok_s(s.new)}, i.e. {w.x(s.r)})")
    cells = cells_by_key(canon)
    after = [(lb, cells.get((leg, s.model, s.workload))) for leg, lb in legs[i + 2:]]
    after = [(lb, float(c["value"])) for lb, c in after if c is not None]
    if after:
        back = next(((lb, v) for lb, v in after if v >= s.old), None)
        if back:
            sentence += f" and is back above {a} only on {back[0]} ({fmt_tok_s(back[1])})"
        else:
            lb, v = after[-1]
            sentence += f" and is still below {a} on {lb} ({fmt_tok_s(v)})"
    sentence += "."
    if len(regs) > 1:
        sentence += (f" {w.n(len(regs), 'throughput row')} in all are slower on a newer leg by more than "
                     f"{p.band:.0%}: "
                     + w.names([f"{ticked(t.model)} {t.workload} {legs[j][1]} → {legs[j + 1][1]} {w.x(t.r)}"
                                for t, j in regs]) + ".")
    return [Claim(id="not-monotonic", group="progress", holds=True, sentence=sentence,
                  claim=_MONOTONIC.format(band=p.band),
                  evidence={"regressions": [(t.model, t.workload, legs[j][1], legs[j + 1][1], t.r)
                                            for t, j in regs]})]


def regression_repeated(ctx: Context) -> list[Claim]:
    canon, legs, p, others = ctx.canon, ctx.legs, ctx.params, ctx.others
    regs = regressions(canon, legs, p)
    if not regs:
        return []
    s, i = regs[0]
    (a, alb), (b, blb) = legs[i], legs[i + 1]
    for name, c in others.items():
        sa, sb = c.samples(a, s.model, s.workload), c.samples(b, s.model, s.workload)
        if len(sa) < 2 or len(sb) < 2:
            continue
        # That series' verdict for the cell, as its own tables print it (harness.analyze.verdicts).
        v = study_verdicts(c).get(s.kind, s.model, s.workload, a, b)
        rt = v.test if v is not None else None
        if rt is None or rt.low is None or rt.high is None or rt.value is None:
            continue
        holds = v.verdict == "slower"
        where = "in the main series" if name == canon.series else f"(series `{name}`)"
        times = f"{len(sa)} times" if len(sa) == len(sb) else f"{len(sa)} / {len(sb)} times"
        sp = f"repeat spread {rt.spread_old:.1%} on {alb} and {rt.spread_new:.1%} on {blb}"
        gap = 1 / rt.value - 1 if rt.value else float("nan")
        ci = f"{w.x(rt.value)} [{rt.low:.2f}, {rt.high:.2f}]"
        if holds:
            sentence = (f"This one has been measured {times} per leg {where} and it holds: "
                        f"{s.workload} {ci}, {sp}, against a gap of {gap:.0%}.")
        else:
            sentence = (f"Measured {times} per leg {where}, it does not hold up: "
                        f"{s.workload} {ci}, {v.text}.")
        if name != canon.series:
            dev = [abs(float(np.median(x)) / v - 1) for x, v in ((sa, s.old), (sb, s.new))]
            sentence += f" The repeat medians lie within {max(dev):.1%} of the main table's figures."
        return [Claim(id="regression-repeated", group="progress", holds=holds, sentence=sentence,
                      claim=f"the largest regression ({s.model} {s.workload}, {alb} → {blb}) holds under repeated "
                            f"measurement (95% CI below 1)",
                      evidence={"series": name, "ratio": rt.value, "low": rt.low, "high": rt.high,
                                "spread": (rt.spread_old, rt.spread_new), "gap": gap})]
    return [Claim(id="regression-repeated", group="progress", holds=False,
                  claim=(f"the largest regression ({s.model} {s.workload}, {alb} → {blb}) holds under repeated "
                         f"measurement"),
                  sentence=("It has not been measured more than once per leg, so whether it holds is open: a single "
                            "pass per side carries no interval."), evidence={})]


def newest_lowest(ctx: Context) -> list[Claim]:
    canon, legs, p = ctx.canon, ctx.legs, ctx.params
    if len(legs) < 3:
        return []
    cells = cells_by_key(canon)
    found = []
    for model, workload in table_rows(canon, "throughput"):
        cs = [cells.get((leg, model, workload)) for leg, _ in legs]
        if any(c is None for c in cs):
            continue
        xs = [float(c["value"]) for c in cs]  # type: ignore[index]
        if stats.flat_across(xs, p.band) and xs[-1] < min(xs[:-1]):
            found.append((model, workload, xs))
    if not found:
        return []
    parts = [f"{ticked(m)} {wl} is flat across {w.all_legs(len(legs))} ({' / '.join(fmt_tok_s(x) for x in xs)}), "
             f"with {legs[-1][1]} marginally lowest" for m, wl, xs in found]
    return [Claim(id="newest-lowest", group="progress", holds=True, sentence="; ".join(parts) + ".",
                  claim="some rows are flat across every leg with the newest leg lowest",
                  evidence={"rows": [(m, wl) for m, wl, _ in found]})]
