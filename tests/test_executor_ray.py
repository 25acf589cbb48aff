"""The Ray executor on a real local Ray cluster (127.0.0.1) whose nodes stand in for machines.

Multi-node is FAKE here: the nodes are separate Ray nodes (own raylet, own custom resources, own
node lock) on one machine. The runs use the FAKE node bench (tests/fakes/fake_node_bench.py) and
FAKE leg envs, except the engine test, which measures the tiny model with vLLM through Ray.
Every cluster is torn down by process id and the tests check that no Ray process is left.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import tempfile
import time
import uuid
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from ray._private import ray_constants  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

from harness.measure import guard  # noqa: E402

from harness.schema import record
from harness.measure import run as runmod  # noqa: E402
from harness.measure import sweep as sweepmod  # noqa: E402
from harness.core.errors import UserError  # noqa: E402
from harness.measure.executors.ray import NODE_RESOURCE, RayExecutor, is_lost, omp_threads  # noqa: E402
from harness.measure.sweep import SweepArgs, sweep  # noqa: E402
from tests.conftest import write_scenario  # noqa: E402

pytestmark = pytest.mark.ray

FAKE_NODE_BENCH = Path(__file__).parent / "fakes" / "fake_node_bench.py"
MARK_VAR = "HARNESS_TEST_RAY"
OBJECT_STORE = 200 * 1024 * 1024


def _marked(mark: str) -> list[tuple[int, str]]:
    """Live (non-zombie) processes other than this one whose environment carries `mark`."""
    tag = f"{MARK_VAR}={mark}".encode()
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            if tag not in (d / "environ").read_bytes().split(b"\0"):
                continue
            state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
            if state != "Z":
                found.append((int(d.name), (d / "cmdline").read_bytes().replace(b"\0", b" ")[:120].decode()))
        except (OSError, IndexError, ValueError):
            continue
    return found


class LocalCluster:
    """A real Ray cluster on 127.0.0.1: a head that runs nothing, plus harness nodes that each stand
    in for a machine (own raylet, `harness_node: 1`, a resource naming it, its own node lock)."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.mark = uuid.uuid4().hex[:12]
        self.ray_tmp = Path(tempfile.mkdtemp(prefix="ray-t-"))  # short: Ray's socket paths are long
        self.mp = pytest.MonkeyPatch()
        self.mp.setenv(MARK_VAR, self.mark)  # every process of this cluster inherits it
        self.mp.setenv("RAY_TMPDIR", str(self.ray_tmp))
        self.mp.setenv("RAY_USAGE_STATS_ENABLED", "0")
        # Ray turns 127.0.0.1 into the machine's outward address unless it believes it runs on a
        # single-node platform; this keeps every process of the test cluster on the loopback.
        self.mp.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        self.mp.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)
        self.cpus: dict[str, int] = {}
        self.cluster = Cluster(initialize_head=True, head_node_args=dict(
            node_ip_address="127.0.0.1", node_name="head", num_cpus=0, include_dashboard=False,
            object_store_memory=OBJECT_STORE,
            _system_config={"health_check_period_ms": 500, "health_check_failure_threshold": 3,
                            "health_check_timeout_ms": 500}))
        self.address = self.cluster.address

    def add_node(self, name: str, cpus: int) -> None:
        self.cluster.add_node(
            node_ip_address="127.0.0.1", node_name=name, num_cpus=cpus, object_store_memory=OBJECT_STORE,
            resources={NODE_RESOURCE: 1, f"test_node_{name}": 1},
            env_vars={"HARNESS_TEST_NODE": f"{name}-{self.mark}", "HARNESS_LOCK": str(self.tmp / f"{name}.lock")})
        self.cpus[name] = cpus

    def stop(self) -> list[tuple[int, str]]:
        """Shut the cluster down; returns what outlived the shutdown (then killed by pid)."""
        try:
            if ray.is_initialized():
                ray.shutdown()
            self.cluster.shutdown()
            deadline = time.monotonic() + 20
            while (left := _marked(self.mark)) and time.monotonic() < deadline:
                time.sleep(0.5)
            for pid, _ in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            return left
        finally:
            self.mp.undo()
            shutil.rmtree(self.ray_tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("cluster"))
    try:
        c.add_node("A", cpus=1)
        c.add_node("B", cpus=2)
    except BaseException:
        c.stop()
        raise
    yield c
    left = c.stop()
    assert left == [], f"Ray processes outlived the cluster: {left}"


@pytest.fixture
def node_sweep(fake_sweep, monkeypatch):
    """FAKE leg envs (conftest) and the FAKE node bench for every run."""
    monkeypatch.setattr(sweepmod, "RunSpec", functools.partial(runmod.RunSpec, worker=FAKE_NODE_BENCH))
    return fake_sweep


SCENARIO = """
name: t
legs: [cpu-0.32.0]
repeats: 2
timeout_s: 60
models:
  - name: m
    path: tiny
    engine_args: {fake_sleep_s: 2.0}
workloads:
  - {name: a, kind: throughput, input_len: 8, output_len: 4, num_prompts: 2}
  - {name: b, kind: throughput, input_len: 8, output_len: 4, num_prompts: 2}
"""


def _args(tmp_path: Path, body: str = SCENARIO, **kw) -> SweepArgs:
    return SweepArgs(scenario=str(write_scenario(tmp_path, body)), results=tmp_path / "results", **kw)


def _ray_args(tmp_path: Path, c: LocalCluster, body: str = SCENARIO, **kw) -> SweepArgs:
    return _args(tmp_path, body, executor="ray", ray_address=c.address, **kw)


@contextlib.contextmanager
def _machine_lock(wait_s: float):
    """This machine's own node lock, waiting while another sweep measures."""
    deadline = time.monotonic() + wait_s
    with contextlib.ExitStack() as held:
        while True:
            try:
                held.enter_context(guard.node_lock())
                break
            except UserError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(10)
        yield


def _span(run_dir: Path) -> tuple[float, float]:
    events = [json.loads(x) for x in (run_dir / "run.jsonl").read_text().splitlines()]
    return (next(e["t"] for e in events if e["phase"] == "spawn"),
            next(e["t"] for e in reversed(events) if e["phase"] == "exit"))


# --- without a cluster ------------------------------------------------------------------------

def test_omp_policy_is_cpus_over_tp():
    assert omp_threads(192, 4) == 48
    assert omp_threads(87, 4) == 21     # the study's tp=4 jobs had 21 threads per rank
    assert omp_threads(2, 1) == 2
    assert omp_threads(1, 8) == 1       # never zero threads


def test_only_node_and_worker_loss_counts_as_lost():
    assert is_lost(ray.exceptions.NodeDiedError("node gone"))
    assert is_lost(ray.exceptions.WorkerCrashedError())
    assert not is_lost(ray.exceptions.OutOfMemoryError("oom"))
    assert not is_lost(RuntimeError("Engine core initialization failed"))


def test_ray_without_address_is_a_user_error(tmp_path, node_sweep):
    if ray.is_initialized():
        pytest.skip("a Ray driver is already connected in this process")
    with pytest.raises(UserError, match="needs --address"):
        sweep(_args(tmp_path, executor="ray"))
    assert not (tmp_path / "results" / "t" / "runs").exists()


def test_devices_with_ray_is_a_user_error(tmp_path, node_sweep):
    with pytest.raises(UserError, match="--devices cannot be used with --executor ray"):
        sweep(_args(tmp_path, executor="ray", ray_address="127.0.0.1:1", devices="0"))


# --- on the shared two-node cluster -----------------------------------------------------------

def test_runs_are_serial_per_node_and_parallel_across_nodes(tmp_path, cluster, node_sweep):
    res = sweep(_ray_args(tmp_path, cluster))
    assert res.measured == 4 and res.reused == 0
    spans: dict[str, list[tuple[float, float]]] = {}
    for rec in res.records:
        d = res.study_dir / "runs" / rec.run_id
        # Same layout as a local sweep, and the record on disk is the one returned.
        assert {"results.json", "run.jsonl", "run.log", "manifest.json", "spec.json", "worker.json"} <= \
            {p.name for p in d.iterdir()}
        assert record.read(d / "results.json") == rec
        assert rec.status == "ok" and rec.runner == "ray" and rec.attempt == 1
        assert rec.node in cluster.cpus and rec.manifest["runner"] == "ray"
        placed = rec.manifest["ray"]
        assert placed["node_name"] == rec.node and placed["node_cpus"] == cluster.cpus[rec.node]
        # The thread policy, applied in the run's environment and captured by the bench itself.
        want = str(cluster.cpus[rec.node] // rec.tp)
        assert placed["omp_num_threads"] == want and placed["omp_source"].startswith("policy")
        assert rec.manifest["omp_num_threads"] == want and rec.manifest["env"]["OMP_NUM_THREADS"] == want
        assert rec.manifest["env"]["HARNESS_TEST_NODE"].startswith(rec.node + "-")
        spans.setdefault(rec.node, []).append(_span(d))
    assert set(spans) == {"A", "B"}, "both nodes should have measured"
    for node, s in spans.items():
        s.sort()
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(s, s[1:])), f"node {node} overlapped"
    assert any(a0 < b1 and b0 < a1 for a0, a1 in spans["A"] for b0, b1 in spans["B"]), \
        "the two nodes never measured at the same time"
    index = json.loads(res.index_path.read_text())
    assert index["finished_at"] and len(index["runs"]) == 4
    assert all(r["runner"] == "ray" and r["node"] in cluster.cpus and r["attempt"] == 1 for r in index["runs"])
    assert (res.study_dir / "study.yaml").exists()


def test_exit_status_decides_not_log_lines(tmp_path, cluster, node_sweep):
    body = SCENARIO.replace("repeats: 2", "repeats: 1").replace(
        "    engine_args: {fake_sleep_s: 2.0}\n", """    engine_args: {fake_harmless_traceback: true}
  - name: broken
    path: tiny
    engine_args: {fake_exit: 3}
""")
    res = sweep(_ray_args(tmp_path, cluster, body, workloads=("a",)))
    by_model = {r.model: r for r in res.records}
    noisy, broken = by_model["m"], by_model["broken"]
    # A traceback in the log of a run that exits 0 with a result is not a failure...
    log = (res.study_dir / "runs" / noisy.run_id / "run.log").read_text()
    assert "Traceback" in log and "ValueError: Expecting value" in log
    assert noisy.status == "ok" and noisy.failure is None and noisy.metrics.throughput_tok_s == 1000.0
    # ...and a non-zero exit is a measured failure: recorded, never retried.
    assert broken.status == "failed" and broken.failure.exit_code == 3 and broken.attempt == 1
    assert "lost_attempts" not in broken.manifest
    index = json.loads(res.index_path.read_text())
    assert sorted(r["attempt"] for r in index["runs"]) == [1, 1]
    assert not any("lost_attempts" in r for r in index["runs"])


def test_resume_across_executors(tmp_path, cluster, node_sweep):
    local = sweep(_args(tmp_path))
    assert local.measured == 4 and {r.runner for r in local.records} == {"local"}
    # Ray reuses what local measured: the fingerprint does not depend on the runner.
    again = sweep(_ray_args(tmp_path, cluster, resume=True))
    assert again.measured == 0 and again.reused == 4
    assert {r.invocation_id for r in again.records} == {local.invocation_id}
    # A third repeat is measured on Ray; local then reuses Ray's records as its own.
    more = sweep(_ray_args(tmp_path, cluster, resume=True, repeats=3))
    assert more.measured == 2 and more.reused == 4
    ray_measured = {r.run_id: r for r in more.records if r.invocation_id == more.invocation_id}
    assert {r.runner for r in ray_measured.values()} == {"ray"} and {r.repeat for r in ray_measured.values()} == {3}
    back = sweep(_args(tmp_path, resume=True, repeats=3))
    assert back.measured == 0 and back.reused == 6
    assert {r.run_id: r for r in back.records if r.runner == "ray"} == ray_measured


def test_run_no_node_can_hold_is_refused_before_measuring(tmp_path, cluster, node_sweep):
    body = SCENARIO.replace("[cpu-0.32.0]", "[gpu-0.26.0]").replace("    path: tiny\n", "    path: tiny\n    tp: 2\n")
    with pytest.raises(UserError, match="needs 2 GPUs on one node"):
        sweep(_ray_args(tmp_path, cluster, body))
    assert not (tmp_path / "results" / "t" / "runs").exists()


def test_interrupted_sweep_leaves_no_run_on_any_node(tmp_path, cluster, node_sweep):
    """FAKE bench: Ctrl-C on the driver while a run measures on another node."""
    body = SCENARIO.replace("repeats: 2", "repeats: 1").replace(
        "    engine_args: {fake_sleep_s: 2.0}\n", """    engine_args: {fake_sleep_s: 0.5}
  - name: slow
    path: tiny
    engine_args: {fake_sleep_s: 300}
""")
    _, _, planned = sweepmod.plan(_ray_args(tmp_path, cluster, body, workloads=("a",)))
    done: list[str] = []

    def on_done(p, rec, reused):
        done.append(rec.run_id)
        raise KeyboardInterrupt

    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        RayExecutor(address=cluster.address).run_all(planned, invocation_id="i", allow_dirty=False,
                                                     on_done=on_done)
    assert len(done) == 1 and "/m/" in done[0] and time.monotonic() - t0 < 120
    runs = [pid for pid, _ in _marked(cluster.mark)
            if f"{runmod.RUN_ENV_TAG}=".encode() in Path(f"/proc/{pid}/environ").read_bytes()]
    assert runs == [], "a run kept going after the sweep was interrupted"
    slow = next(p for p in planned if p.spec.model.name == "slow")
    assert not (slow.run_dir / "results.json").exists()


# slow: the executor is tested on real Ray clusters with the fake bench (above and below), a real engine
# through the local executor by tests/test_engine.py.
@pytest.mark.slow
@pytest.mark.engine
def test_real_cpu_run_through_ray(tmp_path, monkeypatch):
    """One real vLLM run (leg cpu-0.32.0, the tiny model) measured by a Ray node. The machine's own
    lock is taken before the cluster starts: a real engine never measures beside another sweep."""
    body = """
    name: t
    legs: [cpu-0.32.0]
    timeout_s: 600
    models:
      - name: tiny-llama
        path: tiny
        dtype: float32
        engine_args: {max_model_len: 512, gpu_memory_utilization: 0.25, enforce_eager: true}
    workloads:
      - {name: mixed, kind: throughput, input_len: 64, output_len: 16, num_prompts: 8}
    """
    monkeypatch.delenv("HARNESS_LOCK", raising=False)
    with _machine_lock(wait_s=900):
        c = LocalCluster(tmp_path)
        try:
            c.add_node("A", cpus=2)
            res = sweep(_ray_args(tmp_path, c, body, offline=True))
        finally:
            left = c.stop()
    assert left == [], f"Ray processes outlived the cluster: {left}"
    (rec,) = res.records
    assert rec.status == "ok", rec.failure
    assert rec.runner == "ray" and rec.node == "A" and rec.metrics.throughput_tok_s > 0
    assert rec.manifest["vllm"] == "0.32.0" and rec.work.num_seqs == 8
    assert rec.manifest["omp_num_threads"] == "2" and rec.manifest["ray"]["node_cpus"] == 2


# --- on a cluster of its own: nodes die ---------------------------------------------------------

def test_lost_node_is_retried_elsewhere_and_nothing_is_left_behind(tmp_path, node_sweep):
    c = LocalCluster(tmp_path / "cluster")
    (tmp_path / "cluster").mkdir()
    left: list | None = None
    try:
        c.add_node("A", cpus=1)
        c.add_node("B", cpus=1)
        body = SCENARIO.replace("repeats: 2", "repeats: 1").replace(
            "{fake_sleep_s: 2.0}", f"{{fake_lose_node_once: {str(tmp_path / 'lost-1')!r}}}")
        res = sweep(_ray_args(tmp_path, c, body, workloads=("a",)))
        (rec,) = res.records
        lost_on = (tmp_path / "lost-1").read_text().split("-")[0]
        assert rec.status == "ok" and rec.attempt == 2 and rec.runner == "ray"
        assert {rec.node, lost_on} == {"A", "B"}, "the retry should run on the other node"
        (lost,) = rec.manifest["lost_attempts"]
        assert lost["attempt"] == 1 and lost["node_name"] == lost_on
        assert lost["error"].startswith(("NodeDiedError", "WorkerCrashedError"))
        (entry,) = json.loads(res.index_path.read_text())["runs"]
        assert entry["attempt"] == 2 and entry["node"] == rec.node and entry["lost_attempts"][0]["node_name"] == lost_on

        # The last node dies too: the run has nowhere left to go and is recorded as never measured.
        body2 = body.replace("lost-1", "lost-2").replace("name: m\n", "name: m2\n")
        res2 = sweep(_ray_args(tmp_path, c, body2, workloads=("a",)),
                     executor=RayExecutor(address=c.address, poll_s=1.0))
        (rec2,) = res2.records
        assert rec2.status == "failed" and rec2.failure.phase == "lost-node" and rec2.metrics.throughput_tok_s is None
        assert "no live harness_node node left" in rec2.failure.reason
        assert [x["node_name"] for x in rec2.manifest["lost_attempts"]] == [rec.node]
        assert record.read(res2.study_dir / "runs" / rec2.run_id / "results.json") == rec2
    finally:
        left = c.stop()
    assert left == [], f"Ray processes outlived the cluster: {left}"


def test_every_file_a_run_leaves_comes_back_and_none_lands_outside_its_folder(tmp_path):
    """What a node sends back: every file of the run's scratch folder (requests.json, a profile in a
    subfolder), landed under the run folder; a name that would climb out is refused."""
    from harness.measure.executors.ray import land, run_files

    scratch = tmp_path / "scratch"
    (scratch / "profile").mkdir(parents=True)
    (scratch / "run.log").write_text("log")
    (scratch / "requests.json").write_text("{}")
    (scratch / "profile" / "trace.json.gz").write_bytes(b"\x1f\x8b")
    (scratch / "results.json").write_text("{}")
    files = run_files(scratch)
    assert sorted(files) == ["profile/trace.json.gz", "requests.json", "run.log"]
    shipped = (Path(__file__).parents[1] / "results" / "cpu-engine-reuse" / "runs" / "per-run" / "cpu-0.32.0"
               / "tiny-llama" / "mixed" / "default" / "r1" / "results.json")
    rec = record.read(shipped)
    land(tmp_path / "run", rec, files)
    assert (tmp_path / "run" / "profile" / "trace.json.gz").read_bytes() == b"\x1f\x8b"
    with pytest.raises(UserError, match="outside"):
        land(tmp_path / "run2", rec, {"../escape.txt": b"x"})
