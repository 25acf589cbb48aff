#!/usr/bin/env bash
# The driver of the third lease (MoE, image model, crosscheck on 0.24.0, engine-reuse series), on the
# H200 machine, started with `setsid` so that it outlives the 10-minute calls that watch it; every
# call copies /root/R back. Phases, in order of what the study most needs if the time runs out:
#   A   OLMoE-1B-7B on h200-0.26.0, repeats 1-2 (while 0.24.0's packages are still arriving)
#   B   OLMoE-1B-7B, both legs, 3 repeats, --resume (A's runs are reused, never re-measured)
#   C1  Qwen2-VL-7B on h200-0.26.0, repeat 1; only if it finished: C, both legs, 3 repeats
#   D   crosscheck on Llama-3.1-8B mixed, h200-0.24.0, prefix caching off (per-run engines)
#   E   engine-reuse series: Llama-3.1-8B on h200-0.26.0, one engine per run (h200-reuse-per-run)
#   F   kernel profiles, both legs, one repeat: OLMoE-1B-7B mixed, then Qwen2-VL-7B image (arm
#       default-profiled, never canonical), for profile-diff if the lease lasts
# Expects the project snapshot at /root/repo, vLLM 0.26.0 in /root/site-0.26.0 and, before
# phase B, vLLM 0.24.0 in /root/site-0.24.0 (its `.ready` marker is written last).
set -u
cd /root/repo
export PYTHONPATH=/root/site-0.26.0 PYTHONUNBUFFERED=1
R=/root/R
OL="OLMoE-1B-7B (dummy weights)"
VL="Qwen2-VL-7B (dummy weights)"
LLAMA="Llama-3.1-8B (dummy weights)"
mkdir -p "$R"
log() { echo "$(date -u +%FT%TZ) $*" >> "$R/drive.log"; }
sweep() { python3 -m harness sweep h200-ablation --results "$R" --resume "$@"; }
log "A: $OL on h200-0.26.0, repeats 1-2"
sweep --leg h200-0.26.0 --model "$OL" --repeats 2 >> "$R/sweep-A.log" 2>&1
log "A rc=$?"
while [ ! -e /root/site-0.24.0/.ready ]; do sleep 2; done
log "B: $OL, both legs, 3 repeats"
sweep --model "$OL" >> "$R/sweep-B.log" 2>&1
log "B rc=$?"
log "C1: $VL on h200-0.26.0, repeat 1"
sweep --leg h200-0.26.0 --model "$VL" --repeats 1 >> "$R/sweep-C.log" 2>&1
log "C1 rc=$?"
# The sweep's exit status does not say whether runs failed; the records do.
ok=$(grep -l '"status": "ok"' "$R"/h200-ablation/runs/h200-ablation/h200-0.26.0/Qwen2-VL-7B*/*/default/r1/results.json 2>/dev/null | wc -l)
log "C1 ok runs: $ok"
if [ "$ok" -ge 1 ]; then
  log "C: $VL, both legs, 3 repeats"
  sweep --model "$VL" >> "$R/sweep-C.log" 2>&1
  log "C rc=$?"
fi
log "D: crosscheck h200-0.24.0, $LLAMA mixed, repeats 1"
python3 -m harness crosscheck h200-ablation --results "$R" --leg h200-0.24.0 --model "$LLAMA" \
    --workload mixed --repeats 1 --resume >> "$R/crosscheck.log" 2>&1
log "D rc=$?"
log "E: engine-reuse series (per-run) on h200-0.26.0"
python3 -m harness sweep h200-reuse-per-run --study h200-ablation --results "$R" --resume >> "$R/sweep-E.log" 2>&1
log "E rc=$?"
log "F: profiled OLMoE mixed, both legs"
sweep --model "$OL" --workload mixed --repeats 1 --profile 1 >> "$R/sweep-F.log" 2>&1
log "F rc=$?"
log "F2: profiled Qwen2-VL image, both legs"
sweep --model "$VL" --workload image --repeats 1 --profile 1 >> "$R/sweep-F.log" 2>&1
log "F2 rc=$?"
log "done"
