#!/usr/bin/env bash
# The driver of the fifth lease (the crosscheck's pairs on one machine, then the timed share), on the
# H200 machine. `tools/machine.sh setup` starts it with setsid, so that it outlives the 10-minute calls
# that watch it; every watch call copies /root/R back. Phases, most needed first:
#   J  crosscheck of Llama-3.1-8B mixed, prefix caching off, both legs in one invocation: repetition
#      outermost, legs alternating, each repeat's pair back to back with its order alternating (odd
#      repeats the harness first). Repeats 1-3 first, --supersede: every earlier pair (leases 1, 3, 4,
#      one of them broken by the end of lease 4) moves to superseded/, so that all pairs stand on this
#      one machine. Then repeat 4, --resume, if the time allows.
#   K  timed share: one group of Llama-3.1-8B's four text workloads on h200-0.26.0, each repeating its
#      pass until 30 s are timed (scenarios/h200-timed-share.yaml, series long-timed).
# Expects the project snapshot at /root/repo, the study's earlier records in /root/R/h200-ablation and
# the site folders /root/site-<v>, each usable once its `.ready` marker exists (tools/machine.sh unpack).
set -u
cd /root/repo
export PYTHONPATH=/root/site-0.26.0 PYTHONUNBUFFERED=1
R=/root/R
LLAMA="Llama-3.1-8B (dummy weights)"
mkdir -p "$R"
log() { echo "$(date -u +%FT%TZ) $*" >> "$R/drive.log"; }
said() { case $1 in 0) echo "rc=0";; 3) echo "rc=3 (finished, some runs not ok)";; *) echo "rc=$1 STOPPED";; esac; }
ready() {  # ready SECONDS V...: wait until each site folder is unpacked, SECONDS in all
  local limit=$1 t0=$SECONDS v
  shift
  for v in "$@"; do
    while [ ! -e "/root/site-$v/.ready" ]; do
      if [ $((SECONDS - t0)) -ge "$limit" ]; then log "site-$v not ready after ${limit} s"; return 1; fi
      sleep 2
    done
  done
}
CC=(crosscheck h200-ablation --results "$R" --model "$LLAMA" --workload mixed)

log "waiting for site-0.26.0 and site-0.24.0"
if ! ready 900 0.26.0 0.24.0; then log "drive-f done (the legs never arrived)"; exit 1; fi

log "J: crosscheck $LLAMA mixed, both legs, repeats 1-3, --supersede"
python3 -m harness "${CC[@]}" --repeats 3 --supersede >> "$R/crosscheck-J.log" 2>&1
log "J $(said $?)"
log "J4: crosscheck repeat 4, --resume"
python3 -m harness "${CC[@]}" --repeats 4 --resume >> "$R/crosscheck-J.log" 2>&1
log "J4 $(said $?)"

log "K: timed share, $LLAMA on h200-0.26.0, 30 s timed per workload"
python3 -m harness sweep h200-timed-share --study h200-ablation --results "$R" --leg h200-0.26.0 \
    >> "$R/sweep-K.log" 2>&1
log "K $(said $?)"
log "drive-f done"
