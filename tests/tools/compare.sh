#!/bin/sh
# summarize --compare on fixture pairs: the exact table (matched rows,
# NEW/OLD TFLOP/s and memory, unmatched rows, the summary), exit 0 within
# the threshold, 1 for a row slower than it or one that went from ok to
# oom, wrong or error, 2 for bad input; with every awk at hand.
. "$(dirname "$0")/../lib.sh"
F=$TOP/tests/fixtures
cd "$F" || exit 2
O=compare-old.tsv N=compare-new.tsv

# NEW with one row edited: awk program on compare-new.tsv into $T/$1
edit() { out=$1; shift; awk -F'\t' -v OFS='\t' "$@" "$N" >"$T/$out"; }
edit slower.tsv '$2 == "flash" && $4 == 16384 && $12 == "fwd" { $21 = "340.00"; $18 = "3.2350" } { print }'
edit oom.tsv '$2 == "flash" && $4 == 49152 && $12 == "fwd" { $16 = "oom"; $17 = $18 = $19 = $20 = $21 = $22 = "" } { print }'
edit wrong.tsv '$2 == "ulysses" { $16 = "wrong"; $17 = $18 = $19 = $20 = $21 = $22 = "" } { print }'
edit unsup.tsv '$2 == "flash" && $4 == 2048 && $12 == "fwd" { $16 = "unsupported"; $17 = $18 = $19 = $20 = $21 = $22 = "" } { print }'
edit nokey.tsv '{ $3 = $3 "_other" } { print }'
edit nocol.tsv '{ $21 = "" } NR == 1 { $21 = "speed" } { print }'
edit short.tsv 'NR == 3 { NF = 10 } { print }'

for awk in awk mawk gawk; do
	command -v $awk >/dev/null 2>&1 || continue
	export AWK=$awk
	summarize --compare $O $N >"$T/out" 2>"$T/err"
	rc=$?
	check "compare within 5%: exit 0 ($awk)" [ $rc -eq 0 ]
	check "compare: the expected table ($awk)" cmp -s "$T/out" compare.txt
	summarize --compare $O "$T/slower.tsv" >"$T/out" 2>&1
	check "compare: a row 7% slower: exit 1 ($awk)" [ $? -eq 1 ]
	check "compare: ... marked SLOWER ($awk)" grep -q '^kbench  *flash  *causal  *16384  *fwd .* 0\.927 .*SLOWER$' "$T/out"
	summarize --compare $O "$T/slower.tsv" --threshold 10 >"$T/out" 2>&1
	check "compare --threshold 10: the same row passes ($awk)" [ $? -eq 0 ]
	summarize --compare $O "$T/oom.tsv" >"$T/out" 2>&1
	check "compare: ok to oom: exit 1 ($awk)" [ $? -eq 1 ]
	check "compare: ... marked WAS OK ($awk)" grep -q '^kbench  *flash  *causal  *49152 .* 395\.8  *OOM .*WAS OK$' "$T/out"
	summarize --compare $O "$T/wrong.tsv" >"$T/out" 2>&1
	check "compare: ok to wrong: exit 1 ($awk)" [ $? -eq 1 ]
	summarize --compare $O "$T/unsup.tsv" >"$T/out" 2>&1
	check "compare: ok to unsupported is listed, exit 0 ($awk)" sh -c "[ $? -eq 0 ] && grep -q ' X .*status\$' '$T/out'"
	summarize --compare "$T/slower.tsv" $O >/dev/null 2>&1
	check "compare: faster is no failure ($awk)" [ $? -eq 0 ]
done
unset AWK

summarize --compare $O $N | tail -n 1 >"$T/sum"
check "compare: summary line" grep -qx '10 rows matched: 0 slower by more than 5%, 0 from ok to wrong, oom or error, 0 faster; 1 only in OLD, 1 only in NEW' "$T/sum"
check "compare: a row only in OLD is listed" sh -c "grep -A1 '^only in OLD (1):' compare.txt | grep -q 'naive  causal  2048  bwd'"
check "compare: a row only in NEW is listed" sh -c "grep -A1 '^only in NEW (1):' compare.txt | grep -q 'hopper  causal  16384  fwd'"
check "compare: NEW's stack named" grep -q '^NEW compare-new.tsv (commit fedcba987654, driver=580.159.03 cuda=13.0' compare.txt

# Bad input: exit 2, one line naming summarize.
bad "compare: one file" "" summarize --compare $O
bad "compare: three files" "" summarize --compare $O $N $N
bad "compare: a missing file" "" summarize --compare $O "$T/nonexistent.tsv"
bad "compare: threshold not a number" "" summarize --compare $O $N --threshold five
bad "compare: threshold without its value" "" summarize --compare $O $N --threshold
bad "compare: unknown option" "" summarize --compare $O $N -x
bad "compare: no row matches" "" summarize --compare $O "$T/nokey.tsv"
bad "compare: a header without tflops" "" summarize --compare $O "$T/nocol.tsv"
bad "compare: a short row" "" summarize --compare $O "$T/short.tsv"
: >"$T/empty.tsv"
bad "compare: an empty file" "" summarize --compare "$T/empty.tsv" $N
head -n 1 $N >"$T/hdr.tsv"
bad "compare: a header alone" "" summarize --compare $O "$T/hdr.tsv"
finish
