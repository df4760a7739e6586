#!/bin/sh
# Every libFuzzer harness (tests/fuzz/*_fuzz.c: the mask reader, histograms,
# length lists, custom slice lists, plans of random valid masks): its saved
# inputs (tests/fuzz/regress/NAME/) and seeds replayed through it without
# libFuzzer, then FUZZ_SECONDS (default 20) of libFuzzer with ASan and UBSan.
. "$(dirname "$0")/../lib.sh"
cd "$TOP" || exit 2
SRC=$(echo lib/mask_*.c lib/plan_*.c lib/hist_*.c lib/util.c masks/*.c)
secs=${FUZZ_SECONDS:-20}

# replays need only a C compiler; with sanitizers where it has them
objs=
build_lib() {
	objs=
	for f in $SRC; do
		o=$T/$(echo "$f" | tr / _).o
		${CC:-cc} -O1 -g -std=c11 -D_GNU_SOURCE -Ilib -Imasks "$@" -c -o "$o" "$f" 2>"$T/cc.err" || return 1
		objs="$objs $o"
	done
}
link_replay() {
	${CC:-cc} -O1 -g -std=c11 -D_GNU_SOURCE -Ilib -Imasks -Itests/unit $san -o "$T/replay-$1" \
	    tests/fuzz/replay.c "$2" $objs -lm 2>"$T/cc.err"
}
san="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
build_lib $san || { san=; build_lib; }
names=
for src in tests/fuzz/*_fuzz.c; do
	n=$(basename "$src" _fuzz.c)
	names="$names $n"
	# a compiler may take -fsanitize and still lack the runtime to link
	if ! link_replay "$n" "$src" && { [ -z "$san" ] || ! { san=; build_lib && link_replay "$n" "$src"; }; }; then
		fail "fuzz-replay $n" "harness does not build: $(head -c 300 "$T/cc.err")"
		continue
	fi
	k=0 bad="" why=""
	for f in tests/fuzz/regress/$n/* tests/fuzz/seeds/$n/*; do
		[ -f "$f" ] || continue
		k=$((k + 1))
		"$T/replay-$n" "$f" >"$T/replay.out" 2>&1 && continue
		bad="$bad $(basename "$f")"
		[ -n "$why" ] || why=$(grep -m 1 -E '^(fuzz:|==[0-9]+==ERROR)' "$T/replay.out")
	done
	if [ -n "$bad" ]; then fail "fuzz-replay $n" "crashed on$bad: $why"
	elif [ $k -eq 0 ]; then fail "fuzz-replay $n" "no saved inputs or seeds"
	else pass "fuzz-replay $n: $k saved inputs and seeds replay cleanly"; fi
done

sh tests/fuzz/run.sh "$secs" $names >"$T/fuzz.out" 2>&1
case $? in
0) pass "fuzz: $secs s of libFuzzer per harness:$names"
   sed 's/^/# /' "$T/fuzz.out" ;;
3) skip "fuzz" "$(tail -n 1 "$T/fuzz.out")" ;;
*) fail "fuzz" "$(grep -v '^fuzz: .*: no crash' "$T/fuzz.out" | head -n 6 | tr '\n' ' ')" ;;
esac
finish
