"""The study as the report's cells see it: the canonical runs, every series, the study's report
configuration (`study.yaml` `report:`, `harness.schema.report_config`) and the checked claims."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from harness.analyze.canonical import Canonical, canonicalize
from harness.analyze.dataset import Dataset, load
from harness.core import paths
from harness.core.errors import InvalidFileError
from harness.analyze.claims import REGISTRY, Claim, ClaimParams, findings
from harness.schema.report_config import ReportConfig, report_config
from harness.core.locate import resolve as _resolve


@dataclass(frozen=True, kw_only=True)
class Study:
    """What the report's cells share: the canonical runs, every series, and the claims."""

    root: Path
    canon: Canonical
    series: dict[str, Canonical]
    claims: tuple[Claim, ...]
    params: ClaimParams
    config: ReportConfig = ReportConfig()

    @property
    def ds(self) -> Dataset:
        return self.canon.dataset

    @property
    def transcribed(self) -> bool:
        return "transcribed" in self.canon.provenances or self.canon.study.provenance == "transcribed"


def series_canons(ds: Dataset, *, allow_reused: bool | None = None,
                  allow_different_work: bool | None = None) -> dict[str, Canonical]:
    """The canonical cells of every series of the dataset (default arm), the main series first."""
    names = [ds.study.main_series] + sorted(set(ds.records["series"]) - {ds.study.main_series})
    return {s: canonicalize(ds, series=s, allow_reused=allow_reused, allow_different_work=allow_different_work)
            for s in names if s in set(ds.records["series"])}


def tristate(value: object) -> bool | None:
    """A report parameter as papermill or `quarto render -P` passes it ("auto", "true", True, ...):
    None (as study.yaml declares), True or False."""
    text = str(value).strip().lower()
    if text in ("auto", "none", ""):
        return None
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ValueError(f"expected auto, true or false, not {value!r}")


def check_config(cfg: ReportConfig, path: Path) -> None:
    """What the schema alone cannot say: claim kinds exist, classes are there for kinds that read
    them, notebooks exist."""
    for i, kid in enumerate(cfg.claims):
        kind = REGISTRY.get(kid)
        if kind is None:
            raise InvalidFileError(path, f"report.claims[{i}]: unknown claim kind {kid!r} "
                                         f"(known: {', '.join(REGISTRY)})")
        if kind.needs_classes and cfg.model_classes is None:
            raise InvalidFileError(path, f"report.claims[{i}]: claim kind {kid!r} needs report.model_classes")
    for i, nb in enumerate(cfg.notebooks):
        if not (paths.NOTEBOOKS / nb).is_file():
            raise InvalidFileError(path, f"report.notebooks[{i}]: no such notebook notebooks/{nb}")


def load_study(study: Path | str, *, strict_claims: Iterable[str] | str | bool | None = None,
               params: ClaimParams = ClaimParams(), allow_reused: bool | None = None,
               allow_different_work: bool | None = None) -> Study:
    """Load, canonicalize and check the claims. `strict_claims=None` takes study.yaml's
    `report: {strict_claims: [...]}` (none if absent); `allow_reused` / `allow_different_work` None
    take study.yaml's, as `harness tables` does."""
    root = _resolve(study)
    ds = load(root)
    cfg = report_config(ds.study.extra.get("report"), root / "study.yaml")
    check_config(cfg, root / "study.yaml")
    allow = {"allow_reused": allow_reused, "allow_different_work": allow_different_work}
    others = series_canons(ds, **allow)
    canon = others.get(ds.study.main_series) or canonicalize(ds, **allow)
    if strict_claims is None:
        strict_claims = cfg.strict_claims
    claims = findings(canon, strict=strict_claims, params=params, others=others, study_kinds=cfg.claims,
                      classes=cfg.model_classes)
    return Study(root=root, canon=canon, series=others, claims=tuple(claims), params=params, config=cfg)
