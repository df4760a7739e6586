#!/bin/sh
# kbench on the CPU: row schema, the FLOP arithmetic from the mask's area,
# --check (ok, and `wrong' with exit 1 under LONGATTN_FAULT=cpu),
# `unsupported' rows, GPU kernels without a GPU, and bad input (exit 2).
. "$(dirname "$0")/../lib.sh"
export LONGATTN_THREADS=2
S=256
maskgen -p causal -n $S -o "$T/causal.amask" &&
maskgen -p causal_document -n $S -s 3 -o "$T/cdoc.amask" &&
maskgen -p block_sparse_uniform -n $S -B 64 -H 4 -s 1 -o "$T/bsu.amask" ||
	{ fail "maskgen" "cannot make the masks"; finish; }
K="-k cpu -H 4:2 -D 16 -w 1 -n 2"

# Schema: the header of lib/tsv.h, 30 fields in every row (kbench leaves
# cpbench's sent_bytes, imbalance and nodes empty), one row per mask x kernel x pass.
kbench $K -p fwd,bwd "$T/causal.amask" "$T/cdoc.amask" >"$T/rows.tsv" 2>"$T/err"
rc=$?
check "kbench exits 0" [ $rc -eq 0 ]
want="tool kernel mask seqlen_q seqlen_k area batch heads_q heads_kv head_dim dtype pass world ulysses ring status iters ms_median ms_min ms_max tflops mem_gib device host commit seed stack sent_bytes imbalance nodes"
check "header" [ "$(head -n 1 "$T/rows.tsv" | tr '\t' ' ')" = "$want" ]
check "30 fields in every line" sh -c "awk -F'\t' 'NF != 30 { exit 1 }' '$T/rows.tsv'"
check "sent_bytes, imbalance and nodes empty" sh -c "awk -F'\t' 'NR > 1 && (\$28 != \"\" || \$29 != \"\" || \$30 != \"\") { exit 1 }' '$T/rows.tsv'"
check "4 rows for 2 masks x 2 passes" [ "$(awk 'NR > 1' "$T/rows.tsv" | wc -l)" -eq 4 ]
check "rows are ok, cpu, world 1, device cpu:" sh -c "awk -F'\t' 'NR > 1 && (\$16 != \"ok\" || \$2 != \"cpu\" || \$13 != 1 || \$23 !~ /^cpu:/) { exit 1 }' '$T/rows.tsv'"
# causal at S: S(S+1)/2 allowed pairs
check "area of causal is S(S+1)/2" sh -c "awk -F'\t' -v s=$S 'NR == 2 && \$6 != s * (s + 1) / 2 { exit 1 }' '$T/rows.tsv'"
check "area column = maskgen -i area" sh -c "maskgen -i '$T/cdoc.amask' | grep -q \"\$(awk -F'\t' 'NR == 4 { print \$6 }' '$T/rows.tsv')\""
# tflops = 4*area*hq*hd*batch (x2.5 bwd) / ms, to the printed precision
check "tflops recomputed from ms and area" sh -c "awk -F'\t' 'NR > 1 { f = 4 * \$6 * \$8 * \$10 * \$7 * (\$12 == \"bwd\" ? 2.5 : 1) / (\$18 * 1e9); d = f - \$21; if (d < 0) d = -d; if (d > 0.006 || \$18 <= 0 || \$19 > \$18 || \$20 < \$18) exit 1 }' '$T/rows.tsv'"
check "peak memory reported" sh -c "awk -F'\t' 'NR > 1 && !(\$22 > 0) { exit 1 }' '$T/rows.tsv'"

# --check: the cpu kernel against lib/ref passes; with the fault injected
# the row is `wrong', its numbers empty, and kbench exits 1.
kbench --check -v $K -H 4:1 "$T/cdoc.amask" "$T/bsu.amask" >"$T/chk.tsv" 2>"$T/chk.err"
rc=$?
check "--check passes on cpu (GQA 4:1, block-sparse too)" sh -c "[ $rc -eq 0 ] && [ \$(awk -F'\t' 'NR > 1 && \$16 == \"ok\"' '$T/chk.tsv' | wc -l) -eq 4 ]"
check "-v prints the relative errors" grep -q 'err_o .* err_lse' "$T/chk.err"
kbench --check $K -t fp16 -p bwd "$T/causal.amask" >"$T/f16.tsv" 2>/dev/null
check "--check passes in fp16" sh -c "[ $? -eq 0 ] && awk -F'\t' 'NR == 2 && \$11 == \"fp16\" && \$16 == \"ok\" { f = 1 } END { exit !f }' '$T/f16.tsv'"
# --qscale: q drawn wider, so rows' maxima move from tile to tile (the
# online softmax's rescale); the inputs differ, so the errors do too
kbench --check -v $K --qscale 8 "$T/causal.amask" "$T/cdoc.amask" >"$T/qs.tsv" 2>"$T/qs.err"
check "--check passes with --qscale 8 (fwd and bwd)" sh -c "[ $? -eq 0 ] && [ \$(awk -F'\t' 'NR > 1 && \$16 == \"ok\"' '$T/qs.tsv' | wc -l) -eq 4 ]"
kbench --check -v $K "$T/causal.amask" "$T/cdoc.amask" >/dev/null 2>"$T/qs1.err"
check "--qscale reaches the inputs (other errors)" sh -c "grep -q err_o '$T/qs.err' && ! cmp -s '$T/qs.err' '$T/qs1.err'"
LONGATTN_FAULT=cpu kbench --check $K "$T/causal.amask" >"$T/wrong.tsv" 2>"$T/wrong.err"
rc=$?
check "a perturbed kernel is wrong, exit 1" [ $rc -eq 1 ]
check "wrong rows, numbers empty" sh -c "[ \$(awk -F'\t' 'NR > 1 && \$16 == \"wrong\" && \$18 == \"\" && \$21 == \"\"' '$T/wrong.tsv' | wc -l) -eq 2 ]"
check "wrong says why on stderr" grep -q 'wrong (relative error' "$T/wrong.err"
LONGATTN_FAULT=cpu kbench $K "$T/causal.amask" >/dev/null 2>&1
check "without --check the fault goes unnoticed (exit 0)" [ $? -eq 0 ]

# unsupported: the cpu kernel stops at head dim 256 by design
kbench -k cpu -D 512 -H 2:1 -n 1 -w 0 "$T/causal.amask" >"$T/uns.tsv" 2>/dev/null
rc=$?
check "unsupported is a row, not an error (exit 0)" [ $rc -eq 0 ]
check "two unsupported rows with empty numbers" sh -c "[ \$(awk -F'\t' 'NR > 1 && \$16 == \"unsupported\" && \$17 == \"\" && \$21 == \"\"' '$T/uns.tsv' | wc -l) -eq 2 ]"

# kbench -l names every kernel of the table
kbench -l >"$T/list"
for k in cpu naive flash hopper cudnn; do
	check "kbench -l lists $k" grep -q "^$k " "$T/list"
done

# A GPU kernel: exit 2, "not in this build", when the build has no CUDA
# (kbench(1): there is nothing to measure); exit 2 with "no CUDA device"
# when it has CUDA but the machine no GPU.
if grep -q '^naive .*disabled' "$T/list"; then
	bad "kbench: naive without CUDA" "" kbench -k naive -n 1 "$T/causal.amask"
	check "... says not in this build" grep -q 'kernel naive: not in this build' "$T/bad.err"
elif ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
	bad "kbench: naive without a GPU" "" kbench -k naive -n 1 "$T/causal.amask"
	check "... says no CUDA device" grep -q 'kernel naive: no CUDA device' "$T/bad.err"
else
	skip "naive without a GPU" "this machine has a GPU"
fi

# Bad input: exit 2, one line naming kbench, no rows written.
head -c 100 "$T/causal.amask" >"$T/cut.amask"
printf 'not a mask at all, but long enough to have a header of sorts.....\n' >"$T/junk.amask"
bad "kbench: missing mask file" "" kbench $K "$T/nonexistent.amask"
bad "kbench: truncated mask file" "" kbench $K "$T/cut.amask"
bad "kbench: not a mask file" "" kbench $K "$T/junk.amask"
bad "kbench: heads 64:7" "" kbench -k cpu -H 64:7 "$T/causal.amask"
bad "kbench: head dim 0" "" kbench -k cpu -D 0 "$T/causal.amask"
bad "kbench: unknown kernel" "" kbench -k nosuch "$T/causal.amask"
bad "kbench: iterations 0" "" kbench -k cpu -n 0 "$T/causal.amask"
bad "kbench: bad pass" "" kbench -k cpu -p sideways "$T/causal.amask"
bad "kbench: bad dtype" "" kbench -k cpu -t fp8 "$T/causal.amask"
bad "kbench: --qscale 0" "" kbench -k cpu --qscale 0 "$T/causal.amask"
bad "kbench: --qscale not a number" "" kbench -k cpu --qscale wide "$T/causal.amask"
bad "kbench: mask heads do not divide" "" kbench -k cpu -H 6:2 "$T/bsu.amask"
kbench -k cpu >/dev/null 2>"$T/usage"
check "no mask file: exit 2 and the usage" sh -c "[ $? -eq 2 ] && grep -q '^usage: kbench' '$T/usage'"
kbench $K "$T/causal.amask" "$T/nonexistent.amask" >"$T/partial" 2>/dev/null
check "a bad second file: nothing on stdout" [ ! -s "$T/partial" ]
finish
