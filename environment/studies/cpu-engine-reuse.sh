#!/bin/bash
# The driver of results/cpu-engine-reuse (its README says when it ran, from which commit).
# Interleave the two engine modes repeat by repeat, alternating which goes first; each call measures
# only the new repeat (--resume reuses the earlier ones). Runs from a fixed snapshot of the harness.
: "${PROJECT:?the project checkout}" "${SNAPSHOT:?a checkout of the harness (a fixed commit)}"
cd $SNAPSHOT
export PYTHONPATH=$SNAPSHOT HARNESS_CACHE=$PROJECT/.cache
for r in 1 2 3 4 5; do
  if [ $((r % 2)) -eq 1 ]; then modes="per-run per-group"; else modes="per-group per-run"; fi
  for mode in $modes; do
    echo "== repeat $r $mode $(date +%T)"
    $PROJECT/.venv/bin/python -m harness sweep scenarios/cpu-reuse-$mode.yaml --study cpu-engine-reuse --results $PROJECT/results --repeats $r --resume --wait-lock 3600 --no-diagnose 2>&1 | grep -v "━"
  done
done
echo DRIVER-DONE $(date +%T)
