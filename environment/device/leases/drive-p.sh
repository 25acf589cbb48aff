#!/usr/bin/env bash
# The h200-paired lease's driver (issue 32, item 2 on the H200): paired vs serial on one machine,
# interleaved in time, into the study h200-paired (results/h200-paired/README.md says what ran).
#   Z   primers, one engine per leg (single-request, into the throwaway study h200-paired-primer): the
#       serial engines' torch.compile cache filled for both legs alike, 0.26.0's while 0.24.0's parts
#       still travel (its site folder comes first in the stream)
#   S1  serial series, repeat 1 (scenarios/h200-paired-serial.yaml: one engine per (repeat, leg), legs
#       alternating)
#   P   paired series, both blocks (scenarios/h200-paired.yaml: 2 blocks x 5 pairs, both legs' engines
#       resident, the idle one asleep in vLLM's sleep mode)
#   S2  serial series, repeats 2-3 (repeat 1 reused by fingerprint)
# Beside them, GPU memory every second (the device's and each process's), to show what a sleeping
# engine holds while the other one is timed. Started by `tools/machine.sh setup` under setsid
# (VERSIONS="0.26.0 0.24.0" DRIVER=drive-p PREV= pack.sh).
set -u
cd /root/repo
export PYTHONPATH=/root/site-0.26.0 PYTHONUNBUFFERED=1
R=/root/R
log() { echo "$(date -u +%FT%TZ) $*" >> "$R/drive.log"; }
said() { case $1 in 0) echo "rc=0";; 3) echo "rc=3 (finished, some runs not ok)";; *) echo "rc=$1 STOPPED";; esac; }
site() {  # wait for /root/site-$1
  local t0=$SECONDS
  while [ ! -e "/root/site-$1/.ready" ]; do
    if [ $((SECONDS - t0)) -ge 1500 ]; then log "drive-p done (site-$1 never arrived)"; exit 1; fi
    sleep 2
  done
}
prime() {
  log "Z: primer h200-$1 (study h200-paired-primer)"
  python3 -m harness sweep h200-paired-serial --study h200-paired-primer --results "$R" --leg "h200-$1" \
      --workload single-request --repeats 1 >> "$R/sweep-Z.log" 2>&1
  log "Z $1 $(said $?)"
}
log "waiting for site-0.26.0"
site 0.26.0
(while :; do
   t=$(date -u +%FT%T.%3N)
   nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader,nounits | sed "s/^/$t,gpu,/"
   nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits | sed "s/^/$t,app,/"
   sleep 1
 done) >> "$R/gpu-mem.csv" 2>&1 &
mem=$!
prime 0.26.0
log "waiting for site-0.24.0"
site 0.24.0
prime 0.24.0
log "S1: serial, repeat 1"
python3 -m harness sweep h200-paired-serial --study h200-paired --results "$R" --repeats 1 >> "$R/sweep-S1.log" 2>&1
log "S1 $(said $?)"
log "P: paired, 2 blocks x 5 pairs, sleep on"
python3 -m harness sweep h200-paired --study h200-paired --results "$R" >> "$R/sweep-P.log" 2>&1
log "P $(said $?)"
log "S2: serial, repeats 2-3 (r1 reused)"
python3 -m harness sweep h200-paired-serial --study h200-paired --results "$R" --repeats 3 --resume >> "$R/sweep-S2.log" 2>&1
log "S2 $(said $?)"
kill "$mem" 2> /dev/null
log "drive-p done"
