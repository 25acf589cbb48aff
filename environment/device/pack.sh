#!/usr/bin/env bash
# Builds here, on the development machine, what an H200 lease carries, and prints the device
# calls that send it. From the project root, after committing (the snapshot is HEAD, not the tree):
#   PLAN=FILE [VERSIONS="0.26.0 0.24.0"] [BUDGET=1500] [PREV=STUDY] [DROP=...] environment/device/pack.sh
#   environment/device/pack.sh --test   the stream, parts, machine-side unpack and the driver running a
#                                       plan, on a small stand-in input, here, offline (seconds)
# The arguments (docs/device.md):
#   PLAN      the lease's stages, one a line: NAME COMMAND... (drive.sh runs them in order on the machine,
#             in the project snapshot, with /root/R as the results folder: `--results /root/R`). A study
#             keeps its plan as the exact command lines it was measured with.
#   VERSIONS  the vLLM site folders to carry, in stream order (the first one is ready first, and is
#             the driver's PYTHONPATH); each built from its verified wheel list
#   BUDGET    seconds after the first stage began from which the driver starts no further stage
#   PREV      a study under results/ whose records travel too (for --resume), default none
#   DROP      files or folders (relative to each site folder) left out of the stream
#   KEEP_STREAM=1  keep .gpu/e/p?? when they were cut from the same site folders (their stamps), in
#             the same order, with the same DROP: what .gpu/e/STREAM says (skips minutes of zstd on
#             a host that may be measuring)
# Into .gpu/e/ (ignored by git):
#   c0/   the first call's carry: repo.tgz (HEAD, depth 1, with its .git so each record names the commit;
#         without results/), R-prev.tgz (PREV's records), PLAN, SITES, BUDGET, zstd (the machine has
#         none) and SHA256SUMS of the parts
#   pNN   one zstd --long=31 stream of one tar of the site folders in VERSIONS order (folders that share
#         most files, like 0.24.0 and 0.25.x, compress together in the long window), cut into parts that
#         fit a call beside the working tree (56 MiB at most: PART_MAX_MIB). A working tree of a few MiB
#         (results/ moved out of the checkout for the lease) leaves room for 56 MiB parts: two legs'
#         site folders (212 MiB) then travel in five calls, about one minute.
# Wheel lists: ../shared/gpu/vllm-0.24.0-wheels.txt and vllm-gpu-wheels.txt (0.26.0), verified; this
# folder's vllm-0.25.0/0.25.1-wheels.txt, derived; on the fourth lease they resolved as legs there but
# no engine started on them. serve-wheels.txt (what `vllm serve` needs beyond them) is added to each.
set -euo pipefail
here=environment/device
G=${PACK_DIR:-.gpu}
E=$G/e
VERSIONS=${VERSIONS:-0.26.0 0.24.0}
PLAN=${PLAN:-}
BUDGET=${BUDGET:-1500}
# The h200-paired and h200-modes leases left out vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so
# (FlashAttention 2; on Hopper vLLM runs FA3, and its loader treats a missing FA2 as unavailable),
# vllm/vllm-rs (the Rust frontend binary of `vllm serve`) and vllm/third_party/fmha_sm100 (Blackwell
# kernels' sources): 212 MiB of stream for two legs instead of 313.
PREV=${PREV-}
DROP=${DROP:-}
TREE_LIMIT_MIB=64
PLAT="--platform manylinux_2_31_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
  --platform manylinux_2_26_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_5_x86_64 --platform any"
PY=${PY:-.venv/bin/python}

wheel_list() {
  case $1 in
    0.24.0) echo ../shared/gpu/vllm-0.24.0-wheels.txt ;;
    0.26.0) echo ../shared/gpu/vllm-gpu-wheels.txt ;;
    *) echo "$here/vllm-$1-wheels.txt" ;;
  esac
}

tree_mib() {  # what travels with every call: tracked and untracked-not-ignored files, in MiB, rounded up
  "$PY" - <<'EOF'
import os, subprocess
out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                     capture_output=True, check=True).stdout.split(b"\0")
total = sum(os.path.getsize(f) for f in out if f and os.path.isfile(f))
print(-(-total // (1 << 20)))
EOF
}

# One file per pin of the list, or the pin it lacks; the wheel files on stdout.
wheel_files() {
  "$PY" - "$1" "$2" <<'EOF'
import pathlib, sys
from packaging.utils import canonicalize_name, parse_wheel_filename
pins = [l.strip() for l in open(sys.argv[1]) if l.strip() and not l.startswith("#")]
have = {}
for w in pathlib.Path(sys.argv[2]).glob("*.whl"):
    name, ver, _, _ = parse_wheel_filename(w.name)
    have[(canonicalize_name(name), str(ver))] = w
missing = []
for pin in pins:
    name, ver = pin.split("==")
    w = have.get((canonicalize_name(name), ver))
    print(w) if w else missing.append(pin)
if missing:
    sys.exit(f"{sys.argv[2]}: no wheel for {', '.join(missing)}")
EOF
}

stream() {  # stream SITE_DIR OUT_DIR PART_BYTES V...: the tar of SITE_DIR/site-V..., compressed, cut, summed
  local site=$1 out=$2 bytes=$3
  shift 3
  local dirs=()
  for v in "$@"; do dirs+=("site-$v"); done
  mkdir -p "$out"
  rm -f "$out"/p?? "$out/SHA256SUMS"
  tar cf - -C "$site" --sort=name --owner=0 --group=0 --numeric-owner "${dirs[@]}" \
    | zstd -q -T"${ZSTD_THREADS:-2}" "-${ZSTD_LEVEL:-12}" --long=31 \
    | split -b "$bytes" -d -a 2 - "$out/p"
  (cd "$out" && sha256sum p?? > SHA256SUMS)
}

print_calls() {  # print_calls PART_DIR: the device calls, in order
  local n
  n=$(grep -c ' p[0-9][0-9]$' "$1/SHA256SUMS")
  echo
  echo "Device calls, in order (kind nvidia-h200; send them back to back: 30 s idle gives the machine back):"
  echo "{\"command\": \"bash $here/machine.sh setup\", \"carry\": [\".gpu/e/c0\"], \"timeout_s\": 120}"
  for i in $(seq -f %02g 0 $((n - 1))); do
    echo "{\"command\": \"bash $here/machine.sh part $i\", \"carry\": [\".gpu/e/p$i\"], \"timeout_s\": 60}"
  done
  echo "then, until the driver logs 'drive done' or the time is spent (each copies /root/R back as R.tgz.N,"
  echo "and the kernel traces once as T.tar.N; make the last one end before the budget does):"
  echo "{\"command\": \"bash $here/machine.sh watch 560\", \"timeout_s\": 600}"
  echo
  echo "On the machine, machine.sh setup unpacks c0 (tar xzf repo.tgz -C /root/repo; tar xzf R-prev.tgz -C /root/R),"
  echo "starts 'machine.sh unpack' (joins p00..p$(printf %02d $((n - 1))) as they arrive, checked against SHA256SUMS:"
  echo "  cat /root/parts/p?? | /root/parts/zstd -dc --long=31 | tar xf - -C /root"
  echo "and writes /root/site-<v>/.ready per folder) and environment/device/drive.sh (running PLAN), both under setsid."
  echo "Here, after each watch call: cat FILES_AT/R.tgz.* | tar xzf - -C SOMEWHERE; R/<study> goes to"
  echo "results/<study> with the plan and logs; cat FILES_AT/T.tar.* | tar xf - for the traces."
}

selftest() {
  TEST_DIR=$(mktemp -d)
  local t=$TEST_DIR
  # The unpacker this test starts runs in a session of its own: end that session, then remove the files.
  trap 'p=$(cat "$TEST_DIR/root/R/unpack.pid" 2> /dev/null) && kill -- -"$p" 2> /dev/null || true; rm -rf "$TEST_DIR"' EXIT
  # Stand-in site folders: shared and own files, as the real ones share most of theirs.
  head -c 300000 /dev/urandom > "$t/shared.bin"
  for v in 0.26.0 0.24.0; do
    mkdir -p "$t/site/site-$v/pkg"
    cp "$t/shared.bin" "$t/site/site-$v/pkg/big.so"
    head -c 100000 /dev/urandom > "$t/site/site-$v/pkg/own.so"
    echo "$v" > "$t/site/site-$v/pkg/VERSION"
  done
  stream "$t/site" "$t/e" 65536 0.26.0 0.24.0
  mkdir -p "$t/e/c0" "$t/root" "$t/out"
  cp "$t/e/SHA256SUMS" "$t/e/c0/"
  cp "$(command -v zstd)" "$t/e/c0/zstd"
  echo "r" > "$t/r.txt" && tar czf "$t/e/c0/R-prev.tgz" -C "$t" r.txt
  tar czf "$t/e/c0/repo.tgz" -C "$t" r.txt
  local n; n=$(grep -c . "$t/e/SHA256SUMS")
  echo "test: $n parts of at most 64 KiB"
  # The machine's side, with $t/root for /root and the parts arriving one by one, the first one corrupt.
  mkdir -p "$t/call/.gpu/e" "$t/call/environment/device"
  cp "$here/machine.sh" "$here/drive.sh" "$t/call/environment/device/"
  # A plan of plain commands: the driver waits for both site folders, runs the stages in order in the
  # project snapshot, logs each one's exit, and starts none once the budget is spent.
  printf '# a test plan\nfirst cat r.txt\n\nsecond sh -c "echo two; exit 3"\nthird false\nlast sleep 3\nnever echo no\n' \
    > "$t/e/c0/PLAN"
  echo "0.26.0 0.24.0" > "$t/e/c0/SITES"
  echo 2 > "$t/e/c0/BUDGET"
  cp -r "$t/e/c0" "$t/call/.gpu/e/c0"
  (cd "$t/call" && ROOT="$t/root" bash environment/device/machine.sh setup > /dev/null)
  head -c 65536 /dev/urandom > "$t/call/.gpu/e/p00"
  (cd "$t/call" && ROOT="$t/root" bash environment/device/machine.sh part 00 > /dev/null)
  sleep 2
  for i in $(seq -f %02g 0 $((n - 1))); do
    cp "$t/e/p$i" "$t/call/.gpu/e/p$i"
    (cd "$t/call" && ROOT="$t/root" bash environment/device/machine.sh part "$i" > /dev/null)
  done
  for _ in $(seq 30); do grep -q 'all parts unpacked' "$t/root/R/unpack.log" && break; sleep 1; done
  cat "$t/root/R/unpack.log"
  grep -q 'p00: checksum mismatch' "$t/root/R/unpack.log"
  for v in 0.26.0 0.24.0; do
    test -e "$t/root/site-$v/.ready"
    diff -r --exclude=.ready "$t/site/site-$v" "$t/root/site-$v"
  done
  (ROOT="$t/root" OUT="$t/out" bash "$here/machine.sh" watch 30 > /dev/null)
  cat "$t/root/R/drive.log"
  grep -q 'drive done$' "$t/root/R/drive.log"
  grep -q 'first rc=0$' "$t/root/R/drive.log" && grep -qx r "$t/root/R/first.log"
  grep -q 'second rc=3 (finished, some runs not ok)$' "$t/root/R/drive.log" && grep -qx two "$t/root/R/second.log"
  grep -q 'third rc=1 STOPPED$' "$t/root/R/drive.log"
  grep -q 'never: not started (the budget of 2 s is spent)$' "$t/root/R/drive.log"
  # A driver started again in the same lease appends after the first one's "drive done": watch waits for it.
  echo "$(date -u +%FT%TZ) waiting for site folders: none" >> "$t/root/R/drive.log"
  mkdir -p "$t/out2"
  s0=$SECONDS
  (ROOT="$t/root" OUT="$t/out2" bash "$here/machine.sh" watch 3 > /dev/null)
  test $((SECONDS - s0)) -ge 3
  # Listed to a file first: grep -q stops reading at its match, and tar, still writing, would die of
  # SIGPIPE (141 under pipefail) on a busy host.
  tar tzf "$t/out/R.tgz.0" > "$t/out.list"
  grep -qx 'R/r.txt' "$t/out.list"
  print_calls "$t/e" > "$t/calls.txt"
  test "$(grep -c '"command": "bash environment/device/machine.sh part' "$t/calls.txt")" = "$n"
  head -n 4 "$t/calls.txt"
  echo "test: ok (stream, corrupt part sent again, .ready markers, files identical, the plan's stages and budget, copy back)"
}

if [ "${1:-}" = "--test" ]; then
  selftest
  exit 0
fi

if [ -z "$PLAN" ]; then
  echo "pack.sh: PLAN=FILE names the lease's stages (docs/device.md)" >&2
  exit 2
fi
if [ ! -f "$PLAN" ]; then
  echo "pack.sh: PLAN $PLAN: no such file" >&2
  exit 2
fi
tree=$(tree_mib)
part=$((TREE_LIMIT_MIB - tree - 2))
# Bytes per call are what costs time (tree + part), so the larger the part, the fewer the calls; a call
# whose tree holds only what the machine runs (see the README's plan: results/ unstaged and excluded for
# the lease) leaves room for ~56 MiB parts.
max=${PART_MAX_MIB:-56}
[ "$part" -gt "$max" ] && part=$max
if [ "$part" -lt 8 ]; then
  echo "the working tree is $tree MiB: a call has no room for a part beside it" >&2
  exit 1
fi
echo "working tree $tree MiB: parts of $part MiB (the tree must not grow past $((TREE_LIMIT_MIB - part - 1)) MiB)"
[ -z "$(git status --porcelain --untracked-files=no)" ] || echo "NOTE: uncommitted changes are not in the snapshot"

mkdir -p "$E/c0" "$G/site"
for v in $VERSIONS; do
  list=$(wheel_list "$v")
  w=$G/w-$v
  mkdir -p "$w"
  grep -hv '^#' "$list" "$here/serve-wheels.txt" | sed '/^$/d' > "$G/req-$v.txt"
  # shellcheck disable=SC2086
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PLAT \
    -d "$w" -r "$G/req-$v.txt"
  files=$(wheel_files "$G/req-$v.txt" "$w")
  stamp=$( (sha256sum $files; echo "drop: $DROP") | sha256sum | cut -c1-16)
  if [ "$(cat "$G/site/site-$v.stamp" 2> /dev/null)" != "$stamp" ]; then
    rm -rf "$G/site/site-$v"
    # shellcheck disable=SC2086
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$G/site/site-$v" \
      --python-version 3.12 --implementation cp --only-binary=:all: $PLAT $files
    for f in $DROP; do rm -rf "${G:?}/site/site-$v/$f"; done
    echo "$stamp" > "$G/site/site-$v.stamp"
  fi
  echo "site-$v: $(echo "$files" | wc -l) wheels, $(du -sm "$G/site/site-$v" | cut -f1) MiB installed"
done

want="$VERSIONS|$DROP|${part}M|$(for v in $VERSIONS; do cat "$G/site/site-$v.stamp"; done | tr '\n' ' ')"
if [ "${KEEP_STREAM:-}" = 1 ] && [ "$(cat "$E/STREAM" 2> /dev/null)" = "$want" ] && [ -s "$E/SHA256SUMS" ]; then
  echo "stream: kept (.gpu/e/STREAM matches)"
else
  rm -f "$E/STREAM"
  # shellcheck disable=SC2086
  stream "$G/site" "$E" "${part}M" $VERSIONS
  echo "$want" > "$E/STREAM"
fi
cp "$E/SHA256SUMS" "$E/c0/"
rm -f "$E/c0/PLAN" "$E/c0/SITES" "$E/c0/BUDGET"
cp "$PLAN" "$E/c0/PLAN"
echo "$VERSIONS" > "$E/c0/SITES"
echo "$BUDGET" > "$E/c0/BUDGET"
cp "$(command -v zstd)" "$E/c0/zstd"

snap=$(mktemp -d)
git clone -q --depth 1 "file://$PWD" "$snap/repo"
tar czf "$E/c0/repo.tgz" -C "$snap/repo" --exclude=./results .
rm -rf "$snap"
if [ -n "$PREV" ]; then
  # The study's records and what --resume reads beside them; not its pages, tables or logs.
  tar czf "$E/c0/R-prev.tgz" -C results --exclude="$PREV/report" --exclude="$PREV/derived" \
    --exclude="$PREV/logs" --exclude="$PREV/notes" "$PREV"
else
  tar czf "$E/c0/R-prev.tgz" -T /dev/null
fi

c0=$(du -sm "$E/c0" | cut -f1)
[ $((tree + c0)) -lt "$TREE_LIMIT_MIB" ] || { echo "c0 ($c0 MiB) does not fit beside the tree" >&2; exit 1; }
ls -l "$E" "$E/c0"
echo "stream: $(du -cm "$E"/p?? | tail -1 | cut -f1) MiB in $(grep -c . "$E/SHA256SUMS") parts; c0: $c0 MiB"
print_calls "$E"
