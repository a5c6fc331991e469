# Issue 6 thirteenth round, GPU call 10 (the last of the session's device time): benchmarks/matvec_forms.py, the
# K2.6 AR step's bf16 matrix-vector products in three forms (plain, two rows, fp32 result) against the copy roofline.
set -x
timeout 130 env PYTHONPATH=. python3 benchmarks/matvec_forms.py --out $OUT/matvec_forms.json > $OUT/matvec_forms.log 2>&1
grep -E "roofline|us \(" $OUT/matvec_forms.log | cut -c1-230
