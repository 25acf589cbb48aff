#!/usr/bin/env bash
# Re-derives every shipped study's tables and report from its committed records into OUT (nothing is
# written inside results/), so that two versions of the code can be compared file by file:
#   environment/rederive.sh OUT            tables (harness tables --out) and REPORT.md (harness report
#                                          --out; Quarto if on PATH, else the Jupyter kernel) per study
#   diff -r -x .harness-output.json -x index.html -x '*.png' -x '*.parquet' OUT_BEFORE OUT_AFTER
# The HTML page, figures and Parquet files are left out of the comparison: they carry render-time
# metadata; REPORT.md and the tables' Markdown and CSV carry every number and word.
set -uo pipefail
out=${1:?usage: environment/rederive.sh OUT}
py=${PY:-.venv/bin/python}
[ -e "$out" ] && { echo "rederive: $out exists; name a new folder" >&2; exit 2; }
mkdir -p "$out"
for yaml in results/*/study.yaml; do
  s=$(basename "$(dirname "$yaml")")
  [ -d "results/$s/runs" ] || continue
  if "$py" -m harness tables "results/$s" --out "$out/$s/derived" >"$out/$s.tables.log" 2>&1; then t=ok; else t="exit $?"; fi
  if "$py" -m harness report "results/$s" --out "$out/$s/report" >"$out/$s.report.log" 2>&1; then r=ok; else r="exit $?"; fi
  echo "$s: tables $t, report $r"
done
