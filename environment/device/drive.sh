#!/usr/bin/env bash
# The one lease driver: runs a plan's stages in order on the device machine, each a command line of the
# project (usually `python3 -m harness sweep ...`), and logs what each did. Started by `machine.sh setup`
# under setsid, so it outlives the device call that started it; `machine.sh watch` copies $ROOT/R back.
#
#   $ROOT/parts/PLAN    the stages, one a line: NAME COMMAND...   ('#' lines and blank lines skipped)
#                       NAME names its log ($ROOT/R/NAME.log); COMMAND runs with bash in $ROOT/repo
#   $ROOT/parts/SITES   the site folders the plan needs (e.g. "0.26.0 0.24.0"): the driver waits for each
#                       one's .ready marker (written by `machine.sh unpack`) before the first stage
#   $ROOT/parts/BUDGET  seconds: no stage starts once this much time has passed since the first stage
#                       began (a stage that started runs on; the lease's own limit stops it, its records
#                       stay). The wait for the site folders has its own limit, SITE_WAIT_S (1500).
#   PYTHONPATH          $ROOT/site-<first of SITES>: the image's torch plus that vLLM (legs name their own)
#
# Beside the stages: the device's and each process's GPU memory once a second ($ROOT/R/gpu-mem.csv), and
# the card's clocks, power and temperature ($ROOT/R/gpu-state.csv).
# The last line of $ROOT/R/drive.log is "drive done" (what `machine.sh watch` waits for).
# ROOT is a variable so that `pack.sh --test` runs this here, offline, with a plan of plain commands.
set -u
ROOT=${ROOT:-/root}
P=$ROOT/parts
R=$ROOT/R
mkdir -p "$R"
log() { echo "$(date -u +%FT%TZ) $*" >> "$R/drive.log"; }
sites=$(cat "$P/SITES" 2> /dev/null || true)
budget=$(cat "$P/BUDGET" 2> /dev/null || echo 1500)
t0=$SECONDS
log "waiting for site folders: ${sites:-none}"
for v in $sites; do
  while [ ! -e "$ROOT/site-$v/.ready" ]; do
    if [ $((SECONDS - t0)) -ge "${SITE_WAIT_S:-1500}" ]; then log "site-$v never arrived"; log "drive done"; exit 1; fi
    sleep 2
  done
done
first=${sites%% *}
[ -n "$first" ] && export PYTHONPATH=$ROOT/site-$first
export PYTHONUNBUFFERED=1
mem=""
if command -v nvidia-smi > /dev/null; then
  # And what the card runs at (two cards of one model can serve at different speeds): SM clock, power,
  # temperature and why the clock is held down, where the driver knows that field (gpu-state.csv).
  state=clocks.sm,clocks.mem,power.draw,power.limit,temperature.gpu,pstate,clocks_event_reasons.active
  nvidia-smi --query-gpu="$state" --format=csv,noheader > /dev/null 2>&1 \
    || state=clocks.sm,clocks.mem,power.draw,power.limit,temperature.gpu,pstate
  echo "time,$state" >> "$R/gpu-state.csv"
  (while :; do
     t=$(date -u +%FT%T.%3N)
     nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader,nounits | sed "s/^/$t,gpu,/"
     nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits | sed "s/^/$t,app,/"
     nvidia-smi --query-gpu="$state" --format=csv,noheader,nounits | sed "s/^/$t,/" >> "$R/gpu-state.csv"
     sleep 1
   done) >> "$R/gpu-mem.csv" 2>&1 &
  mem=$!
fi
cd "$ROOT/repo" || { log "no project snapshot in $ROOT/repo"; log "drive done"; exit 1; }
t0=$SECONDS
while read -r name cmd; do
  case $name in ''|'#'*) continue ;; esac
  if [ $((SECONDS - t0)) -ge "$budget" ]; then
    log "$name: not started (the budget of $budget s is spent)"
    continue
  fi
  log "$name: $cmd"
  bash -c "$cmd" >> "$R/$name.log" 2>&1
  rc=$?
  case $rc in 0) said="rc=0" ;; 3) said="rc=3 (finished, some runs not ok)" ;; *) said="rc=$rc STOPPED" ;; esac
  log "$name $said"
done < "$P/PLAN"
[ -n "$mem" ] && kill "$mem" 2> /dev/null
log "drive done"
