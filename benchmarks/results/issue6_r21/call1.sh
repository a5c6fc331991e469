# Issue 6, round 21 (session 26), call 1: nibble 4 extracted in place (nibbles.py: one LOP3 per word where LLVM made
# SHF + SGXT + LOP3 of it; gate/up K loop 260 -> 244 SASS instructions, down kernel 4424 -> 4168) against round 20's
# extraction (the same tree with nibbles.py set back by the sed below), at 4 tokens, the dispatch default in the
# stored layout; and in the first run the default k-chunked and the uncompacted-pairs gemv (round 20's call 2, not run
# then). Cut to this (from 1 and 4 tokens, both layouts) after failed starts left ~400 s of device time.
mkdir -p $OUT/new $OUT/old; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt
moe() {  # $1: out folder, $2: token counts, $3: configs (none: the dispatch's default alone), $4: seconds
  if [ -n "$3" ]; then which=(--moe-configs "$3"); else which=(--moe-kernels default); fi
  timeout $4 env PYTHONPATH=. OUT=$OUT/$1 python3 benchmarks/kernels.py --only moe --moe-rows $2 --no-baselines \
    "${which[@]}" --budget $(($4 - 15)) > $OUT/$1.log 2>&1
  grep -E "copy|  moe M=" $OUT/$1.log | cut -c1-300
}
moe new 4 '[{"kernel": "default", "k_chunk": 256}, {"kernel": "gemv", "k_chunk": 256, "pair_splits": 32, "compact_pairs": false}]' 150
cp custom_calls/moe_int4/nibbles.py /tmp/nibbles_new.py
sed -i 's/src = words if j <= 4 else hi/src = words if j < 4 else hi/; s/^PLANE_EXPONENTS = (0, 4, 8, 12, 16, 4, 8, 12)/PLANE_EXPONENTS = (0, 4, 8, 12, 0, 4, 8, 12)/; s/e = 4 \* (j \& 3) + 16 \* ((j \& 7) == 4) /e = 4 * (j \& 3) /' custom_calls/moe_int4/nibbles.py
diff /tmp/nibbles_new.py custom_calls/moe_int4/nibbles.py > $OUT/old_nibbles.diff
moe old 4 '' 70
cp /tmp/nibbles_new.py custom_calls/moe_int4/nibbles.py
