#!/bin/sh
# cpbench on a GPU host (not in make check): the NCCL comm layer against
# known answers, --check on every GPU (below), then
# benchmark rows at CPB_TPG tokens per GPU (heads 64:8, head dim 128, bf16,
# fwd and bwd; six masks, the documents --long) and single-GPU rows at the
# same total for comparison.
#   sh tests/gpu/cpbench.sh [OUTDIR]      (after make -j16 all build/tests/comm;
#                                         NCCL_HOME=/usr where NCCL is a system package)
# Writes OUTDIR/cpbench.tsv (the benchmark rows), OUTDIR/kbench.tsv and
# OUTDIR/cpbench.log; prints ok/not ok lines.  Rows land in OUTDIR as each
# run ends, so a run cut short still returns what it measured.
# The checks: every strategy on the six benchmark masks, balanced alone on
# the other patterns and over NCCL on the six; and a rank that dies or
# hangs mid-job must end it.
# Environment: CPB_W, CPB_N warm-up and timed iterations (3, 10); CPB_TPG
# tokens per GPU (8192); CPB_MASKS the benchmark masks (the six), CPB_S the
# strategies (all); CPB_CHECK=0 skips the checks, CPB_CHECK=die runs only
# the dead and hanging rank's; CPB_KB=0 skips the
# single-GPU rows, CPB_KERN their kernel (hopper; kbench says unsupported
# where it is not built for the GPU); CPB_NGPU runs on the first that
# many GPUs (all); with 4 or more GPUs usp, loongtrain and balanced are
# also checked and run with --node-size n/2 (two pretend nodes: the
# inter-node rings, balanced's nodes first); CPB_AB runs an A/B of variants instead (below), e.g.
#   CPB_CHECK=0 CPB_AB="base= one=LONGATTN_BALANCED_CONC=0 \
#       split=LONGATTN_BALANCED_BSPLIT=1,LONGATTN_BALANCED_CONC=0" sh tests/gpu/cpbench.sh
# and CPB_PREDICT=1 adds cpbench --predict from this call's own
# calibration beside the benchmark rows (below); CPB_BENCH=0 leaves the
# benchmark rows out.  The --node-size rows go to OUTDIR/cpbench-ns.tsv.
# CPB_TAR=1 also packs OUTDIR into OUTDIR.tgz at the end (a device call
# returns only a few files; pass an OUTDIR other than .).
set -u
cd "$(dirname "$0")/../.." || exit 2
. tests/gpu/ab.sh
O=${1:-${OUT:-.}}
mkdir -p "$O"
W=$(mktemp -d)
PATH=$(pwd)/bin:$PATH
export NCCL_NVLS_ENABLE=0         # multicast can take a shared host's GPUs out of service
n=${CPB_NGPU:-$(nvidia-smi -L 2>/dev/null | wc -l)}
[ -z "${CPB_NGPU:-}" ] || export CUDA_VISIBLE_DEVICES="$(seq -s, 0 $((n - 1)))"
[ "$n" -ge 2 ] || { echo "not ok cpbench-gpu: $n GPUs, need 2"; exit 1; }
mr() { t=$1; shift; timeout "$t" mpirun --allow-run-as-root --bind-to none -n "$n" "$@"; }
nfail=0
ok() { if [ "$2" -eq 0 ]; then echo "ok $1"; else echo "not ok $1"; nfail=$((nfail + 1)); fi; }

mr 60 build/tests/comm nccl >"$W/comm.out" 2>&1
ok "comm-nccl-exit" $?
cat "$W/comm.out"

# A rank that dies or hangs mid-job ends it, within the watchdog's time,
# with the communicators blocking (the default) and not: a hanging rank
# leaves its peer blocked in NCCL, which only the watchdog can end
maskgen -p causal -n 4K -s 7 -o "$W/die.amask"
for bl in $([ "${CPB_CHECK:-1}" = 0 ] || echo 1 0); do
	for how in kill hang; do
		t0=$(date +%s)
		LONGATTN_NCCL_BLOCKING=$bl LONGATTN_DIE_RANK=1 LONGATTN_DIE_AFTER=5 LONGATTN_DIE_HOW=$how \
		    LONGATTN_TIMEOUT=10 mr 90 cpbench -H 8:4 -D 128 -w 1 -n 3 -s balanced,ring_p2p \
		    "$W/die.amask" >/dev/null 2>"$W/die.err"
		rc=$? t=$(($(date +%s) - t0))
		ok "cpbench-gpu-dead-rank-$how-blocking-$bl (exit $rc after $t s)" \
		    "$([ $rc -ne 0 ] && [ $rc -ne 124 ]; echo $?)"
		grep -v -e '^cpbench: rank [0-9]*/' -e '^---' "$W/die.err" | tail -2 | sed 's/^/#  /'
	done
done

# Every strategy on the six benchmark masks, balanced on every pattern
for m in $([ "${CPB_CHECK:-1}" != 1 ] || maskgen -l | cut -f1); do
	case $m in
	custom) continue;;
	full|causal|full_document|causal_document|prefix_lm_causal|sliding_window_causal)
		s=; want=12;;
	*) s="-s balanced"; want=2;;
	esac
	maskgen -p "$m" -n 2K -s 7 -o "$W/$m.amask" || { ok "maskgen-$m" 1; continue; }
	# shellcheck disable=SC2086
	mr 120 cpbench -H 8:4 -D 128 -w 0 -n 1 --check -v $s "$W/$m.amask" >"$W/check-$m.tsv" 2>>"$O/cpbench.log"
	rc=$?
	nok=$(awk -F'\t' 'NR > 1 && $16 == "ok"' "$W/check-$m.tsv" | wc -l)
	ok "cpbench-gpu-check-$m ($nok rows ok, exit $rc)" "$([ $rc -eq 0 ] && [ "$nok" -eq "$want" ]; echo $?)"
	awk -F'\t' 'NR > 1 && $16 != "ok" { print "#  " $2, $12, $16 }' "$W/check-$m.tsv"
	[ "$n" -ge 4 ] && [ -z "$s" ] || continue
	mr 120 cpbench -H 8:4 -D 128 -w 0 -n 1 --check -v -s usp,loongtrain,balanced \
	    --node-size $((n / 2)) "$W/$m.amask" >"$W/check-ns-$m.tsv" 2>>"$O/cpbench.log"
	rc=$?
	nok=$(awk -F'\t' 'NR > 1 && $16 == "ok"' "$W/check-ns-$m.tsv" | wc -l)
	ok "cpbench-gpu-check-$m-node-size-$((n / 2)) ($nok rows ok, exit $rc)" \
	    "$([ $rc -eq 0 ] && [ "$nok" -eq 6 ]; echo $?)"
	awk -F'\t' 'NR > 1 && $16 != "ok" { print "#  " $2, $12, $16 }' "$W/check-ns-$m.tsv"
done

# balanced over NCCL inside the node too (LONGATTN_BALANCED_CE=0; the
# copy engines are its default there, NCCL across nodes): exact on the six
# benchmark masks, and a hanging rank still ends the job
for m in $([ "${CPB_CHECK:-1}" != 1 ] || echo full causal full_document causal_document prefix_lm_causal sliding_window_causal); do
	LONGATTN_BALANCED_CE=0 mr 120 cpbench -H 8:4 -D 128 -w 0 -n 1 --check -v -s balanced \
	    "$W/$m.amask" >"$W/nccl-$m.tsv" 2>>"$O/cpbench.log"
	rc=$?
	nok=$(awk -F'\t' 'NR > 1 && $16 == "ok"' "$W/nccl-$m.tsv" | wc -l)
	ok "cpbench-gpu-check-nccl-$m ($nok rows ok, exit $rc)" "$([ $rc -eq 0 ] && [ "$nok" -eq 2 ]; echo $?)"
done
# Where the ranks cannot map each other's memory (LONGATTN_FAULT=ipc: the
# last rank cannot), balanced says so once and moves its blocks by NCCL
if [ "${CPB_CHECK:-1}" = 1 ]; then
	LONGATTN_FAULT=ipc mr 120 cpbench -H 8:4 -D 128 -w 0 -n 1 --check -s balanced \
	    "$W/causal_document.amask" >"$W/fault.tsv" 2>"$W/fault.err"
	rc=$?
	nok=$(awk -F'\t' 'NR > 1 && $16 == "ok"' "$W/fault.tsv" | wc -l)
	grep 'peer memory' "$W/fault.err" | sed 's/^/#  /'
	ok "cpbench-gpu-ipc-fallback ($nok rows ok, exit $rc)" \
	    "$([ $rc -eq 0 ] && [ "$nok" -eq 2 ] && [ "$(grep -c 'key blocks by NCCL' "$W/fault.err")" -eq 2 ]; echo $?)"
fi
# ... with its backward in two stages (LONGATTN_BALANCED_BSPLIT), with
# its stages on one stream (LONGATTN_BALANCED_CONC=0), and the backward
# in two stages on two streams
for m in $([ "${CPB_CHECK:-1}" != 1 ] || echo full causal full_document causal_document prefix_lm_causal sliding_window_causal); do
	for v in bsplit,bwd,LONGATTN_BALANCED_BSPLIT=1:LONGATTN_BALANCED_CONC=0 noconc,fwd,LONGATTN_BALANCED_CONC=0 \
	    both,bwd,LONGATTN_BALANCED_BSPLIT=1; do
		name=${v%%,*} rest=${v#*,}
		pass=${rest%%,*} e=${rest#*,}
		# shellcheck disable=SC2046
		env $(echo "$e" | tr : ' ') timeout 120 mpirun --allow-run-as-root --bind-to none -n "$n" cpbench -H 8:4 -D 128 \
		    -w 0 -n 1 --check -v -p "$pass" -s balanced "$W/$m.amask" >"$W/$name-$m.tsv" 2>>"$O/cpbench.log"
		rc=$?
		nok=$(awk -F'\t' 'NR > 1 && $16 == "ok"' "$W/$name-$m.tsv" | wc -l)
		ok "cpbench-gpu-check-$name-$m ($nok rows ok, exit $rc)" "$([ $rc -eq 0 ] && [ "$nok" -eq 1 ]; echo $?)"
	done
done
if [ "${CPB_CHECK:-1}" != 0 ]; then
	t0=$(date +%s)
	LONGATTN_BALANCED_CE=0 LONGATTN_DIE_RANK=1 LONGATTN_DIE_AFTER=5 LONGATTN_DIE_HOW=hang \
	    LONGATTN_TIMEOUT=10 mr 90 cpbench -H 8:4 -D 128 -w 1 -n 3 -s balanced \
	    "$W/die.amask" >/dev/null 2>"$W/die.err"
	rc=$? t=$(($(date +%s) - t0))
	ok "cpbench-gpu-dead-rank-hang-nccl (exit $rc after $t s)" "$([ $rc -ne 0 ] && [ $rc -ne 124 ]; echo $?)"
fi

S=$((${CPB_TPG:-8192} * n))
it="-w ${CPB_W:-3} -n ${CPB_N:-10}"
for m in ${CPB_MASKS:-full causal full_document causal_document prefix_lm_causal sliding_window_causal}; do
	case $m in *document) long=--long;; *) long=;; esac
	# shellcheck disable=SC2086
	maskgen -p "$m" -n $S -s 1 $long -o "$W/b-$m.amask" || continue
	[ "${CPB_BENCH:-1}" = 0 ] && continue
	if [ -z "${CPB_AB:-}" ]; then
		# shellcheck disable=SC2086
		mr 240 cpbench $it ${CPB_S:+-s $CPB_S} "$W/b-$m.amask" >"$W/b-$m.tsv" 2>>"$O/cpbench.log"
		ok "cpbench-gpu-bench-$m" $?
		if [ "$n" -ge 4 ]; then
			# shellcheck disable=SC2086
			mr 240 cpbench $it -s usp,loongtrain,balanced --node-size $((n / 2)) "$W/b-$m.amask" \
			    >"$W/n-$m.tsv" 2>>"$O/cpbench.log"
			ok "cpbench-gpu-bench-$m-node-size-$((n / 2))" $?
			awk 'FNR > 1 || NR == 1' "$W"/n-*.tsv >"$O/cpbench-ns.tsv"
		fi
		awk 'FNR > 1 || NR == 1' "$W"/b-*.tsv >"$O/cpbench.tsv"
	fi
	[ "${CPB_KB:-1}" = 0 ] && continue
	# shellcheck disable=SC2086
	kbench -k "${CPB_KERN:-hopper}" $it "$W/b-$m.amask" >"$W/k-$m.tsv" 2>>"$O/cpbench.log"
	awk 'FNR > 1 || NR == 1' "$W"/k-*.tsv >"$O/kbench.tsv"
done
# CPB_AB: instead of the rows above, an A/B of variants, each NAME=ENV
# (ENV: VAR=value pairs joined by commas, or nothing), one process per
# mask and variant, CPB_ROUNDS rounds (2) interleaved, traced
# (LONGATTN_CP_TRACE), strategies CPB_S (balanced); the single-GPU rows
# once.  Writes OUTDIR/ab.tsv (round and variant, then a row) and
# OUTDIR/trace.txt (round, variant, mask, then a trace line).
if [ -n "${CPB_AB:-}" ]; then
	for r in $(seq "${CPB_ROUNDS:-2}"); do
		for m in ${CPB_MASKS:-full causal full_document causal_document prefix_lm_causal sliding_window_causal}; do
			[ -f "$W/b-$m.amask" ] || continue
			for v in $CPB_AB; do
				# shellcheck disable=SC2046,SC2086
				env $(ab_env "$v") LONGATTN_CP_TRACE=1 timeout 240 mpirun --allow-run-as-root \
				    --bind-to none -n "$n" cpbench $it -s "${CPB_S:-balanced}" "$W/b-$m.amask" \
				    >"$W/ab.tsv" 2>"$W/ab.err"
				ok "cpbench-gpu-ab-$r-${v%%=*}-$m" $?
				ab_add "$r" "$v" "$W/ab.tsv" "$O/ab.tsv"
				grep 'trace:' "$W/ab.err" | sed "s/^/$r ${v%%=*} $m /" >>"$O/trace.txt"
			done
		done
	done
	cut -f1,2,4,5,14,18,20 "$O/ab.tsv"
fi
# CPB_PREDICT=1: cpbench --predict beside the rows above from this call's
# own calibration (the model needs several lengths of one build: bench/
# NOTES.md, "cpbench --predict beside round 10's 8K rows"): links probed
# on these ranks, single-GPU rows of each mask at the lengths CPB_CAL
# (8192 16384 65536).  Writes OUTDIR/links.tsv, calibrate.tsv,
# predicted.tsv and predict-compare.tsv (bench/predict-compare.sh; its
# median and worst error on the log).
if [ "${CPB_PREDICT:-0}" = 1 ]; then
	mr 120 cpbench --probe-links >"$O/links.tsv" 2>>"$O/cpbench.log"
	ok "cpbench-gpu-probe-links" $?
	for m in ${CPB_MASKS:-full causal full_document causal_document prefix_lm_causal sliding_window_causal}; do
		case $m in *document) long=--long;; *) long=;; esac
		for L in ${CPB_CAL:-8192 16384 65536}; do
			# shellcheck disable=SC2086
			maskgen -p "$m" -n "$L" -s 1 $long -o "$W/cal-$m-$L.amask" &&
			# shellcheck disable=SC2086
			kbench -k "${CPB_KERN:-hopper}" $it "$W/cal-$m-$L.amask" >"$W/cal-$m-$L.tsv" 2>>"$O/cpbench.log"
		done
	done
	awk 'FNR > 1 || NR == 1' "$W"/cal-*.tsv >"$O/calibrate.tsv"
	cpbench --predict "1x$n" --calibrate "$O/calibrate.tsv" --links "$O/links.tsv" -k "${CPB_KERN:-hopper}" \
	    "$W"/b-*.amask "$W"/cal-*.amask >"$O/predicted.tsv" 2>>"$O/cpbench.log"
	ok "cpbench-gpu-predict" $?
	if [ -s "$O/cpbench.tsv" ]; then
		sh bench/predict-compare.sh "$O/cpbench.tsv" "$O/predicted.tsv" >"$O/predict-compare.tsv" 2>"$W/cmp.err"
		ok "cpbench-gpu-predict-compare ($(cat "$W/cmp.err"))" $?
	fi
fi
[ -f "$O/kbench.tsv" ] || : >"$O/kbench.tsv"
[ -f "$O/cpbench.tsv" ] || : >"$O/cpbench.tsv"
cut -f2,3,4,12,13,14,15,16,18,21,22 "$O/cpbench.tsv"
cut -f2,3,4,12,16,18,21,22 "$O/kbench.tsv"
rm -rf "$W"
# the files stay: the tar beside them, for the device's return
[ "${CPB_TAR:-0}" = 1 ] && tar czf "${O%/}.tgz" -C "$(dirname "$O")" "$(basename "$O")"
[ $nfail -eq 0 ]
