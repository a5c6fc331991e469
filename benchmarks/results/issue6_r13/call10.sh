# Issue 6, prepared in session 15 for the next GPU session (NOT RUN: the device time ran out before this call):
# benchmarks/matvec_forms.py, the K2.6 AR step's bf16 matrix-vector products in three forms against the copy roofline.
set -x
timeout 130 env PYTHONPATH=. python3 benchmarks/matvec_forms.py --out $OUT/matvec_forms.json > $OUT/matvec_forms.log 2>&1
grep -E "roofline|us \(" $OUT/matvec_forms.log | cut -c1-230
