#!/bin/sh
# The CP strategies through cpbench on the MPI backend, in the corners that
# tests/tools/cpbench.sh leaves out: KV heads replicated over Ulysses ranks
# (8:2 on 4 ranks), explicit hybrid degrees, the double ring, MHA in fp16 on
# 2 ranks, and a sequence the zigzag layout cannot split (an unsupported
# row, not a failure).  Every run is --check'ed against the fp64 reference.
. "$(dirname "$0")/../lib.sh"

for t in cpbench maskgen; do
	[ -x "$TOP/bin/$t" ] || { fail cp-built "bin/$t missing (make)"; finish; }
done
if ! command -v mpirun >/dev/null; then
	skip cp-mpirun "no mpirun (openmpi-bin)"; finish
fi
export LONGATTN_THREADS=1
run() { np=$1; shift; timeout 300 mpirun --oversubscribe --allow-run-as-root --mca btl self,vader,tcp -n "$np" "$@"; }
# rows FILE STATUS: how many result rows have that status
rows() { awk -F'\t' -v s="$2" 'NR > 1 && $16 == s' "$1" | wc -l; }

maskgen -p full_document -n 512 -s 5 -o "$T/fd.amask" &&
maskgen -p causal -n 512 -o "$T/c.amask" &&
maskgen -p causal_document -n 500 -s 2 -o "$T/odd.amask" || { fail cp-masks "maskgen failed"; finish; }

# hkv 2 < 4 Ulysses ranks: each rank gets the kv head its q heads need,
# and the replicas' gradients are summed on the way back.
run 4 cpbench --backend mpi --node-size 2 -H 8:2 -D 16 -w 0 -n 1 --check \
    "$T/fd.amask" >"$T/gqa" 2>"$T/gqa.err"
check cp-gqa-replicated-exit test $? -eq 0
check cp-gqa-replicated-ok test "$(rows "$T/gqa" ok)" -eq 12
check cp-gqa-ulysses-degree test "$(awk -F'\t' '$2 == "ulysses" { print $14 "x" $15 }' "$T/gqa" | sort -u)" = 4x1
check cp-gqa-loongtrain-degree test "$(awk -F'\t' '$2 == "loongtrain" { print $14 "x" $15 }' "$T/gqa" | sort -u)" = 1x4

# Explicit degrees: all-Ulysses USP, and LoongTrain as 2 x 2.
run 4 cpbench --backend mpi --node-size 2 -s usp,loongtrain --ulysses 4 --ring 1 -H 8:4 -D 16 \
    -w 0 -n 1 --check "$T/c.amask" >"$T/u4" 2>"$T/u4.err"
check cp-usp-u4-exit test $? -eq 0
check cp-usp-u4-ok test "$(rows "$T/u4" ok)" -eq 4
run 4 cpbench --backend mpi --node-size 4 -s loongtrain --ring 2 -H 8:4 -D 16 \
    -w 0 -n 1 --check "$T/fd.amask" >"$T/l22" 2>"$T/l22.err"
check cp-loongtrain-2x2-exit test $? -eq 0
check cp-loongtrain-2x2-ok test "$(awk -F'\t' '$16 == "ok" { print $14 "x" $15 }' "$T/l22" | sort -u)" = 2x2

# MHA in fp16 on 2 ranks, several timed iterations.
run 2 cpbench --backend mpi -H 4:4 -D 16 -t fp16 -w 1 -n 2 --check \
    "$T/c.amask" >"$T/mha" 2>"$T/mha.err"
check cp-mha-fp16-exit test $? -eq 0
check cp-mha-fp16-ok test "$(rows "$T/mha" ok)" -eq 12
check cp-mha-fp16-times test "$(awk -F'\t' 'NR > 1 && !($18 > 0 && $19 <= $18 && $18 <= $20)' "$T/mha" | wc -l)" -eq 0

# 500 tokens: 4 ranks split them, 8 zigzag chunks do not.
run 4 cpbench --backend mpi --node-size 2 -H 8:4 -D 16 -p fwd -w 0 -n 1 --check \
    "$T/odd.amask" >"$T/odd" 2>"$T/odd.err"
check cp-odd-exit test $? -eq 0
check cp-odd-ulysses-ok test "$(awk -F'\t' '$2 == "ulysses" { print $16 }' "$T/odd")" = ok
check cp-odd-ring-unsupported test "$(awk -F'\t' '$2 == "ring_p2p" { print $16 }' "$T/odd")" = unsupported
for f in gqa u4 l22 mha odd; do
	[ -s "$T/$f.err" ] && grep -v '^cpbench: rank [0-9]*/[0-9]* on ' "$T/$f.err" | head -5
done
finish
