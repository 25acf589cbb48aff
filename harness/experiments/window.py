"""Dependency windows: which releases of a package a leg really works with, beside what it declares.

The study found by hand that vLLM 0.18 declares `nvidia-cutlass-dsl>=4.4.0.dev1` while only
`<4.6.0` works: its metadata admits releases in which it cannot import its own attention wrapper.
`window` automates that experiment. For each release of PACKAGE it makes a scratch env (the leg's
lock with only PACKAGE replaced, forced by a uv override even outside the declared range), runs a
probe with the env's Python and records the outcome; the record sets the working window beside the
declared range and flags "declared range admits broken releases".

Releases are listed from the package index by `harness.measure.index`.

The record's model and format history: `harness.schema.window`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import InvalidMarker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version
from rich.console import Console


from harness.experiments import Ran
from harness.measure import leg as legmod

from harness.core import flags as cli_flags
from harness.core import paths

from harness.schema import record
from harness.schema import window as schema
from harness.schema.window import (SCHEMA_VERSION, Declared, Install, ReleaseResult, Window, WindowRecord, read_record,
                                   read_records, write_record)
from harness.core.errors import LegEnvError, UserError
from harness.core.logs import scrub
from harness.measure.index import index_url, index_versions, lock_versions
from harness.measure.leg import LegEnv, LegSpec
from harness.measure.lock import waiting_node_lock

RESULTS_DIR = schema.RESULTS_DIR
ADMITS_BROKEN = "declared range admits broken releases"
EXCLUDES_WORKING = "declared range excludes working releases"

console = Console(stderr=True)


# --- the declared range ---------------------------------------------------------------------------

_DECLARED_PROBE = """
import importlib.metadata as md, json, platform, re, sys
target = sys.argv[1]
norm = lambda s: re.sub(r"[-_.]+", "-", s).lower()
out = []
for d in md.distributions():
    for r in d.requires or []:
        if norm(re.split(r"[\\s<>=!~;\\[(@]", r.strip(), maxsplit=1)[0]) == target:
            out.append({"dist": d.metadata["Name"], "requirement": r})
env = {"python_version": "%d.%d" % sys.version_info[:2], "python_full_version": platform.python_version(),
       "implementation_name": sys.implementation.name, "sys_platform": sys.platform,
       "platform_machine": platform.machine(), "platform_system": platform.system(),
       "platform_python_implementation": platform.python_implementation(), "os_name": __import__("os").name}
print(json.dumps({"requires": out, "env": env}))
"""


def declared_requirements(raw: Sequence[dict], marker_env: dict[str, str]) -> list[Declared]:
    out = []
    for item in raw:
        try:
            req = Requirement(item["requirement"])
            applies = req.marker is None or req.marker.evaluate({**marker_env, "extra": ""})
        except (InvalidRequirement, InvalidMarker):
            applies = False
        out.append(Declared(dist=item["dist"], requirement=item["requirement"], applies=bool(applies)))
    return sorted(out, key=lambda d: (d.dist.lower(), d.requirement))


def combined_specifier(declared: Sequence[Declared]) -> SpecifierSet:
    """What every applying requirement admits at once: the range a resolver may pick from."""
    spec = SpecifierSet()
    for d in declared:
        if d.applies:
            spec &= Requirement(d.requirement).specifier
    return spec


def read_declared(env: LegEnv, package: str) -> list[Declared]:
    """Every requirement on `package` that an installed distribution of the leg env declares."""
    proc = subprocess.run([str(env.python), "-c", _DECLARED_PROBE, canonicalize_name(package)],
                          capture_output=True, text=True, env=env.environ())
    if proc.returncode:
        raise LegEnvError(env.leg.name, "metadata probe", proc.returncode, proc.stderr)
    data = json.loads(proc.stdout)
    return declared_requirements(data["requires"], data["env"])


# --- choosing releases ----------------------------------------------------------------------------

def select_releases(releases: Sequence[Version], spec: SpecifierSet, *, limit: int = 8, below: int = 2,
                    current: Version | None = None) -> list[Version]:
    """At most `limit` releases around the declared range, its edges always included.

    The edges are where windows break: the last release below the range, the first and last admitted
    ones, the first above it, and the leg's own. The rest are spread evenly over the domain, which
    runs from `below` releases under the first admitted one to the newest release.
    """
    if limit < 1:
        raise UserError("--limit should be at least 1")
    rel = sorted(set(releases))
    if not rel:
        return []
    admitted = [i for i, v in enumerate(rel) if spec.contains(v, prereleases=True)]
    if spec and admitted:
        first, last = admitted[0], admitted[-1]
        lo = max(0, first - below)
        must = [first, last, first - 1, last + 1]
    else:
        # No bound declared (or none met on the index): the newest releases are the ones in use.
        lo = max(0, len(rel) - limit)
        must = [len(rel) - 1]
    if current is not None and current in rel:
        must.append(rel.index(current))
    picked: list[int] = []
    for i in must:
        if 0 <= i < len(rel) and i not in picked:
            picked.append(i)
    spare = limit - len(picked)
    rest = [i for i in range(lo, len(rel)) if i not in picked]
    if spare > 0 and rest:
        if len(rest) <= spare:
            picked += rest
        elif spare == 1:
            picked.append(rest[len(rest) // 2])
        else:
            step = (len(rest) - 1) / (spare - 1)
            picked += [rest[round(k * step)] for k in range(spare)]
    return [rel[i] for i in sorted(set(picked))]


# --- the experiment -------------------------------------------------------------------------------

def windows(results: Sequence[ReleaseResult]) -> list[Window]:
    """Maximal runs of tested releases that work; a release that did not install breaks a run too."""
    rs = sorted(results, key=lambda r: Version(r.version))
    out: list[Window] = []
    i = 0
    while i < len(rs):
        if not rs[i].works:
            i += 1
            continue
        j = i
        while j + 1 < len(rs) and rs[j + 1].works:
            j += 1
        out.append(Window(first=rs[i].version, last=rs[j].version,
                          below=rs[i - 1].version if i > 0 else None,
                          above=rs[j + 1].version if j + 1 < len(rs) else None))
        i = j + 1
    return out


def flags(results: Sequence[ReleaseResult]) -> list[str]:
    out = []
    broken = [r.version for r in results if r.admitted and r.works is False]
    if broken:
        out.append(f"{ADMITS_BROKEN}: {', '.join(broken)}")
    excluded = [r.version for r in results if not r.admitted and r.works]
    if excluded:
        out.append(f"{EXCLUDES_WORKING}: {', '.join(excluded)}")
    return out


def scratch_leg(leg: LegSpec, lock: str, package: str, version: str, *, relaxed: bool) -> LegSpec:
    """The leg with only `package` forced to `version`.

    Strict: every other package stays at the leg lock's version (a single-variable experiment).
    Relaxed: the leg's own request is resolved again around the forced release, for releases whose
    own requirements conflict with the lock; what else moved is recorded.
    """
    name = canonicalize_name(package)
    force = [*leg.overrides, f"{name}=={version}"]
    update: dict = {"name": f"{leg.name}+{name}-{version}", "overrides": force, "model_pins": {}}
    if not relaxed:
        vdist = canonicalize_name(leg.vllm_dist)
        update["requirements"] = [ln for ln in lock.splitlines()
                                  if ln.strip() and canonicalize_name(ln.split("==", 1)[0]) != vdist]
    return leg.model_copy(update=update)


@dataclass(frozen=True, kw_only=True)
class ProbeOutcome:
    rc: int
    seconds: float
    stdout: str
    stderr: str


def _last(text: str) -> str:
    return scrub(next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), "")[:500])


def run_probe(env: LegEnv, probe: str, *, timeout_s: float, extra_env: dict[str, str] | None = None
              ) -> ProbeOutcome:
    # A clean working directory: the project's own files must not shadow what the env imports.
    with tempfile.TemporaryDirectory(prefix="probe-") as cwd:
        t0 = time.monotonic()
        try:
            proc = subprocess.run([str(env.python), "-c", probe], capture_output=True, text=True, cwd=cwd,
                                  env=env.environ() | (extra_env or {}), timeout=timeout_s,
                                  start_new_session=True)
        except subprocess.TimeoutExpired as e:
            err = (e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
            return ProbeOutcome(rc=124, seconds=time.monotonic() - t0, stdout="",
                                stderr=err + f"\nprobe timed out after {timeout_s:.0f} s")
    return ProbeOutcome(rc=proc.returncode, seconds=time.monotonic() - t0, stdout=proc.stdout,
                        stderr=proc.stderr)


def _uv_reason(log: str) -> str:
    # uv's resolver explains a conflict in its first "Because ..." line; its last line only
    # says that the requirements are unsatisfiable.
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    why = next((ln for ln in lines if "Because" in ln or "depends on" in ln), lines[-1] if lines else "")
    return scrub(why.removeprefix("cause:").strip()[:300])


def try_release(leg: LegSpec, lock: str, package: str, version: str, *, admitted: bool, probe: str,
                timeout_s: float, offline: bool, keep_env: bool, extra_env: dict[str, str]) -> ReleaseResult:
    """Install one release into a scratch env (strict first, relaxed if the lock cannot take it), probe it."""
    base = lock_versions(lock)
    errors: list[str] = []
    for relaxed in (False, True):
        spec = scratch_leg(leg, lock, package, version, relaxed=relaxed)
        try:
            env = legmod.resolve(spec, offline=offline)
            legmod.ensure(env)
        except LegEnvError as e:
            errors.append(f"{'relaxed' if relaxed else 'lock'}: {e.step}: {_uv_reason(e.log)}")
            continue
        got = lock_versions(env.lock)
        name = canonicalize_name(package)
        moved = {k: f"{base.get(k, '-')} -> {v}" for k, v in got.items() if k != name and base.get(k) != v}
        moved |= {k: f"{v} -> -" for k, v in base.items() if k not in got and k != name}
        try:
            out = run_probe(env, probe, timeout_s=timeout_s, extra_env=extra_env)
        finally:
            if not keep_env:
                shutil.rmtree(env.root, ignore_errors=True)
        return ReleaseResult(version=version, admitted=admitted, install="relaxed" if relaxed else "lock",
                             install_error="; ".join(errors), moved=moved if relaxed else {},
                             works=out.rc == 0, rc=out.rc, seconds=round(out.seconds, 2),
                             stderr_last=_last(out.stderr), stdout_last=_last(out.stdout), env=env.name)
    return ReleaseResult(version=version, admitted=admitted, install="failed", install_error="; ".join(errors))


@dataclass(frozen=True, kw_only=True)
class WindowArgs:
    package: str
    probe: str
    leg: str | None = None
    releases: tuple[str, ...] = ()
    limit: int = 8
    below: int = 2
    include_pre: bool = False
    timeout_s: float = 600
    index: str | None = None
    offline: bool = False
    keep_envs: bool = False
    results: Path = RESULTS_DIR
    lock_wait_s: float = 3600
    name: str | None = None

    @classmethod
    def add_cli_args(cls, p: argparse.ArgumentParser) -> None:
        p.add_argument("package")
        p.add_argument("--probe", required=True,
                       help="Python code run by each scratch env's python; exit 0 means it works "
                            "(HARNESS_TINY_MODEL holds the tiny model's path if the code names it)")
        p.add_argument("--leg", help="leg whose lock and declared range are used (default: the newest buildable)")
        p.add_argument("--release", dest="releases", action="append", default=[], help="test this release (repeatable)")
        p.add_argument("--limit", type=int, default=8, help="releases to test when none are named (default 8)")
        p.add_argument("--below", type=int, default=2, help="releases under the declared range to include (default 2)")
        p.add_argument("--timeout", dest="timeout_s", type=float, default=600, help="probe timeout in seconds")
        cli_flags.release_index(p)
        cli_flags.offline(p)
        p.add_argument("--keep-envs", action="store_true", help="keep the scratch envs")
        cli_flags.lock_wait(p)
        p.add_argument("--results", type=Path, default=RESULTS_DIR, help="where the record goes")

    @classmethod
    def from_cli_args(cls, a: argparse.Namespace) -> "WindowArgs":
        got = {k: getattr(a, k) for k in cls.__dataclass_fields__ if k != "name"}
        return cls(**got | {"releases": tuple(a.releases)})


def default_leg() -> str:
    """The newest buildable leg by vLLM version."""
    specs = [legmod.load_leg(n) for n in legmod.known_legs()]
    specs = [s for s in specs if s.buildable]
    if not specs:
        raise UserError(f"{paths.LEGS}: no buildable leg to probe")
    return max(specs, key=lambda s: Version(s.vllm_version)).name


def record_path(args: WindowArgs, leg: str) -> Path:
    sha = hashlib.sha256(args.probe.encode()).hexdigest()[:8]
    return paths.inside(args.results, f"{args.name or f'{leg}--{canonicalize_name(args.package)}--{sha}'}.json")


def _try_and_show(try_one: Callable[..., ReleaseResult], spec: LegSpec, lock: str, package: str, v: Version,
                  spec_set: SpecifierSet, args: WindowArgs, extra_env: dict[str, str]) -> ReleaseResult:
    res = try_one(spec, lock, package, str(v), admitted=spec_set.contains(v, prereleases=True), probe=args.probe,
                  timeout_s=args.timeout_s, offline=args.offline, keep_env=args.keep_envs, extra_env=extra_env)
    shown = {True: "[green]works", False: "[red]fails", None: "[yellow]not installed"}[res.works]
    console.print(f"  {res.version:>12}  {'admitted' if res.admitted else 'outside ':9} {res.install:8} "
                  f"{shown}[/]  {res.stderr_last or res.install_error}"[:200])
    return res


def window(args: WindowArgs, *, try_one: Callable[..., ReleaseResult] = try_release) -> tuple[WindowRecord, Path]:
    from harness.schema.outdir import check_root

    # As bisect's: records beside others (never over a file not this probe's record), in a folder
    # that is not a symlink, a study or a protected folder.
    check_root(args.results)
    if not args.probe.strip():
        raise UserError("--probe: empty probe code")
    if args.timeout_s <= 0:
        raise UserError("--timeout should be positive")
    leg_name = args.leg or default_leg()
    spec = legmod.load_leg(leg_name)
    package = canonicalize_name(args.package)
    if package == canonicalize_name(spec.vllm_dist):
        raise UserError(f"{legmod.leg_path(leg_name)}: {package} is the leg's vLLM itself; use `search bisect` for it")
    wanted: list[Version] = []
    for r in args.releases:
        try:
            wanted.append(Version(r))
        except InvalidVersion:
            raise UserError(f"--release: not a version: {r!r}") from None
    started = record.now()
    env = legmod.resolve(spec, offline=args.offline)
    rep = legmod.ensure(env)
    console.print(f"leg env {env.name}: {'reused' if rep.reused else 'built'} in {rep.seconds:.1f} s")
    declared = read_declared(env, package)
    spec_set = combined_specifier(declared)
    current = lock_versions(env.lock).get(package)
    index = (args.index or index_url()).rstrip("/")
    on_index = index_versions(package, index=index, include_pre=args.include_pre)
    if wanted:
        missing = [str(v) for v in wanted if v not in on_index]
        if missing:
            raise UserError(f"--release: {', '.join(missing)} not on {index}/{package}/")
        chosen = sorted(set(wanted))
    else:
        chosen = select_releases(on_index, spec_set, limit=args.limit, below=args.below,
                                 current=Version(current) if current else None)
    console.print(f"{package}: declared {str(spec_set) or '(any)'} by {leg_name}; "
                  f"testing {', '.join(map(str, chosen))}")
    extra_env: dict[str, str] = {}
    if "HARNESS_TINY_MODEL" in args.probe:
        from harness.measure.tinymodel import build_tiny_model
        extra_env["HARNESS_TINY_MODEL"] = str(build_tiny_model())
    # Builds and probes load both cores for minutes: never beside another sweep's timed runs.
    with waiting_node_lock(args.lock_wait_s):
        results = [_try_and_show(try_one, spec, env.lock, package, v, spec_set, args, extra_env) for v in chosen]
    notes = []
    if any(r.install == "relaxed" for r in results):
        notes.append("releases marked 'relaxed' could not be installed beside the leg's lock; the leg's request "
                     "was resolved again around them and the other packages that moved are listed")
    if any(r.install == "failed" for r in results):
        notes.append("releases marked 'failed' could not be installed at all; they count as not working")
    rec = WindowRecord(
        created_at=started, finished_at=record.now(), node=os.uname().nodename, package=package,
        probe=args.probe, probe_sha256=hashlib.sha256(args.probe.encode()).hexdigest(), leg=spec.name,
        leg_label=spec.label, vllm_dist=spec.vllm_dist, vllm_version=spec.vllm_version,
        leg_compat_id=env.compat_id, leg_resolves_to=current, index=index, declared=declared,
        declared_range=str(spec_set), releases=results, windows=windows(results), flags=flags(results),
        notes=notes)
    path = paths.unclobbered(record_path(args, spec.name), _settings(rec), _settings_of)
    write_record(rec, path)
    return rec, path


def _settings(rec: WindowRecord) -> dict:
    """What a window measured: a record of other settings is kept beside it, never replaced."""
    return {"package": rec.package, "probe_sha256": rec.probe_sha256, "leg_compat_id": rec.leg_compat_id,
            "index": rec.index, "releases": [r.version for r in rec.releases]}


def _settings_of(path: Path) -> dict | None:
    try:
        return _settings(read_record(path))
    except Exception:  # noqa: BLE001 - unreadable: never overwrite it either
        return None


# --- the report section ---------------------------------------------------------------------------

def _range_text(w: Window, status: dict[str, str]) -> str:
    s = w.first if w.first == w.last else f"{w.first} … {w.last}"
    edges = [f"{v} {where}: {status[v]}" for v, where in ((w.below, "below"), (w.above, "above")) if v]
    return s + (f" ({'; '.join(edges)})" if edges else "")


# --- the experiment (harness.experiments) ---------------------------------------------------------

NAME = "window"
GROUP = "search"
HELP = "probe releases of a dependency in scratch envs of a leg"
EXAMPLE = ("harness search window transformers --leg cpu-0.32.0 --probe 'import vllm' "
           "--release 5.16.0 --release 5.20.0")
SIDE_SECTION = True   # a window is a property of the leg's stack: the report shows each of its legs'
Args = WindowArgs
quote = None          # a note quotes no number from a window record


def run(args: WindowArgs) -> Ran:
    rec, path = window(args)
    return Ran(record=rec, files=(path,))


@dataclass(frozen=True, kw_only=True)
class Summary:
    record: WindowRecord
    status: dict[str, str]   # release -> why it is outside a window ("fails", "not installable")


def summary(rec: WindowRecord) -> Summary:
    return Summary(record=rec,
                   status={r.version: "fails" if r.works is False else "not installable" for r in rec.releases})


def study_records(study_dir: Path, legs: set[str], models: set[str]) -> list[WindowRecord]:
    """The window records of the study's legs, from the results root's window/ folder."""
    folder = study_dir.parent / "window"
    return [r for r in (read_records(folder) if folder.is_dir() else []) if r.leg in legs]


def belongs(rec: WindowRecord, study: str) -> bool:
    """A window probes a leg's stack, not a study's runs: its record names no study, so no study page
    shows it as its own (`harness search window` and results/window/ hold it)."""
    return False


def summary_md(summary: Summary) -> str:
    """The record as a report section: declared range, one row per tested release, the window, flags."""
    rec = summary.record
    works = {True: "works", False: "**fails**", None: "not installed"}
    lines = [
        f"### Dependency window: `{rec.package}` on leg {rec.leg} ({rec.vllm_dist} {rec.vllm_version})",
        "",
        f"Declared range (every requirement on {rec.package} that applies in the leg env): "
        f"`{rec.declared_range or 'any'}`; the leg itself resolves to {rec.leg_resolves_to or '—'}.",
        "",
    ]
    for d in rec.declared:
        lines.append(f"- `{d.dist}` declares `{d.requirement}`" + ("" if d.applies else " (marker does not apply)"))
    lines += ["", "Probe, run with each scratch env's Python:", "", "```python", rec.probe.strip(), "```", "",
              "| release | declared range admits it | install | probe | rc | last line of stderr |",
              "|---|---|---|---|---|---|"]
    for r in rec.releases:
        err = (r.stderr_last if r.works is False else "") or (r.install_error if r.install == "failed" else "")
        install = r.install + (f" ({', '.join(f'{k} {v}' for k, v in r.moved.items())})" if r.moved else "")
        lines.append(f"| {r.version} | {'yes' if r.admitted else 'no'} | {install} | {works[r.works]} | "
                     f"{'' if r.rc is None else r.rc} | {err.replace('|', '/')[:160]} |")
    lines.append("")
    status = summary.status
    if rec.windows:
        lines.append("Working window among the tested releases: "
                     + "; ".join(_range_text(w, status) for w in rec.windows) + ".")
    else:
        lines.append("No tested release works.")
    lines.append("")
    for f in rec.flags:
        lines.append(f"**Flag:** {f}.")
    if not rec.flags:
        lines.append("No flag: every tested release inside the declared range works, and every tested "
                     "release outside it fails or was not installable.")
    for n in rec.notes:
        lines += ["", f"Note: {n}."]
    lines += ["", f"Probed {rec.created_at} on leg env compat id {rec.leg_compat_id}; releases listed "
                  "from the configured package index (its address is in the JSON record). Only the releases "
                  "in the table were tested; this record says nothing "
                  "about the untested releases between them."]
    return "\n".join(lines) + "\n"
