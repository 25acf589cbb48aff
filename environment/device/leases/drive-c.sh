#!/usr/bin/env bash
# What replaced the tail of drive.sh on the second machine while phase B1 was measuring (drive.sh's
# bash was ended, B1's sweep kept running): B2 (Mixtral-8x7B) was dropped because the device time
# left could not hold three repeats of it on both legs, and the crosscheck ran one leg at a time,
# so that one leg's pair would be complete when the time ran out. Started as
# `setsid /root/drive-c.sh PID_OF_B1_SWEEP`.
set -u
cd /root/repo
export PYTHONPATH=/root/site-0.26.0 PYTHONUNBUFFERED=1
R=/root/R
log() { echo "$(date -u +%FT%TZ) $*" >> "$R/drive.log"; }
log "B2 dropped for device time; waiting for the B1 sweep (pid $1)"
while kill -0 "$1" 2>/dev/null; do sleep 2; done
log "B1 ended"
for leg in h200-0.26.0 h200-0.24.0; do
  log "C: crosscheck $leg, repeats 1"
  python3 -m harness crosscheck h200-ablation --results "$R" --leg "$leg" --model "Llama-3.1-8B (dummy weights)" --workload mixed --repeats 1 --resume >> "$R/crosscheck.log" 2>&1
  log "C $leg rc=$?"
done
