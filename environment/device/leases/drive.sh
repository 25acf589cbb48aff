#!/usr/bin/env bash
# The study's driver on the H200 machine, started with `setsid` so that it outlives the 10-minute
# calls that start and watch it; every call copies /root/R back. Phases, in order:
#   A   Llama-3.1-8B on leg h200-0.26.0, repeats 1-2 (measured while 0.24.0's wheels were still
#       being transferred; in alternate order repeat 2 starts with 0.26.0 anyway)
#   B1  Llama-3.1-8B, both legs, 3 repeats, --resume (A's runs are reused, never re-measured)
#   B2  the whole scenario, --resume: what is left is Mixtral-8x7B
#   C   crosscheck on Llama mixed, both legs, prefix caching off, repeats 1, 2, 3 with --resume
# Dense first, MoE second, crosscheck last: the order of what the study must have if the device
# time runs out. Runs already in /root/R (carried back from an earlier machine) are reused by
# fingerprint as well.
# Expects the project at /root/repo, vLLM 0.26.0 in /root/site-0.26.0 and, before phase B,
# vLLM 0.24.0 in /root/site-0.24.0 (its `.ready` marker is written last by the install step).
set -u
cd /root/repo
export PYTHONPATH=/root/site-0.26.0 PYTHONUNBUFFERED=1
R=/root/R
LLAMA="Llama-3.1-8B (dummy weights)"
mkdir -p "$R"
log() { echo "$(date -u +%FT%TZ) $*" >> "$R/drive.log"; }
log "A: $LLAMA on h200-0.26.0, repeats 1-2, --resume"
python3 -m harness sweep h200-ablation --results "$R" --leg h200-0.26.0 --model "$LLAMA" --repeats 2 \
    --resume >> "$R/sweep-A.log" 2>&1
log "A rc=$?"
while [ ! -e /root/site-0.24.0/.ready ]; do sleep 2; done
log "B1: $LLAMA, both legs, 3 repeats, --resume"
python3 -m harness sweep h200-ablation --results "$R" --model "$LLAMA" --resume >> "$R/sweep-B.log" 2>&1
log "B1 rc=$?"
log "B2: the rest (Mixtral-8x7B), --resume"
python3 -m harness sweep h200-ablation --results "$R" --resume >> "$R/sweep-B.log" 2>&1
log "B2 rc=$?"
for n in 1 2 3; do
  log "C: crosscheck, repeats $n"
  python3 -m harness crosscheck h200-ablation --results "$R" --model "$LLAMA" \
      --workload mixed --repeats "$n" --resume >> "$R/crosscheck.log" 2>&1
  log "C$n rc=$?"
done
log "done"
