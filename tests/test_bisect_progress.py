"""A bisect's record while the search runs: written after every measured step as an "incomplete"
record, left valid when the search is stopped, replaced by the final record when a resumed search
ends; older record versions still read. Measurement is a FAKE (fixed samples per release, raising
where a test stops the search), except in the last test, which runs the real sweep machinery with
the FAKE bench worker and FAKE leg envs."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from harness.experiments import bisect as bis
from harness.experiments.bisect import BisectArgs, Measurement, search
from harness.measure import leg as legmod
from tests.conftest import write_scenario

# cpu-tiny's two CPU legs, the releases between given (no index), the change at 0.30.0. The search
# measures the endpoints, then 0.29.0 (same), then 0.30.0 (differs), and ends.
BETWEEN = ("0.28.0", "0.29.0", "0.30.0", "0.31.0")
ARGS = dict(scenario="cpu-tiny", good="cpu-0.27.1", bad="cpu-0.32.0", versions=BETWEEN, repeats=3)
TOK_S = {"0.27.1": 1000.0, "0.28.0": 1000.0, "0.29.0": 1000.0, "0.30.0": 700.0, "0.31.0": 700.0,
         "0.32.0": 700.0}


class Stop(RuntimeError):
    """What the FAKE measurement raises where a test stops the search."""


class FakeMeasure:
    """FAKE measurement: fixed throughput per release; raises `stop` on call number `stop_at` (1 is
    the endpoints); notes what the record on disk said at each call."""

    def __init__(self, record: Path | None = None, stop_at: int | None = None,
                 stop: type[BaseException] = Stop, tok_s: dict[str, float] = TOK_S):
        self.record, self.stop_at, self.stop, self.tok_s = record, stop_at, stop, tok_s
        self.calls, self.on_disk = [], []

    def __call__(self, versions):
        self.calls.append(list(versions))
        if self.record is not None:
            self.on_disk.append(bis.read_record(self.record) if self.record.exists() else None)
        if len(self.calls) == self.stop_at:
            raise self.stop(f"measuring {versions} raised")
        return [Measurement(leg=f"cpu-{v}", samples=tuple(self.tok_s[v] * f for f in (0.995, 1.0, 1.005)),
                            run_ids=tuple(f"s/cpu-{v}/m/w/default/r{k}" for k in (1, 2, 3))) for v in versions]


def _path(results: Path) -> Path:
    return results / "cpu-tiny--cpu-0.27.1--cpu-0.32.0--tiny-llama--mixed.json"


@pytest.mark.parametrize("stop", [Stop, KeyboardInterrupt])
def test_fake_measure_that_raises_after_the_first_step_leaves_an_incomplete_record(tmp_path, capsys, stop):
    path = _path(tmp_path)
    fake = FakeMeasure(path, stop_at=3, stop=stop)  # the endpoints, 0.29.0, then raises at 0.30.0
    with pytest.raises(stop, match="raised"):
        bis.bisect(BisectArgs(**ARGS, results=tmp_path), measure=fake)
    assert fake.calls == [["0.27.1", "0.32.0"], ["0.29.0"], ["0.30.0"]]
    rec = bis.read_record(path)
    assert not rec.complete and rec.finished_at is None and rec.updated_at is not None
    assert [(s.role, s.version) for s in rec.steps] == [("good", "0.27.1"), ("bad", "0.32.0"), ("step", "0.29.0")]
    c = rec.conclusion
    assert c.kind == "incomplete" and c.first_differing is None and c.last_same is None
    assert c.unmeasured == ["0.28.0", "0.30.0", "0.31.0"] and c.suspects == ["0.30.0", "0.31.0", "0.32.0"]
    assert "releases not measured: 0.28.0, 0.30.0, 0.31.0" in c.text and "bad 0.32.0 at 0.700x" in c.text and "; 0.29.0 at 1.000x" in c.text
    assert bis.read_records(tmp_path) == [rec]
    said = "".join(capsys.readouterr().err.split())  # the console wraps lines, in the path too
    assert f"{path}holdsthe3step(s)measuredsofar" in said


def test_fake_the_record_on_disk_follows_every_step(tmp_path):
    path = _path(tmp_path)
    fake = FakeMeasure(path)
    _, got = bis.bisect(BisectArgs(**ARGS, results=tmp_path), measure=fake)
    assert got == path
    # Nothing before the endpoints; then the endpoints; then the endpoints and 0.29.0.
    assert fake.on_disk[0] is None
    assert [[s.version for s in r.steps] for r in fake.on_disk[1:]] == [["0.27.1", "0.32.0"],
                                                                         ["0.27.1", "0.32.0", "0.29.0"]]
    assert fake.on_disk[1].conclusion.suspects == [*BETWEEN, "0.32.0"]
    assert all(r.conclusion.kind == "incomplete" for r in fake.on_disk[1:])


def test_fake_the_final_record_has_no_trace_of_incomplete(tmp_path):
    path = _path(tmp_path)
    rec, _ = bis.bisect(BisectArgs(**ARGS, results=tmp_path), measure=FakeMeasure(path))
    assert rec.complete and rec.conclusion.kind == "first_differing" and rec.conclusion.first_differing == "0.30.0"
    assert rec.finished_at is not None and rec.updated_at == rec.finished_at
    assert "incomplete" not in path.read_text() and bis.read_record(path) == rec
    md = bis.summary_md(bis.summary(rec))
    assert "incomplete" not in md and "**Conclusion:** first differing release: 0.30.0" in md


def test_fake_a_resumed_bisect_finishes_the_incomplete_record(tmp_path):
    path = _path(tmp_path)
    args = BisectArgs(**ARGS, results=tmp_path)
    with pytest.raises(Stop):
        bis.bisect(args, measure=FakeMeasure(path, stop_at=3))
    stopped = bis.read_record(path)
    rec, again = bis.bisect(dataclasses.replace(args, resume=True), measure=FakeMeasure(path))
    # The same file (the same inputs), now the final record; nothing left beside it.
    assert again == path and sorted(p.name for p in tmp_path.iterdir()) == [path.name]
    assert rec.complete and rec.conclusion.first_differing == "0.30.0" and rec.conclusion.unmeasured == []
    assert rec.steps[:3] == stopped.steps
    assert bis.read_record(path) == rec and "incomplete" not in path.read_text()


def test_fake_a_bisect_stopped_before_any_step_writes_nothing_and_keeps_the_earlier_record(tmp_path):
    path = _path(tmp_path)
    args = BisectArgs(**ARGS, results=tmp_path)
    done, _ = bis.bisect(args, measure=FakeMeasure(path))
    with pytest.raises(Stop):
        bis.bisect(args, measure=FakeMeasure(path, stop_at=1))
    assert bis.read_record(path) == done


def test_fake_incomplete_section_says_what_was_measured_and_concludes_nothing(tmp_path):
    path = _path(tmp_path)
    with pytest.raises(Stop):
        bis.bisect(BisectArgs(**ARGS, results=tmp_path), measure=FakeMeasure(path, stop_at=3))
    md = bis.summary_md(bis.summary(bis.read_record(path)))
    assert md.startswith("### Bisect: cpu-tiny / tiny-llama / mixed, cpu-0.27.1 → cpu-0.32.0 (search incomplete)")
    assert "**Conclusion:**" not in md
    assert "**Search incomplete, no conclusion:** 3 step(s) measured so far" in md
    assert "releases not measured: 0.28.0, 0.30.0, 0.31.0" in md
    assert "the first differing release is one of 0.30.0, 0.31.0, 0.32.0 (0.29.0 does not differ" in md
    assert "the search did not end" in md and "–" not in md.splitlines()[-1]
    assert md.count("\n| ") == 3 + 1  # header + the three steps measured


def test_fake_search_tells_progress_only_when_it_goes_on():
    seen = []
    steps, c = search(["0.27.1", *BETWEEN, "0.32.0"], FakeMeasure(),
                      progress=lambda steps, so_far: seen.append((len(steps), so_far)))
    assert [n for n, _ in seen] == [2, 3] and len(steps) == 4 and c.kind == "first_differing"
    assert [so_far.suspects for _, so_far in seen] == [[*BETWEEN, "0.32.0"], ["0.30.0", "0.31.0", "0.32.0"]]
    seen.clear()
    flat = FakeMeasure(tok_s={v: 1000.0 for v in TOK_S})
    _, c = search(["0.27.1", *BETWEEN, "0.32.0"], flat, progress=lambda s, so_far: seen.append(so_far))
    assert c.kind == "no_change" and seen == []


def test_a_version_2_record_reads_as_a_complete_one(tmp_path):
    """A record written by the previous version (FAKE content): written once, when the search ended."""
    rec, path = bis.bisect(BisectArgs(**ARGS, results=tmp_path), measure=FakeMeasure())
    data = rec.model_dump(mode="json", exclude={"updated_at": True, "conclusion": {"unmeasured"}})
    path.write_text(json.dumps(data | {"schema_version": 2}))
    old = bis.read_record(path)
    assert old.schema_version == bis.SCHEMA_VERSION and old.complete
    assert old.updated_at == old.finished_at == rec.finished_at
    assert old.model_dump(exclude={"updated_at"}) == rec.model_dump(exclude={"updated_at"})
    assert "**Conclusion:** first differing release: 0.30.0" in bis.summary_md(bis.summary(old))


# --- through the sweep machinery, with the FAKE bench -------------------------------------------

def test_fake_bench_a_stopped_bisect_resumes_on_the_runs_it_measured(tmp_path, fake_sweep, monkeypatch):
    """FAKE bench and FAKE leg envs; plan, execute_plan, the node lock, the records and --resume are
    real. Resolving 0.30.0's env raises the first time (as a measurement that fails outright); the
    resumed bisect measures only what the stopped one had not."""
    from tests.test_bisect import SCENARIO, _fake_leg_env

    tok_s = {"0.27.1": 1000.0, "0.29.0": 1000.0, "0.30.0": 700.0, "0.32.0": 700.0}
    stop = {"0.30.0"}

    def resolve(spec, pins=(), offline=False):
        if spec.vllm_version in stop:
            raise Stop(f"resolving {spec.vllm_version} raised")
        return _fake_leg_env(tmp_path, spec, tok_s, set())

    monkeypatch.setattr(legmod, "resolve", resolve)
    sc = write_scenario(tmp_path, SCENARIO)
    args = BisectArgs(scenario=str(sc), good="cpu-0.27.1", bad="cpu-0.32.0", repeats=3,
                      versions=("0.29.0", "0.30.0"), results=tmp_path / "bisect")
    with pytest.raises(Stop):
        bis.bisect(args)
    path = tmp_path / "bisect" / "bt--cpu-0.27.1--cpu-0.32.0--m--w.json"
    stopped = bis.read_record(path)
    assert stopped.conclusion.kind == "incomplete" and stopped.conclusion.unmeasured == ["0.30.0"]
    assert [s.version for s in stopped.steps] == ["0.27.1", "0.32.0", "0.29.0"]
    assert stopped.runs_dir == "bt--cpu-0.27.1--cpu-0.32.0--m--w"
    sweeps = tmp_path / "bisect" / stopped.runs_dir / "sweeps"
    before = set(sweeps.iterdir())
    stop.clear()
    rec, again = bis.bisect(dataclasses.replace(args, resume=True))
    assert again == path and rec.complete and rec.conclusion.first_differing == "0.30.0"
    assert "incomplete" not in path.read_text()
    reused = {}
    for f in set(sweeps.iterdir()) - before:
        for r in json.loads(f.read_text())["runs"]:
            reused.setdefault(r["run_id"].split("/")[1], set()).add(r["reused"])
    assert reused == {"cpu-0.27.1": {True}, "cpu-0.32.0": {True}, "cpu-0.29.0": {True}, "cpu-0.30.0": {False}}


def test_fake_bench_a_bisect_run_again_refuses_then_supersedes(tmp_path, fake_sweep, monkeypatch):
    """FAKE bench and FAKE leg envs: a second bisect of the same inputs without --resume would measure
    over the first one's records, so it stops in one line; --supersede measures again and keeps them."""
    from harness.core.errors import UserError
    from tests.test_bisect import SCENARIO, _fake_leg_env

    tok_s = {"0.27.1": 1000.0, "0.29.0": 1000.0, "0.30.0": 700.0, "0.32.0": 700.0}
    monkeypatch.setattr(legmod, "resolve", lambda spec, pins=(), offline=False: _fake_leg_env(tmp_path, spec, tok_s, set()))
    sc = write_scenario(tmp_path, SCENARIO)
    args = BisectArgs(scenario=str(sc), good="cpu-0.27.1", bad="cpu-0.32.0", repeats=2,
                      versions=("0.29.0", "0.30.0"), results=tmp_path / "bisect")
    first, path = bis.bisect(args)
    with pytest.raises(UserError) as e:
        bis.bisect(args)
    assert "holds a finished record" in str(e.value) and "--supersede" in str(e.value) and "\n" not in str(e.value)
    rec, again = bis.bisect(dataclasses.replace(args, supersede=True))
    assert again == path and rec.complete and rec.conclusion.first_differing == first.conclusion.first_differing
    kept = list((tmp_path / "bisect" / rec.runs_dir / "superseded").rglob("results.json"))
    assert len(kept) == 8    # the endpoints and the two releases between, two repeats each
