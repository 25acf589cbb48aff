#!/usr/bin/env bash
# The H200 machine's side of a lease. The driver is drive.sh running c0/PLAN (c0/SITES, c0/BUDGET beside
# it).
# Each device call that pack.sh prints runs one subcommand,
# from the call's copy of the working tree (where this file travels):
#   setup      carry .gpu/e/c0: unpack the project snapshot to $ROOT/repo and the study's earlier records
#              to $ROOT/R, then start `unpack` and the driver, each under setsid so that they outlive
#              the call. Refused if this machine was set up already (a second driver would measure beside
#              the first).
#   part NN    carry .gpu/e/pNN: hand part NN to the unpacker (copied, then marked complete).
#   watch S    wait S seconds at most (less once the driver's log ends in "drive done"), then copy $ROOT/R
#              back into $OUT as R.tgz.N pieces of 15 MiB (a call brings back 8 files of 16 MiB at
#              most, 64 MiB in all); the kernel traces (up to 32 MB each) come back once, as T.tar.N,
#              in the first call after phase F where they fit beside R.
#   unpack     (started by setup) join the parts in order as they arrive, each checked against
#              SHA256SUMS, through zstd --long=31 into tar; $ROOT/site-<v>/.ready is written as soon as
#              tar has moved past that folder, so the driver can start on the first legs while the rest
#              travel. By hand, once every part is there, the same is:
#                cat $ROOT/parts/p?? | $ROOT/parts/zstd -dc --long=31 | tar xf - -C $ROOT
# ROOT (default /root) and OUT are variables so that pack.sh --test can run this here on a small input.
set -u
ROOT=${ROOT:-/root}
P=$ROOT/parts
here=$(cd "$(dirname "$0")" && pwd)
stamp() { date -u +%FT%TZ; }

zst() {
  if [ -x "$P/zstd" ] && "$P/zstd" --version > /dev/null 2>&1; then "$P/zstd" "$@"; else zstd "$@"; fi
}

feed() {  # the parts, in order, each once it is complete and its checksum matches
  local n i f
  n=$(grep -c ' p[0-9][0-9]$' "$P/SHA256SUMS")
  for i in $(seq -f %02g 0 $((n - 1))); do
    f=p$i
    until [ -e "$P/$f.ok" ] && (cd "$P" && grep " $f\$" SHA256SUMS | sha256sum -c --status -); do
      if [ -e "$P/$f.ok" ]; then
        echo "$(stamp) $f: checksum mismatch; send it again" >&2
        rm -f "$P/$f.ok"
      fi
      sleep 1
    done
    echo "$(stamp) $f joined" >&2
    cat "$P/$f"
  done
}

unpack() {
  local buf=""
  command -v stdbuf > /dev/null && buf="stdbuf -oL"  # tar's listing line by line, not in 4 KiB blocks
  set -o pipefail
  # tar -v names a member before extracting it, after the one before it is complete: the first name
  # under the next top folder means the previous folder is whole.
  feed | zst -dc --long=31 | $buf tar xvf - -C "$ROOT" | {
    cur=""
    while IFS= read -r path; do
      top=${path%%/*}
      if [ "$top" != "$cur" ]; then
        [ -n "$cur" ] && touch "$ROOT/$cur/.ready" && echo "$(stamp) $cur ready"
        cur=$top
        echo "$cur" > "$P/.last"
      fi
    done
  }
  local rc=$?
  if [ "$rc" = 0 ] && [ -s "$P/.last" ]; then
    touch "$ROOT/$(cat "$P/.last")/.ready"
    echo "$(stamp) $(cat "$P/.last") ready; all parts unpacked"
  else
    echo "$(stamp) unpack FAILED (exit $rc)"
  fi
  return "$rc"
}

setup() {
  local c=${C_DIR:-.gpu/e/c0}
  if [ -e "$ROOT/R/.setup" ]; then
    echo "this machine was set up at $(cat "$ROOT/R/.setup"); not starting a second driver"
    return 1
  fi
  [ -e "$c/PLAN" ] || { echo "no PLAN in $c: pack.sh writes it (docs/device.md)"; return 1; }
  mkdir -p "$P" "$ROOT/R"
  cp "$c"/* "$P"/ || return 1
  chmod +x "$P/zstd"
  "$P/zstd" --version || echo "the carried zstd does not run here; using: $(command -v zstd || echo none)"
  rm -rf "$ROOT/repo" && mkdir -p "$ROOT/repo" && tar xzf "$P/repo.tgz" -C "$ROOT/repo" || return 1
  tar xzf "$P/R-prev.tgz" -C "$ROOT/R" || return 1
  cp "$here/drive.sh" "$ROOT/" || return 1
  cp "$here/machine.sh" "$ROOT/" || return 1
  stamp > "$ROOT/R/.setup"
  # Each in a session of its own, whose id is its pid (kill -- -PID ends it with its pipeline).
  setsid nohup bash "$ROOT/machine.sh" unpack > "$ROOT/R/unpack.log" 2>&1 < /dev/null &
  echo $! > "$ROOT/R/unpack.pid"
  if [ -z "${NO_DRIVER:-}" ]; then
    setsid nohup bash "$ROOT/drive.sh" > "$ROOT/R/drive.out" 2>&1 < /dev/null &
    echo $! > "$ROOT/R/drive.pid"
  fi
  git -C "$ROOT/repo" log --oneline -1 2> /dev/null
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2> /dev/null
  python3 -V; df -h "$ROOT" | tail -1
}

part() {
  local f=p$1
  cp ".gpu/e/$f" "$P/$f.tmp" && mv "$P/$f.tmp" "$P/$f" && touch "$P/$f.ok" || return 1
  sleep 1
  tail -n 2 "$ROOT/R/unpack.log"
}

back() {  # $ROOT/R into $OUT: R without the traces, then the traces once, if they fit
  [ -n "${OUT:-}" ] || return 0
  local mib=$((1024 * 1024)) used n
  tar czf "$ROOT/back.tgz" -C "$ROOT" --exclude='*.pt.trace.json.gz' R
  used=$(stat -c %s "$ROOT/back.tgz")
  [ "$used" -le $((60 * mib)) ] || echo "R is $((used / mib)) MiB packed: only its first 60 MiB come back"
  split -b 15M -d -a 1 "$ROOT/back.tgz" "$OUT/R.tgz."
  n=$(ls "$OUT" | wc -l)
  if [ ! -e "$ROOT/R/.traces-back" ] && grep -q 'F profile-diff' "$ROOT/R/drive.log" 2> /dev/null; then
    (cd "$ROOT" && find R -name '*.pt.trace.json.gz') > "$ROOT/traces.lst"
    if [ -s "$ROOT/traces.lst" ]; then
      tar cf "$ROOT/traces.tar" -C "$ROOT" -T "$ROOT/traces.lst"
      local t; t=$(stat -c %s "$ROOT/traces.tar")
      if [ $((used + t)) -le $((62 * mib)) ] && [ $((n + (t + 15 * mib - 1) / (15 * mib))) -le 8 ]; then
        split -b 15M -d -a 1 "$ROOT/traces.tar" "$OUT/T.tar."
        stamp > "$ROOT/R/.traces-back"
        echo "traces: $(wc -l < "$ROOT/traces.lst") files, $((t / mib)) MiB, in T.tar.*"
      else
        echo "traces ($((t / mib)) MiB) do not fit beside R this call; they stay on the machine"
      fi
    fi
  fi
  ls -l "$OUT"
}

watch() {
  local limit=${1:-560} t0=$SECONDS
  # The log's last line, not any line: a driver started again in the same lease appends after the first
  # one's "drive done", and watch then waits for the newest driver. (No pipe into grep -q: under
  # pipefail a writer cut off by grep's early exit would fail the test.)
  while [ $((SECONDS - t0)) -lt "$limit" ]; do
    case "$(tail -n 1 "$ROOT/R/drive.log" 2> /dev/null)" in *"drive done") break ;; esac
    sleep 5
  done
  echo "--- drive.log"; tail -n 30 "$ROOT/R/drive.log" 2> /dev/null
  echo "--- unpack.log"; tail -n 3 "$ROOT/R/unpack.log" 2> /dev/null
  local last; last=$(ls -t "$ROOT"/R/*.log 2> /dev/null | grep -v -e drive.log -e unpack.log | sed -n 1p)  # sed reads it all: no SIGPIPE
  [ -n "$last" ] && echo "--- $last" && tail -n 6 "$last"
  back
}

cmd=${1:-}
shift || true
case $cmd in
  setup|part|watch|unpack|back) "$cmd" "$@" ;;
  *) echo "usage: machine.sh setup | part NN | watch SECONDS | unpack | back" >&2; exit 2 ;;
esac
