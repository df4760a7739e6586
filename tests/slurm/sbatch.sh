#!/bin/sh
# The sbatch templates under a real Slurm: a private two-node cluster
# (cluster.sh), each template submitted with sbatch on the CPU backend at
# small sizes, its result rows, progress lines and summary checked, and
# failing steps shown to fail the job (scontrol and jobcomp).
. "$(dirname "$0")/../lib.sh"
C=$TOP/tests/slurm/cluster.sh
BIN=${LONGATTN_BIN:-$TOP/bin}

if [ "$(id -u)" -ne 0 ] || ! command -v slurmctld >/dev/null 2>&1; then
	skip sbatch "needs root and slurm-wlm, munge (make deps)"; finish
fi
for t in seqsample maskgen kbench cpbench summarize; do
	[ -x "$BIN/$t" ] || { skip sbatch "$BIN/$t not built"; finish; }
done

export LONGATTN_SLURM_DIR=$T/slurm
trap 'sh "$C" stop; rm -rf "$T"' EXIT
trap 'exit 1' INT TERM
if ! sh "$C" start >"$T/start.log" 2>&1; then
	fail cluster-start "$(cat "$T/start.log")"; finish
fi
eval "$(sh "$C" env)"
D=$LONGATTN_SLURM_SHARED
cd "$D" || exit 1
export LONGATTN_BIN=$BIN LONGATTN_SBATCH=$TOP/sbatch LONGATTN_BACKEND=cpu

HEADER=$(printf '%s\t' tool kernel mask seqlen_q seqlen_k area batch heads_q \
    heads_kv head_dim dtype pass world ulysses ring status iters ms_median \
    ms_min ms_max tflops mem_gib device host commit seed stack sent_bytes imbalance nodes | sed 's/\t$//')

# submit NAME ENV... -- SBATCH-ARGS...: the job id, output in $D/NAME.out
submit() {
	n=$1; shift
	e=
	while [ "$1" != -- ]; do e="$e $1"; shift; done
	shift
	env $e sbatch --parsable -o "$D/$n.out" "$@" 2>"$D/$n.sub" | cut -d';' -f1
}

# state ID: "STATE EXITCODE" once the job has ended.  All the jobs share one
# deadline, 7 minutes from their submission, so a hang costs 7 minutes once.
state() {
	while [ "$(date +%s)" -lt "$deadline" ]; do
		s=$(scontrol -o show job "$1" 2>/dev/null |
		    sed -n 's/^JobId=[0-9]* .*JobState=\([A-Z_]*\) .*ExitCode=\([0-9:]*\).*/\1 \2/p')
		case $s in
		COMPLETED*|FAILED*|CANCELLED*|TIMEOUT*|NODE_FAIL*|OUT_OF_MEMORY*) echo "$s"; return;;
		esac
		sleep 0.5
	done
	echo "still ${s:-unknown} after the deadline"
}

# rows FILE AWK-CONDITION: rows (not the header) of FILE matching, by column name
rows() {
	awk -F '\t' '
	NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
	'"$2"' { n++ } END { print n + 0 }' "$1"
}

# Everything at once: the two real sweeps, the study and the failures.
# Two cores run it all: one timed iteration, 64 tokens per rank.
export LONGATTN_WARMUP=0 LONGATTN_ITERS=1
deadline=$(($(date +%s) + 420))
kb=$(submit kbench LONGATTN_RESULTS=$D/kb LONGATTN_SEQLENS=256,512 -- "$TOP/sbatch/kbench.sbatch")
# Its first step's rank 1 crashes inside MPI's init (LONGATTN_DIE_ONCE):
# the template runs that step once more and loses no row.
cp=$(submit cpbench LONGATTN_RESULTS=$D/cp LONGATTN_TOKENS_PER_RANK=64 LONGATTN_DIE_HOW=segv \
    LONGATTN_DIE_RANK=1 LONGATTN_DIE_AFTER=0 LONGATTN_DIE_ONCE=$D/cp.once -- \
    -N 2 --ntasks-per-node=2 "$TOP/sbatch/cpbench.sbatch")
st=$(submit study LONGATTN_RESULTS=$D/st LONGATTN_PATTERNS=full,causal LONGATTN_SEQLENS=256 \
    LONGATTN_CP_MASKS=causal_document_long LONGATTN_WORLDS=4 LONGATTN_TOKENS_PER_RANK=64 -- \
    "$TOP/sbatch/study.sbatch")
b1=$(submit badpattern LONGATTN_RESULTS=$D/b1 LONGATTN_PATTERNS=full,no_such_pattern -- \
    "$TOP/sbatch/kbench.sbatch")
b2=$(submit badkernel LONGATTN_RESULTS=$D/b2 LONGATTN_PATTERNS=full LONGATTN_KERNELS=cpu,nosuch -- \
    "$TOP/sbatch/kbench.sbatch")
b3=$(submit badheads LONGATTN_RESULTS=$D/b3 LONGATTN_PATTERNS=full,causal LONGATTN_SEQLENS=256 \
    LONGATTN_HEADS=64:7 -- "$TOP/sbatch/kbench.sbatch")
b4=$(submit badcp LONGATTN_RESULTS=$D/b4 LONGATTN_CP_MASKS=full LONGATTN_WORLDS=4 LONGATTN_TOKENS_PER_RANK=64 \
    LONGATTN_CP_ARGS=--no-such-option -- -N 2 --ntasks-per-node=2 "$TOP/sbatch/cpbench.sbatch")
b5=$(submit badstudy LONGATTN_RESULTS=$D/b5 LONGATTN_PATTERNS=full,no_such_pattern \
    LONGATTN_SEQLENS=256 LONGATTN_CP=0 -- "$TOP/sbatch/study.sbatch")
for j in kb cp st b1 b2 b3 b4 b5; do
	eval "v=\$$j"
	[ -n "$v" ] || { fail "submit-$j" "sbatch: $(cat "$D"/*.sub)"; finish; }
done

# completed NAME ID OUTPUT: the job ended COMPLETED with exit code 0; else
# its error lines and last lines go into the failure (the test's files go
# with it: a study job's exit 1 was once left unexplained)
completed() {
	s=$(state "$2")
	if [ "$s" = "COMPLETED 0:0" ]; then pass "$1"
	else fail "$1" "job $2: $s; $(grep -v ' row ' "$3" | grep -i -m 5 'fail\|error\|not found'); last lines: $(tail -n 8 "$3" 2>&1)"
		# a crash: its handler's lines and the frames after them (cpbench's
		# crash_report, or Open MPI's while MPI_Init's handlers are in
		# place), which the lines above cut off (bench/NOTES.md, round 29)
		grep -A 24 'crashed (signal\|Failing at address' "$3" 2>/dev/null | head -n 60 | sed 's/^/# /'; fi
}

# sweep NAME ID DIR: NAME's job completed and left DIR/NAME-*.tsv (in $f)
# with the one header; false when it left none.
sweep() {
	completed "$1-completed" "$2" "$D/$1.out"
	f=$(ls "$D/$3/$1"-*.tsv 2>/dev/null | head -1)
	if [ -z "$f" ]; then
		fail "$1-rows" "no rows file; job output: $(tail -5 "$D/$1.out")"
		return 1
	fi
	check "$1-header" test "$(head -1 "$f")" = "$HEADER"
}

# ---- kbench.sbatch: 4 patterns x 2 lengths x fwd,bwd, kernel cpu, --check
if sweep kbench "$kb" kb; then
	check kbench-16-rows test "$(($(wc -l <"$f") - 1))" -eq 16
	# CPU TFLOP/s print as 0.00: the time is what must be there.
	check kbench-all-ok test "$(rows "$f" '$c["status"] == "ok" && $c["ms_median"] > 0 && $c["kernel"] == "cpu"')" -eq 16
	check kbench-matrix test "$(awk -F '\t' 'NR > 1 { print $3, $4, $12 }' "$f" | sort -u | wc -l)" -eq 16
	check kbench-seqlens test "$(rows "$f" '$c["seqlen_q"] == 256 || $c["seqlen_q"] == 512')" -eq 16
	check kbench-progress test "$(grep -c '^kbench.sbatch: row kbench cpu .* ok ' "$D/kbench.out")" -eq 16
	sum=${f%.tsv}.txt
	check kbench-summary sh -c "[ -s '$sum' ] && grep -q causal_document '$sum' && grep -q full_document '$sum'"
	if command -v gnuplot >/dev/null 2>&1; then
		check kbench-plots sh -c "ls '${f%.tsv}.plots' | grep -q '\.png$'"
	fi
fi

# ---- cpbench.sbatch: worlds 2 (1 node) and 4 (2 nodes) x 4 masks x 6 strategies x fwd,bwd
if sweep cpbench "$cp" cp; then
	check cpbench-96-rows test "$(($(wc -l <"$f") - 1))" -eq 96
	check cpbench-retried test -e "$D/cp.once" -a \
	    "$(grep -c "^cpbench.sbatch: a rank crashed inside MPI's init, before any row: once more" "$D/cpbench.out")" -eq 1
	check cpbench-worlds test "$(rows "$f" '$c["world"] == 2 && $c["seqlen_q"] == 128')" -eq 48 -a \
	    "$(rows "$f" '$c["world"] == 4 && $c["seqlen_q"] == 256')" -eq 48
	check cpbench-strategies test "$(awk -F '\t' 'NR > 1 { print $2 }' "$f" | sort -u | tr '\n' ' ')" = \
	    "balanced loongtrain ring_allgather ring_p2p ulysses usp "
	check cpbench-no-wrong test "$(rows "$f" '$c["status"] != "ok" && $c["status"] != "unsupported"')" -eq 0
	check cpbench-ok-full-causal test "$(rows "$f" '$c["status"] == "ok" && $c["ms_median"] > 0 &&
	    ($c["mask"] == "full" || $c["mask"] == "causal")')" -eq 48
	check cpbench-progress test "$(grep -c '^cpbench.sbatch: row cpbench ' "$D/cpbench.out")" -eq 96
	check cpbench-summary test -s "${f%.tsv}.txt"
fi

# ---- study.sbatch: a 2-task array, the CP job and the merge after both
completed study-completed "$st" "$D/study.out"
R=$(ls -d "$D"/st/study-* 2>/dev/null | head -1)
if [ -z "$R" ] || [ ! -f "$R/jobs" ]; then
	fail study-jobs "no study directory; output: $(cat "$D/study.out")"
else
	check study-3-jobs test "$(cut -d' ' -f1 "$R/jobs" | tr '\n' ' ')" = "kbench cpbench merge "
	m=$(awk '$1 == "merge" { print $2 }' "$R/jobs")
	completed study-merge-completed "$m" "$R/merge-$m.out"
	k=$(awk '$1 == "kbench" { print $2 }' "$R/jobs")
	check study-array-2-tasks test "$(scontrol -o show job "$k" | grep -c 'JobState=COMPLETED')" -eq 2
	c=$(awk '$1 == "cpbench" { print $2 }' "$R/jobs")
	completed study-cpbench-completed "$c" "$R/cpbench-$c.out"
	# afterany: the merge starts after the last part ended (ISO times sort).
	last=$(scontrol -o show job "$k"; scontrol -o show job "$c")
	last=$(echo "$last" | sed -n 's/.* EndTime=\([^ ]*\) .*/\1/p' | sort | tail -1)
	start=$(scontrol -o show job "$m" | sed -n 's/.* StartTime=\([^ ]*\) .*/\1/p')
	check study-merge-after test -n "$last" -a \
	    "$(printf '%s\n%s\n' "$last" "$start" | sort | tail -1)" = "$start"
	check study-header test "$(head -1 "$R/all.tsv")" = "$HEADER"
	check study-one-header test "$(grep -c '^tool	' "$R/all.tsv")" -eq 1
	# 2 patterns x 256 x fwd,bwd + 1 mask x world 4 x 6 strategies x fwd,bwd
	check study-16-rows test "$(rows "$R/all.tsv" '$c["tool"] == "kbench"')" -eq 4 -a \
	    "$(rows "$R/all.tsv" '$c["tool"] == "cpbench" && $c["world"] == 4')" -eq 12
	check study-summary sh -c "[ -s '$R/summary.txt' ] && [ -s '$R/summary.md' ] && grep -q '|' '$R/summary.md'"
fi

# ---- failures: each job must end FAILED with a non-zero exit code
failed() {
	s=$(state "$2")
	case $s in
	"FAILED "[1-9]*) pass "$1";;
	*) fail "$1" "job $2: $s; output: $(tail -3 "$D/$3.out")";;
	esac
}
failed fails-bad-pattern "$b1" badpattern
check fails-bad-pattern-says grep -q "no pattern 'no_such_pattern'" "$D/badpattern.out"
check fails-bad-pattern-jobcomp grep -q "JobId=$b1 .*JobState=FAILED" "$LONGATTN_SLURM_DIR/jobcomp.log"
failed fails-bad-kernel "$b2" badkernel
check fails-bad-kernel-says grep -q "no kernel 'nosuch'" "$D/badkernel.out"
failed fails-bad-kbench-step "$b3" badheads
check fails-bad-kbench-step-says test "$(grep -c 'FAILED (exit 2): kbench' "$D/badheads.out")" -eq 2
failed fails-bad-cpbench-step "$b4" badcp
check fails-bad-cpbench-step-says grep -q 'FAILED (exit [1-9][0-9]*): srun' "$D/badcp.out"
s=$(state "$b5")
R=$(ls -d "$D"/b5/study-* 2>/dev/null | head -1)
m=$(awk '$1 == "merge" { print $2 }' "$R/jobs" 2>/dev/null)
if [ -z "$m" ]; then
	fail fails-study-merge "no merge job; study: $s, $(cat "$D/badstudy.out")"
else
	# Task 0 (full) completes, task 1 (no_such_pattern) fails: the merge
	# summarizes task 0's rows, then fails.
	failed fails-study-merge "$m" "../b5/$(basename "$R")/merge-$m"
	check fails-study-merge-summarized test -s "$R/summary.txt"
	check fails-study-merge-says grep -q 'FAILED, exit code 2:0' "$R/merge-$m.out"
fi
finish
