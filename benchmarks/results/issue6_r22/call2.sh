# Issue 6, round 22 (session 27), call 2: the dispatch default at 1, 2, 4 and 8 tokens with nibble 4 masked in place
# (new, round 21) and from the shifted word (old, round 20: nibbles.py set back by the sed of issue6_r21/call1.sh),
# twice each, alternated. This is the command as run (written out here from the device call); on the tree after
# this round, pass the extraction through the gemv's nibble4_in_place instead of the sed (call3.sh).
cp custom_calls/moe_int4/nibbles.py /tmp/nn.py
for r in 1 2; do for v in new old; do
  mkdir -p $OUT/$v$r
  if [ $v = old ]; then
    sed -i 's/src = words if j <= 4 else hi/src = words if j < 4 else hi/; s/^PLANE_EXPONENTS = (0, 4, 8, 12, 16, 4, 8, 12)/PLANE_EXPONENTS = (0, 4, 8, 12, 0, 4, 8, 12)/; s/e = 4 \* (j \& 3) + 16 \* ((j \& 7) == 4) /e = 4 * (j \& 3) /' custom_calls/moe_int4/nibbles.py
  else cp /tmp/nn.py custom_calls/moe_int4/nibbles.py; fi
  timeout 100 env PYTHONPATH=. OUT=$OUT/$v$r python3 benchmarks/kernels.py --only moe --moe-rows 1,2,4,8 --no-baselines \
    --moe-kernels default --budget 85 > $OUT/$v$r.log 2>&1
  echo "== $v $r"; grep -E "  moe M=" $OUT/$v$r.log | cut -c1-200
done; done
cp /tmp/nn.py custom_calls/moe_int4/nibbles.py
