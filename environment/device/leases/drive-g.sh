#!/usr/bin/env bash
# The driver of the fifth lease's second machine (the first was given back mid-series, after the r1 pair
# of each leg): the crosscheck's pairs for h200-0.26.0 only, Llama-3.1-8B mixed, prefix caching off,
# repeats 2-4 measured here (--resume reuses the first machine's r1 pair; a pair is only ever the two
# runs of one invocation). Started by `tools/machine.sh setup` under setsid, like drive-f.sh.
set -u
cd /root/repo
export PYTHONPATH=/root/site-0.26.0 PYTHONUNBUFFERED=1
R=/root/R
LLAMA="Llama-3.1-8B (dummy weights)"
log() { echo "$(date -u +%FT%TZ) $*" >> "$R/drive.log"; }
said() { case $1 in 0) echo "rc=0";; 3) echo "rc=3 (finished, some runs not ok)";; *) echo "rc=$1 STOPPED";; esac; }
log "waiting for site-0.26.0"
t0=$SECONDS
while [ ! -e /root/site-0.26.0/.ready ]; do
  if [ $((SECONDS - t0)) -ge 600 ]; then log "drive-g done (site-0.26.0 never arrived)"; exit 1; fi
  sleep 2
done
log "J': crosscheck h200-0.26.0, $LLAMA mixed, repeats 4 (r1 carried), --resume"
python3 -m harness crosscheck h200-ablation --results "$R" --leg h200-0.26.0 --model "$LLAMA" --workload mixed \
    --repeats 4 --resume >> "$R/crosscheck-Jb.log" 2>&1
log "J' $(said $?)"
log "drive-g done"
