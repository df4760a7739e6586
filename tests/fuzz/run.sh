#!/bin/sh
# Fuzz the mask reader for SECONDS (default 60) with libFuzzer, ASan and
# UBSan: tests/fuzz/run.sh [SECONDS].  The corpus starts from small valid
# files (mkseeds) and tests/fuzz/regress/.  A crash is copied into
# tests/fuzz/regress/, which tests/tools/fuzz.sh replays; exit 1.
# Exit 3 when clang or libFuzzer is missing.
set -u
secs=${1:-60}
cd "$(dirname "$0")/../.." || exit 2
CLANG=${CLANG:-clang}
B=build/fuzz
# the mask and plan modules stand alone (no util.c, no CUDA): any cc links them
SRC=$(echo lib/mask_*.c lib/plan_*.c lib/util.c)

if ! command -v "$CLANG" >/dev/null 2>&1; then
	echo "fuzz: $CLANG not found (Debian: apt-get install clang libclang-rt-14-dev)" >&2
	exit 3
fi
mkdir -p $B/corpus $B/crashes tests/fuzz/regress
if ! $CLANG -g -O1 -std=c11 -D_GNU_SOURCE -Ilib -fsanitize=fuzzer,address,undefined \
    -fno-sanitize-recover=undefined -o $B/mask_fuzz tests/fuzz/mask_fuzz.c $SRC 2>$B/build.log; then
	if grep -q -i "fuzzer" $B/build.log; then
		echo "fuzz: $CLANG cannot link libFuzzer (Debian: apt-get install libclang-rt-14-dev)" >&2
		exit 3
	fi
	cat $B/build.log >&2
	exit 1
fi
${CC:-cc} -O2 -std=c11 -D_GNU_SOURCE -Ilib -o $B/mkseeds tests/fuzz/mkseeds.c $SRC || exit 1
$B/mkseeds $B/corpus || exit 1

rm -f $B/crashes/*
$B/mask_fuzz -max_total_time="$secs" -max_len=4096 -rss_limit_mb=2048 -timeout=10 \
    -artifact_prefix=$B/crashes/ -print_final_stats=1 $B/corpus tests/fuzz/regress \
    >$B/fuzz.log 2>&1
rc=$?
tail -n 12 $B/fuzz.log
found=0
for f in $B/crashes/*; do
	[ -f "$f" ] || continue
	cp "$f" tests/fuzz/regress/
	echo "fuzz: $f saved as tests/fuzz/regress/$(basename "$f")" >&2
	found=1
done
if [ $rc -ne 0 ] || [ $found -ne 0 ]; then
	echo "fuzz: failed (exit $rc); see $B/fuzz.log" >&2
	exit 1
fi
echo "fuzz: no crash in $secs s"
