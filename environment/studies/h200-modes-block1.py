"""h200-modes, machine 1: paired block 1's passes from the engines' replies.jsonl (the block's records
were never written: the machine was taken back before the sweep wrote them). Pass i of an engine's
replies is matched to its workload by the seconds each workload's run.jsonl logged at pass_end."""
import json, math, statistics as st, sys
from scipy import stats
base = sys.argv[1] if len(sys.argv) > 1 else "R/h200-modes/runs/paired"
vals = {}
for leg in ["h200-0.24.0", "h200-0.26.0"]:
    d = f"{base}/{leg}/Llama-3.1-8B_dummy_weights_"
    reps = [json.loads(l) for l in open(f"{d}/engine-default-b1/replies.jsonl")]
    passes = [r for r in reps if r.get("cmd") == "pass"]
    print(leg, "wake s", [round(r["seconds"], 3) for r in reps if r.get("cmd") == "wake"],
          "sleep s", [round(r["seconds"], 3) for r in reps if r.get("cmd") == "sleep"])
    for wl in ["mixed", "single-request"]:
        ev = [json.loads(l) for l in open(f"{d}/{wl}/default/r1/run.jsonl")]
        ends = [(e["round"], e["seconds"]) for e in ev if e["phase"] == "pass_end"]
        vals[(leg, wl)] = {rnd: next(p["value"] for p in passes if abs(p["seconds"] - s) < 1e-6) for rnd, s in ends}
for wl, higher_is_better in [("mixed", True), ("single-request", False)]:
    a, b = vals[("h200-0.24.0", wl)], vals[("h200-0.26.0", wl)]
    print(wl, "0.24.0", {k: round(v, 3) for k, v in a.items()}, "0.26.0", {k: round(v, 3) for k, v in b.items()})
    d = [math.log(b[r] / a[r]) if higher_is_better else math.log(a[r] / b[r]) for r in sorted(a) if r in b]
    m, s, n = st.mean(d), st.stdev(d), len(d)
    h = stats.t.ppf(0.975, n - 1) * s / math.sqrt(n)
    print(f"  {n} pairs: 0.26 vs 0.24 (above 1 faster) {math.exp(m):.4f} [{math.exp(m - h):.4f}, {math.exp(m + h):.4f}]"
          f" within one engine block; pair log sd {s:.4f}")
