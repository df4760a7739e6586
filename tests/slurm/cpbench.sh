#!/bin/sh
# cpbench under the private two-node Slurm cluster (tests/slurm/cluster.sh),
# on the CPU: every strategy x {full, causal, full_document,
# causal_document} checked against the fp64 reference on 2 nodes x 2
# ranks; a rank killed, or hanging, mid-run ends the step within 60 s; a
# crash inside MPI's init is retried once, a later one is not;
# without PMIx a clear error.
. "$(dirname "$0")/../lib.sh"
slurm_up cpbench-slurm
export SLURM_CONF
cd "$LONGATTN_SLURM_SHARED" || exit 1
args="--backend mpi -H 8:4 -D 32 -w 0 -n 1"

for m in full causal full_document causal_document; do
	maskgen -p $m -n 1K -s 5 -o $m.amask || { fail cpbench-slurm-$m "maskgen"; continue; }
	sr "$TOP/bin/cpbench" $args --check $m.amask >$m.tsv 2>$m.err
	rc=$?
	nok=$(awk -F'\t' 'NR > 1 && $16 == "ok"' $m.tsv | wc -l)
	if [ $rc -eq 0 ] && [ "$nok" -eq 12 ]; then
		pass cpbench-slurm-check-$m
	else
		fail cpbench-slurm-check-$m "exit $rc, $nok of 12 rows ok: $(grep -v '^cpbench: rank' $m.err | head -c 600)"
	fi
done
# The hybrids take their Ulysses group from the PMIx node ids: 2 per node
check cpbench-slurm-usp-nodes test "$(awk -F'\t' '$2 == "usp" { print $14 "x" $15 }' causal.tsv | sort -u)" = 2x2
check cpbench-slurm-topology grep -q '^cpbench: rank 3/4 on n2 (node 1, local 1/2)' causal.err

# A killed rank ends the step (Slurm's PMIx plugin cancels it, or the
# watchdog does), and srun or cpbench names it
start=$(date +%s)
LONGATTN_DIE_RANK=2 LONGATTN_TIMEOUT=10 sr "$TOP/bin/cpbench" $args -s ring_p2p causal.amask \
    >/dev/null 2>kill.err
rc=$? secs=$(($(date +%s) - start))
check cpbench-slurm-kill-exit test $rc -ne 0
check cpbench-slurm-kill-bounded test $secs -lt 60
check cpbench-slurm-kill-named grep -q 'task 2\|^cpbench: rank [0-3] (n[12]): ' kill.err
[ $rc -ne 0 ] && [ $secs -lt 60 ] || cat kill.err

# A rank that hangs is invisible to Slurm: only the watchdog ends the step,
# each rank naming itself and the operation it waited for
start=$(date +%s)
LONGATTN_DIE_HOW=hang LONGATTN_DIE_RANK=1 LONGATTN_TIMEOUT=10 sr "$TOP/bin/cpbench" $args \
    -s ulysses causal.amask >/dev/null 2>hang.err
rc=$? secs=$(($(date +%s) - start))
check cpbench-slurm-hang-exit test $rc -ne 0
check cpbench-slurm-hang-bounded test $secs -lt 60
check cpbench-slurm-hang-watchdog grep -q '^cpbench: rank [0-3] (n[12]): comm .* did not finish in 10 s' hang.err
grep -q 'did not finish in 10 s' hang.err || cat hang.err

# A crash inside MPI's init (Open MPI 4.1's TCP transport does that, rarely,
# under srun) names its rank and phase, and sr, like cpbench.sbatch, runs
# the step once more; a crash later, in cpbench's own work, is not retried
LONGATTN_DIE_HOW=segv LONGATTN_DIE_RANK=1 LONGATTN_DIE_AFTER=0 LONGATTN_DIE_ONCE=$PWD/once.flag \
    sr "$TOP/bin/cpbench" $args --check causal.amask >once.tsv 2>once.err
rc=$?
nok=$(awk -F'\t' 'NR > 1 && $16 == "ok"' once.tsv | wc -l)
check cpbench-slurm-initcrash-retried test $rc -eq 0 -a "$nok" -eq 12 -a -e once.flag
check cpbench-slurm-initcrash-says grep -q "$INITCRASH" once.err
check cpbench-slurm-initcrash-once test "$(grep -c 'once more' once.err)" -eq 1
LONGATTN_DIE_HOW=segv LONGATTN_DIE_RANK=2 LONGATTN_DIE_AFTER=0 \
    sr "$TOP/bin/cpbench" $args causal.amask >always.tsv 2>always.err
rc=$?
check cpbench-slurm-initcrash-gives-up test $rc -ne 0 -a "$(grep -c 'once more' always.err)" -eq 1
check cpbench-slurm-initcrash-names grep -q '^cpbench: crashed (signal 11) in rank 2 of 4 (n2): mpi init$' always.err
LONGATTN_DIE_HOW=segv LONGATTN_DIE_RANK=1 \
    sr "$TOP/bin/cpbench" $args -s ring_p2p causal.amask >late.tsv 2>late.err
rc=$?
check cpbench-slurm-latecrash-not-retried test $rc -ne 0 -a "$(grep -c 'once more' late.err)" -eq 0
check cpbench-slurm-latecrash-names grep -q '^cpbench: crashed (signal 11) in rank 1 of 4 (n1): ' late.err

# Without PMIx: one clear line from rank 0, not four silent rank 0s
timeout 60 srun --mpi=none -N2 --ntasks-per-node=2 "$TOP/bin/cpbench" $args causal.amask \
    >nopmix.out 2>nopmix.err
rc=$?
check cpbench-slurm-nopmix-exit test $rc -ne 0
check cpbench-slurm-nopmix-rows test ! -s nopmix.out
check cpbench-slurm-nopmix-msg test "$(grep -c '^cpbench: .*PMIx cannot be reached' nopmix.err)" -eq 1
finish
