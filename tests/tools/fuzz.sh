#!/bin/sh
# The mask reader under libFuzzer (ASan, UBSan) for a bounded time, and every
# saved crash in tests/fuzz/regress/ replayed through the same harness.
. "$(dirname "$0")/../lib.sh"
cd "$TOP" || exit 2
# the mask and plan modules stand alone (no util.c, no CUDA): any cc links them
SRC=$(echo lib/mask_*.c lib/plan_*.c lib/util.c)

# replays need only a C compiler; with sanitizers where it has them
build_replay() {
	${CC:-cc} -O1 -g -std=c11 -D_GNU_SOURCE -Ilib "$@" -o "$T/replay" tests/fuzz/replay.c \
	    tests/fuzz/mask_fuzz.c $SRC 2>"$T/cc.err"
}
if build_replay -fsanitize=address,undefined -fno-sanitize-recover=undefined || build_replay; then
	n=0 bad=""
	for f in tests/fuzz/regress/*; do
		[ -f "$f" ] || continue
		n=$((n + 1))
		"$T/replay" "$f" >/dev/null 2>&1 || bad="$bad $(basename "$f")"
	done
	if [ -n "$bad" ]; then fail "fuzz-replay" "crashed on$bad"
	elif [ $n -eq 0 ]; then fail "fuzz-replay" "no files in tests/fuzz/regress"
	else pass "fuzz-replay: $n saved inputs replay cleanly"; fi
else
	fail "fuzz-replay" "harness does not build: $(head -c 300 "$T/cc.err")"
fi

sh tests/fuzz/run.sh "${FUZZ_SECONDS:-30}" >"$T/fuzz.out" 2>&1
case $? in
0) pass "fuzz: ${FUZZ_SECONDS:-30} s of libFuzzer on mask_read, plan_build, plan_transpose, mask_restrict" ;;
3) skip "fuzz" "$(tail -n 1 "$T/fuzz.out")" ;;
*) fail "fuzz" "$(tail -n 4 "$T/fuzz.out" | tr '\n' ' ')" ;;
esac
finish
