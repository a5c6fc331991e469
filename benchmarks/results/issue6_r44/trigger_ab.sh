# Issue 6 round 44: one trigger_dependents A/B/A in one process (the configs with the trigger first, the plain ones
# after them, the dispatch's default first of all), for call2.sh, call4.sh, call5.sh and call6.sh.
#   trigger_ab.sh moe BUDGET           the 1-token gemv (two launches, k-chunked 256)
#   trigger_ab.sh mla SHAPES BUDGET    the MLA Triton kernel at kernels.py's --mla-shapes
#   trigger_ab.sh mosaic SHAPES BUDGET the MLA Mosaic kernel at those shapes
# Writes $OUT/PART.log and $OUT/PART/kernels.json (the kernels_table.md copy removed: at most 8 files come back).
part=$1
mkdir -p $OUT/$part
if [ "$part" = moe ]; then
  budget=$2
  timeout $((budget + 15)) env PYTHONPATH=. OUT=$OUT/moe python3 benchmarks/kernels.py --only moe --no-baselines \
    --device-span 12 --moe-rows 1 --budget $budget --moe-configs '[{"kernel": "default", "k_chunk": 256},
    {"kernel": "gemv", "k_chunk": 256, "trigger_dependents": true}, {"kernel": "gemv", "k_chunk": 256}]' \
    > $OUT/moe.log 2>&1
  echo "moe rc $?"; grep -E "copy|  moe M=" $OUT/moe.log | cut -c1-400
else
  shapes=$2; budget=$3; kernel=$([ "$part" = mla ] && echo pallas || echo mosaic)
  timeout $((budget + 10)) env PYTHONPATH=. OUT=$OUT/$part python3 benchmarks/kernels.py --only mla --mla-no-sweep \
    --budget $budget --device-span 12 --mla-shapes "$shapes" \
    --mla-configs "[{\"kernel\": \"$kernel\", \"trigger_dependents\": true}, {\"kernel\": \"$kernel\"}]" \
    > $OUT/$part.log 2>&1
  echo "$part rc $?"; grep -E "copy|mla B=" $OUT/$part.log | cut -c1-900
fi
rm -f $OUT/$part/kernels_table.md
