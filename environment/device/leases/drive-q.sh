#!/usr/bin/env bash
# The h200-paired lease's second machine (the first was given back mid-sweep): the paired series only.
set -u
cd /root/repo
export PYTHONPATH=/root/site-0.26.0 PYTHONUNBUFFERED=1
R=/root/R
log() { echo "$(date -u +%FT%TZ) $*" >> "$R/drive.log"; }
log "waiting for both site folders"
while [ ! -e /root/site-0.24.0/.ready ]; do sleep 2; done
(while :; do
   t=$(date -u +%FT%T.%3N)
   nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader,nounits | sed "s/^/$t,gpu,/"
   nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits | sed "s/^/$t,app,/"
   sleep 1
 done) >> "$R/gpu-mem.csv" 2>&1 &
log "P: paired, 2 blocks x 5 pairs, sleep on"
python3 -m harness sweep h200-paired --study h200-paired --results "$R" >> "$R/sweep-P.log" 2>&1
log "P rc=$?"
log "drive-q done"
