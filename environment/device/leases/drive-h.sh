#!/usr/bin/env bash
# A driver for the next lease (not run yet): what the fifth lease left open, most needed first.
#   L  crosscheck of Llama-3.1-8B mixed on h200-0.24.0, repeats 3-4 (r1-r2 carried and reused; a pair is
#      only ever the two runs of one invocation, so the carried pairs stay pairs), --prime: one harness
#      engine first, kept under arm prime-no-prefix-cache, so that the new pairs start on warm caches.
#   K  timed share: one group of Llama-3.1-8B's four text workloads on h200-0.24.0, each repeating its pass
#      until 30 s are timed (scenarios/h200-timed-share.yaml, series long-timed).
#   M  while the lease lasts: two more pairs for the same row (repeats 6, --resume: r1-r4 reused).
# Started by `tools/machine.sh setup` under setsid (VERSIONS=0.24.0 DRIVER=drive-h pack.sh: only
# site-0.24.0 travels, and the harness runs from it too; its other wheels are 0.26.0's but for four pins).
set -u
cd /root/repo
export PYTHONPATH=/root/site-0.24.0 PYTHONUNBUFFERED=1
R=/root/R
LLAMA="Llama-3.1-8B (dummy weights)"
log() { echo "$(date -u +%FT%TZ) $*" >> "$R/drive.log"; }
said() { case $1 in 0) echo "rc=0";; 3) echo "rc=3 (finished, some runs not ok)";; *) echo "rc=$1 STOPPED";; esac; }
log "waiting for site-0.24.0"
t0=$SECONDS
while [ ! -e /root/site-0.24.0/.ready ]; do
  if [ $((SECONDS - t0)) -ge 900 ]; then log "drive-h done (site-0.24.0 never arrived)"; exit 1; fi
  sleep 2
done
log "L: crosscheck h200-0.24.0, $LLAMA mixed, repeats 4 (r1-r2 carried), --resume --prime"
python3 -m harness crosscheck h200-ablation --results "$R" --leg h200-0.24.0 --model "$LLAMA" --workload mixed \
    --repeats 4 --resume --prime >> "$R/crosscheck-L.log" 2>&1
log "L $(said $?)"
log "K: timed share, $LLAMA on h200-0.24.0, 30 s timed per workload"
python3 -m harness sweep h200-timed-share --study h200-ablation --results "$R" --leg h200-0.24.0 \
    >> "$R/sweep-K.log" 2>&1
log "K $(said $?)"
log "M: crosscheck h200-0.24.0, $LLAMA mixed, repeats 6 (r1-r4 reused), --resume"
python3 -m harness crosscheck h200-ablation --results "$R" --leg h200-0.24.0 --model "$LLAMA" --workload mixed \
    --repeats 6 --resume >> "$R/crosscheck-M.log" 2>&1
log "M $(said $?)"
log "drive-h done"
