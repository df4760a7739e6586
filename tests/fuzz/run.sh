#!/bin/sh
# Fuzz with libFuzzer, ASan and UBSan: tests/fuzz/run.sh [SECONDS [HARNESS...]]
# runs each harness (default all: mask hist lengths custom plan) for SECONDS
# (default 60).  HARNESS_fuzz.c is the harness; its corpus starts from
# tests/fuzz/seeds/HARNESS/ (mask: mkseeds' files) and its saved inputs,
# tests/fuzz/regress/HARNESS/; tests/fuzz/HARNESS.dict, when there is one,
# gives it the tokens of its format.  A crash, leak or timeout is copied there,
# which tests/tools/fuzz.sh replays; exit 1.  Exit 3 when clang or libFuzzer
# is missing.  FUZZ_JOBS=N runs N harnesses at a time (default 1);
# FUZZ_FLAGS adds libFuzzer flags (-len_control=0: long inputs at once).
set -u
secs=${1:-60}
[ $# -gt 0 ] && shift
all="mask hist lengths custom plan"
names=${*:-$all}
cd "$(dirname "$0")/../.." || exit 2
CLANG=${CLANG:-clang}
B=build/fuzz
# the mask, plan and histogram modules and the patterns stand alone (no
# CUDA): any cc links them
SRC=$(echo lib/mask_*.c lib/plan_*.c lib/hist_*.c lib/util.c masks/*.c)
INC="-Ilib -Imasks -Itests/unit"

for n in $names; do
	case " $all " in *" $n "*) ;; *) echo "fuzz: $n: no such harness ($all)" >&2; exit 2 ;; esac
done
if ! command -v "$CLANG" >/dev/null 2>&1; then
	echo "fuzz: $CLANG not found (Debian: apt-get install clang libclang-rt-14-dev)" >&2
	exit 3
fi
mkdir -p $B/obj
FLAGS="-g -O1 -std=c11 -D_GNU_SOURCE $INC -fsanitize=address,undefined -fno-sanitize-recover=undefined"
# the library once, every harness linked against it
objs=
for f in $SRC; do
	o=$B/obj/$(echo "$f" | tr / _).o
	$CLANG $FLAGS -fsanitize=fuzzer-no-link -c -o "$o" "$f" 2>$B/build.log || { cat $B/build.log >&2; exit 1; }
	objs="$objs $o"
done
for n in $names; do
	if ! $CLANG $FLAGS -fsanitize=fuzzer -o $B/${n}_fuzz tests/fuzz/${n}_fuzz.c $objs -lm 2>$B/build.log; then
		if grep -q -i "fuzzer" $B/build.log; then
			echo "fuzz: $CLANG cannot link libFuzzer (Debian: apt-get install libclang-rt-14-dev)" >&2
			exit 3
		fi
		cat $B/build.log >&2
		exit 1
	fi
done

# one harness: its corpus, its run, its crashes saved; the last lines of
# its log (the totals and the final cov/ft) in $B/NAME.log
one() {
	n=$1 c=$B/corpus-$1 x=$B/crashes-$1
	mkdir -p "$c" "$x" tests/fuzz/regress/$n
	rm -f "$x"/*
	if [ "$n" = mask ]; then
		${CC:-cc} -O2 -std=c11 -D_GNU_SOURCE $INC -o $B/mkseeds tests/fuzz/mkseeds.c $SRC -lm || return 1
		$B/mkseeds "$c" || return 1
	fi
	[ -d tests/fuzz/seeds/$n ] && cp tests/fuzz/seeds/$n/* "$c"/ 2>/dev/null
	d=
	[ -f tests/fuzz/$n.dict ] && d=-dict=tests/fuzz/$n.dict
	# shellcheck disable=SC2086
	$B/${n}_fuzz -max_total_time="$secs" -max_len=4096 -rss_limit_mb=2048 -timeout=10 $d ${FUZZ_FLAGS:-} \
	    -artifact_prefix="$x/" -print_final_stats=1 "$c" tests/fuzz/regress/$n >$B/$n.log 2>&1
	rc=$?
	found=0
	for f in "$x"/*; do
		[ -f "$f" ] || continue
		cp "$f" tests/fuzz/regress/$n/
		echo "fuzz: $n: $f saved as tests/fuzz/regress/$n/$(basename "$f")" >&2
		found=1
	done
	runs=$(sed -n 's/^stat::number_of_executed_units: *//p' $B/$n.log)
	cov=$(grep -E '^#[0-9]+' $B/$n.log | tail -n 1 | sed -n 's/.* cov: \([0-9]*\) ft: \([0-9]*\) corp: \([0-9]*\).*/cov \1 ft \2 corpus \3/p')
	if [ $rc -ne 0 ] || [ $found -ne 0 ]; then
		echo "fuzz: $n: failed (exit $rc); see $B/$n.log" >&2
		grep -m 3 -E '^(fuzz:|==[0-9]+==ERROR|SUMMARY)' $B/$n.log >&2
		return 1
	fi
	echo "fuzz: $n: no crash in $secs s, ${runs:-?} runs, ${cov:-?}"
}

fail=0 jobs=${FUZZ_JOBS:-1} pids=
for n in $names; do
	one "$n" &
	pids="$pids $!"
	set -- $pids
	if [ $# -ge "$jobs" ]; then
		wait "$1" || fail=1
		shift
		pids=$*
	fi
done
for p in $pids; do
	wait "$p" || fail=1
done
exit $fail
