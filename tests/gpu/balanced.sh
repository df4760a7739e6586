#!/bin/sh
# balanced on 2 GPUs (issue 15; not in make check): cpbench --check of
# balanced on the issue's six masks at 2K (8:4, hd 128), then rows of every
# strategy at 16K total and, while BAL_BUDGET seconds last (default 170),
# of balanced, ulysses, ring_p2p and ring_allgather at 64K total (usp and
# loongtrain are ulysses and ring_p2p on 2 GPUs), and single-GPU hopper
# rows on the same masks.  Heads 64:8, hd 128, bf16, local kernel hopper.
#   sh tests/gpu/balanced.sh [OUTDIR]     (bin/ built; builds if it cannot run)
# Writes OUTDIR/check.tsv, OUTDIR/cpbench.tsv, OUTDIR/kbench.tsv and
# OUTDIR/balanced.log, each as its runs end; prints ok/not ok lines and a
# table of per-GPU TFLOP/s last.  For a dry run elsewhere: BAL_K (kernel),
# BAL_CP and BAL_KB (more cpbench, kbench options), BAL_MPI (mpirun's),
# BAL_N (the three lengths).
set -u
cd "$(dirname "$0")/../.." || exit 2
O=${1:-${OUT:-.}}
mkdir -p "$O"
W=$(mktemp -d)
PATH=$(pwd)/bin:$PATH
export NCCL_NVLS_ENABLE=0 LONGATTN_DATA=$(pwd)/masks/dists
t0=$(date +%s)
el() { echo $(($(date +%s) - t0)); }
B=${BAL_BUDGET:-170}
L=$O/balanced.log
mr() { t=$1; shift; timeout "$t" mpirun --allow-run-as-root --bind-to none ${BAL_MPI:-} -n 2 "$@"; }
nfail=0
ok() { if [ "$2" -eq 0 ]; then echo "ok $1"; else echo "not ok $1"; nfail=$((nfail + 1)); fi; }
# cat TSVs with one header
join() { awk 'FNR > 1 || NR == 1' "$@"; }

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$L"
if ldd bin/cpbench bin/kbench 2>&1 | grep -q 'not found' || ! cpbench -l >/dev/null 2>&1; then
	echo "balanced: building here ($(el) s)" | tee -a "$L"
	set -- -j32 GENCODE=-gencode=arch=compute_90a,code=sm_90a ${COMMIT:+COMMIT=$COMMIT} all
	[ -f /usr/include/nccl.h ] && set -- "$@" NCCL_HOME=/usr
	[ -f /usr/include/cudnn.h ] && set -- "$@" CUDNN_HOME=/usr
	make "$@" >>"$L" 2>&1 || { tail -n 20 "$L"; ok build 1; exit 1; }
fi
echo "balanced: $(cpbench -l | wc -l) strategies ($(el) s)" | tee -a "$L"
K=${BAL_K:-hopper} A=${BAL_CP:-} KA=${BAL_KB:-}
set -- ${BAL_N:-2048 16384 65536}
N1=$1 N2=$2 N3=$3

# masks N LONG: the six at N tokens into $W/NAME-N.amask
masks() {
	n=$1 long=$2
	maskgen -p full -n "$n" -s 1 -o "$W/full-$n.amask" &&
	maskgen -p causal -n "$n" -s 1 -o "$W/causal-$n.amask" &&
	maskgen -p full_document -n "$n" -s 1 $long -o "$W/full_document-$n.amask" &&
	maskgen -p causal_document -n "$n" -s 1 $long -o "$W/causal_document-$n.amask" &&
	maskgen -p prefix_lm_causal -n "$n" -s 1 -o "$W/prefix_lm_causal-$n.amask" &&
	maskgen -p sliding_window_causal -n "$n" -s 1 -w 1024 -o "$W/sliding_window_causal-$n.amask" ||
		ok "maskgen $n" 1
}
SIX="full causal full_document causal_document prefix_lm_causal sliding_window_causal"
masks $N1 ""
masks $N2 --long
masks $N3 --long

for m in $SIX; do
	mr 90 cpbench -k $K $A -s balanced -H 8:4 -D 128 -w 0 -n 1 --check -v "$W/$m-$N1.amask" \
	    >"$W/c-$m.tsv" 2>>"$L"
	rc=$?
	st=$(awk -F'\t' 'NR > 1 { printf "%s:%s ", $12, $16 }' "$W/c-$m.tsv")
	ok "balanced-gpu-check-$m ($st exit $rc)" $([ $rc -eq 0 ] && [ "$st" = "fwd:ok bwd:ok " ]; echo $?)
	join "$W"/c-*.tsv >"$O/check.tsv"
done
echo "balanced: checks done ($(el) s)" | tee -a "$L"

for m in $SIX; do
	mr 150 cpbench -k $K -w 2 -n 5 $A "$W/$m-$N2.amask" >"$W/b-16-$m.tsv" 2>>"$L"
	ok "balanced-gpu-bench-16K-$m" $?
	join "$W"/b-*.tsv >"$O/cpbench.tsv"
done
kbench -k $K $KA -w 2 -n 5 "$W"/*-$N2.amask >"$W/k-16.tsv" 2>>"$L"
ok "kbench-hopper-16K" $?
join "$W"/k-*.tsv >"$O/kbench.tsv"
echo "balanced: 16K done ($(el) s)" | tee -a "$L"

for m in sliding_window_causal causal_document full_document causal prefix_lm_causal full; do
	[ "$(el)" -lt "$B" ] || { echo "balanced: out of time for 64K $m" | tee -a "$L"; continue; }
	mr 150 cpbench -k $K -s balanced,ulysses,ring_p2p,ring_allgather -w 1 -n 3 $A \
	    "$W/$m-$N3.amask" >"$W/b-64-$m.tsv" 2>>"$L"
	ok "balanced-gpu-bench-64K-$m" $?
	join "$W"/b-*.tsv >"$O/cpbench.tsv"
	kbench -k $K $KA -w 1 -n 3 "$W/$m-$N3.amask" >"$W/k-64-$m.tsv" 2>>"$L"
	join "$W"/k-*.tsv >"$O/kbench.tsv"
done
echo "balanced: done ($(el) s)" | tee -a "$L"

# mask seqlen pass: kbench hopper, then each strategy (per-GPU TFLOP/s),
# balanced's sent MB and imbalance
awk -F'\t' 'FNR == 1 { for (i = 1; i <= NF; i++) c[FILENAME, $i] = i; next }
    { f = FILENAME; k = $c[f, "mask"] " " $c[f, "seqlen_q"] " " $c[f, "pass"]
      if (!(k in seen)) { seen[k] = 1; keys[++n] = k }
      v = $c[f, "status"] == "ok" ? sprintf("%.3g", $c[f, "tflops"]) : $c[f, "status"]
      if ($c[f, "tool"] == "kbench") kb[k] = v
      else { t[k] = t[k] " " $c[f, "kernel"] "=" v
             if ($c[f, "kernel"] == "balanced" && $c[f, "status"] == "ok")
                 bx[k] = sprintf(" [%.1f MB, %.3f]", $c[f, "sent_bytes"] / 1e6, $c[f, "imbalance"]) } }
    END { for (i = 1; i <= n; i++) print keys[i], "hopper1=" kb[keys[i]] t[keys[i]] bx[keys[i]] }' \
    "$O/kbench.tsv" "$O/cpbench.tsv"
rm -rf "$W"
[ $nfail -eq 0 ]
