#!/bin/sh
# cpbench on one host: bad input, the launcher without PMIx, the man page
# against --help, and (with Open MPI's mpirun, a PMIx server) every strategy
# checked on 4 ranks as 2 pretended nodes, and a rank killed mid-run.
. "$(dirname "$0")/../lib.sh"

if [ ! -x "$TOP/bin/cpbench" ]; then
	fail cpbench-built "bin/cpbench missing (make)"; finish
fi
if ! command -v maskgen >/dev/null; then
	fail cpbench-maskgen "bin/maskgen missing (make)"; finish
fi
maskgen -p causal_document -n 1K -s 3 -o "$T/cd.amask" || fail cpbench-mask "maskgen failed"
printf 'not a mask\n' >"$T/junk.amask"

bad cpbench-nofile "" cpbench --backend mpi "$T/nosuch.amask"
bad cpbench-junk "" cpbench --backend mpi "$T/junk.amask"
bad cpbench-heads "" cpbench --backend mpi -H 8:3 "$T/cd.amask"
bad cpbench-strategy "" cpbench --backend mpi -s ulysses,nosuch "$T/cd.amask"
bad cpbench-dtype "" cpbench --backend mpi -t fp32 "$T/cd.amask"
bad cpbench-backend "" cpbench --backend gloo "$T/cd.amask"
bad cpbench-pass "" cpbench --backend mpi -p fwd,sideways "$T/cd.amask"
bad cpbench-kernel "" cpbench --backend mpi -k nosuch "$T/cd.amask"
bad cpbench-ring "" cpbench --backend mpi --ulysses 1 --ring 2 "$T/cd.amask"
# N copies that each think they are rank 0 must not run
export SLURM_NTASKS=4
bad cpbench-nopmix "" cpbench --backend mpi "$T/cd.amask"
unset SLURM_NTASKS
export OMPI_COMM_WORLD_SIZE=2
bad cpbench-nopmix-ompi "" cpbench --backend mpi "$T/cd.amask"
unset OMPI_COMM_WORLD_SIZE
if [ "$(make -s -C "$TOP" config | sed -n 's/.*nccl=\([a-z]*\).*/\1/p')" != yes ]; then
	bad cpbench-nonccl "" cpbench --backend nccl "$T/cd.amask"
	grep -q "backend nccl: not in this build (no NCCL)" "$T/bad.err" || fail cpbench-nonccl-msg "$(cat "$T/bad.err")"
fi

# Every long option of --help is in the man page, and the other way round
cpbench -h 2>"$T/help" >/dev/null
grep -o -- '--[a-z-]*' "$T/help" | sort -u >"$T/h.opts"
sed -n 's/.*Fl \\-\([a-z\\-]*\).*/--\1/p' "$TOP/man/man1/cpbench.1" | sed 's/\\//g' | sort -u >"$T/m.opts"
check cpbench-man-help cmp -s "$T/h.opts" "$T/m.opts"

cpbench -l >"$T/list"
check cpbench-list test "$(cut -f1 "$T/list" | sort | tr '\n' ' ')" = "balanced loongtrain ring_allgather ring_p2p ulysses usp "

if ! command -v mpirun >/dev/null; then
	skip cpbench-mpirun "no mpirun (openmpi-bin)"; finish
fi
run() { timeout 300 mpirun --oversubscribe --allow-run-as-root --mca btl self,vader,tcp -n 4 "$@"; }

run cpbench --backend mpi --node-size 2 -H 8:4 -D 32 -w 0 -n 1 --check \
    "$T/cd.amask" >"$T/rows" 2>"$T/err"
rc=$?
check cpbench-mpirun-exit test $rc -eq 0
check cpbench-mpirun-rows test "$(awk -F'\t' 'NR > 1 && $16 == "ok"' "$T/rows" | wc -l)" -eq 12
check cpbench-mpirun-usp-degrees test "$(awk -F'\t' '$2 == "usp" { print $14 "x" $15 }' "$T/rows" | sort -u)" = 2x2
check cpbench-nodes-column test "$(awk -F'\t' 'NR == 1 { print $30; next } { print $30 }' "$T/rows" | sort -u | tr '\n' ' ')" = "2 nodes "
check cpbench-topology-lines test "$(grep -c '^cpbench: rank [0-3]/4 on ' "$T/err")" -eq 4
[ $rc -eq 0 ] || cat "$T/err"
check cpbench-notrace test "$(grep -c 'trace:' "$T/err")" -eq 0

# LONGATTN_CP_TRACE: a line per rank and pass, balanced's points in order,
# the times from the pass's start not decreasing
LONGATTN_CP_TRACE=1 run cpbench --backend mpi --node-size 2 -H 8:4 -D 32 -w 0 -n 2 -s balanced \
    "$T/cd.amask" >/dev/null 2>"$T/err"
check cpbench-trace-exit test $? -eq 0
check cpbench-trace-lines test "$(grep -c '^cpbench: trace: rank [0-3] [fb]wd:' "$T/err")" -eq 8
awk '/^cpbench: trace: rank [0-3] fwd:/ {
	s = ""; last = 0
	for (i = 6; i < NF; i += 2) {
		s = s " " $i; split($(i + 1), t, "/")
		if (t[1] + 0 < last) bad = 1; last = t[1] + 0
	}
	if (s !~ /^ fetch( wait stage)+ settle$/) bad = 1
	n++
}
/^cpbench: trace: rank [0-3] bwd:/ {
	s = ""; for (i = 6; i < NF; i += 2) s = s " " $i
	if (s != " fetch settle kernel give take") bad = 1
	n++
}
END { exit bad || n != 8 }' "$T/err"
check cpbench-trace-points test $? -eq 0
# LONGATTN_BALANCED_LEAD cuts the first local stage: exact, and more stages
maskgen -p causal -n 2K -o "$T/c2k.amask"
LONGATTN_CP_TRACE=1 run cpbench --backend mpi --node-size 2 -H 8:4 -D 32 -w 0 -n 1 -p fwd \
    -s balanced "$T/c2k.amask" >/dev/null 2>"$T/err0"
LONGATTN_BALANCED_LEAD=1 LONGATTN_CP_TRACE=1 run cpbench --backend mpi --node-size 2 -H 8:4 -D 32 \
    -w 0 -n 1 -s balanced --check "$T/c2k.amask" >"$T/rows" 2>"$T/err1"
check cpbench-lead-exit test $? -eq 0
check cpbench-lead-rows test "$(awk -F'\t' 'NR > 1 && $16 == "ok"' "$T/rows" | wc -l)" -eq 2
stages() { grep 'trace: rank [0-3] fwd:' "$1" | grep -o ' stage ' | wc -l; }
check cpbench-lead-stages test "$(stages "$T/err1")" -gt "$(stages "$T/err0")"
# LONGATTN_BALANCED_BSPLIT: the backward in two stages, own keys first:
# exact, and every rank that receives blocks runs the first stage
maskgen -p sliding_window_causal -n 2K -s 3 -o "$T/w2k.amask"
LONGATTN_BALANCED_BSPLIT=1 LONGATTN_CP_TRACE=1 run cpbench --backend mpi --node-size 2 -H 8:4 -D 32 \
    -w 0 -n 1 -p bwd -s balanced --check "$T/w2k.amask" >"$T/rows" 2>"$T/err3"
check cpbench-bsplit-exit test $? -eq 0
check cpbench-bsplit-rows test "$(awk -F'\t' 'NR > 1 && $16 == "ok"' "$T/rows" | wc -l)" -eq 1
check cpbench-bsplit-stages test "$(grep -c 'bwd: fetch [0-9./]* own ' "$T/err3")" -ge 3

# Ranks that read different files under one name must not run
maskgen -p full -n 1K -o "$T/full.amask" || fail cpbench-mask "maskgen failed"
cat >"$T/diff.sh" <<EOF
f=$T/cd.amask
[ "\$OMPI_COMM_WORLD_RANK" = 1 ] && f=$T/full.amask
exec cpbench --backend mpi -s ulysses -p fwd -H 8:4 -D 32 -w 0 -n 1 "\$f"
EOF
timeout 60 mpirun --oversubscribe --allow-run-as-root -n 2 sh "$T/diff.sh" >"$T/rows" 2>"$T/err"
rc=$?
check cpbench-mask-differs test $rc -eq 2
check cpbench-mask-differs-msg grep -q '^cpbench: .*rank 1 read a different mask' "$T/err"
check cpbench-mask-differs-norows test ! -s "$T/rows"

# A rank that dies ends the job: mpirun notices, or the watchdog does
start=$(date +%s)
LONGATTN_DIE_RANK=1 LONGATTN_TIMEOUT=10 run cpbench --backend mpi -s ring_p2p -H 8:4 -D 32 \
    -w 0 -n 1 "$T/cd.amask" >/dev/null 2>"$T/err"
rc=$? secs=$(($(date +%s) - start))
check cpbench-kill-exit test $rc -ne 0
check cpbench-kill-bounded test $secs -lt 60

# A rank that crashes says where, then the job ends
LONGATTN_DIE_RANK=2 LONGATTN_DIE_HOW=segv LONGATTN_DIE_AFTER=6 LONGATTN_TIMEOUT=10 run cpbench --backend mpi \
    -s ulysses,balanced -H 8:4 -D 32 -w 0 -n 1 "$T/cd.amask" >/dev/null 2>"$T/err"
rc=$?
check cpbench-crash-exit test $rc -ne 0
check cpbench-crash-names grep -q '^cpbench: crashed (signal 11) in rank 2 of 4 ([^)]*): [a-z_]* causal_document [fb]wd' "$T/err"
finish
