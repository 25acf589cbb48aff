#!/usr/bin/env bash
# The h200-modes lease, second machine (the first was taken back during paired block 2)'s driver (issue 32, item 2 on the H200): paired vs serial on one machine,
# interleaved in time, into the study h200-modes (results/h200-modes/README.md says what ran).
#   S1  serial series, repeat 1 (scenarios/h200-paired-serial.yaml: one engine per (repeat, leg), legs
#       alternating); its engines fill the torch.compile cache for the serial engines of both legs
#   P   paired series, 1 block x 4 pairs (--blocks 1) (scenarios/h200-paired.yaml: both legs' engines resident, the
#       idle one asleep in vLLM's sleep mode; sleep mode is its own compile-cache entry, so block 1
#       compiles for both legs alike)
#   S2  serial series, repeat 2 (repeat 1 reused by fingerprint)
# Beside them, GPU memory every second (the device's and each process's). Started by
# `environment/device/machine.sh setup` under setsid (DRIVER=drive-s PREV= pack.sh).
set -u
cd /root/repo
export PYTHONPATH=/root/site-0.26.0 PYTHONUNBUFFERED=1
R=/root/R
log() { echo "$(date -u +%FT%TZ) $*" >> "$R/drive.log"; }
said() { case $1 in 0) echo "rc=0";; 3) echo "rc=3 (finished, some runs not ok)";; *) echo "rc=$1 STOPPED";; esac; }
log "waiting for both site folders"
t0=$SECONDS
while [ ! -e /root/site-0.24.0/.ready ] || [ ! -e /root/site-0.26.0/.ready ]; do
  if [ $((SECONDS - t0)) -ge 1500 ]; then log "drive-s done (site folders never arrived)"; exit 1; fi
  sleep 2
done
(while :; do
   t=$(date -u +%FT%T.%3N)
   nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader,nounits | sed "s/^/$t,gpu,/"
   nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits | sed "s/^/$t,app,/"
   sleep 1
 done) >> "$R/gpu-mem.csv" 2>&1 &
mem=$!
log "S1: serial, repeat 1"
python3 -m harness sweep h200-paired-serial --study h200-modes-b --results "$R" --repeats 1 >> "$R/sweep-S1.log" 2>&1
log "S1 $(said $?)"
log "P: paired, 1 block x 4 pairs (--blocks 1), sleep on"
python3 -m harness sweep h200-paired --study h200-modes-b --results "$R" --blocks 1 --pairs 4 >> "$R/sweep-P.log" 2>&1
log "P $(said $?)"
log "S2: serial, repeat 2 (r1 reused)"
python3 -m harness sweep h200-paired-serial --study h200-modes-b --results "$R" --repeats 2 --resume >> "$R/sweep-S2.log" 2>&1
log "S2 $(said $?)"
kill "$mem" 2> /dev/null
log "drive-s done"
