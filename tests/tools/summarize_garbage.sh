#!/bin/sh
# summarize on damaged input, with every awk at hand: random bytes, rows cut
# at every byte, wrong column counts, a 1 MB field, NUL bytes, CRLF,
# garbage in the right number of columns.  Each must be one line on stderr
# naming summarize and the input, exit 2 and nothing on stdout; a cut that
# loses nothing the table reads (inside the last column) may pass, but
# then with the table of the whole file.
. "$(dirname "$0")/../lib.sh"
K=$TOP/tests/fixtures/kbench-h200.tsv
G=$T/g

# garbage NAME INPUT CMD...: the command refuses, naming INPUT
garbage() {
	n=$1 in=$2; shift 2
	"$@" >"$T/out" 2>"$T/err"
	rc=$?
	if [ $rc -ne 2 ]; then fail "$n" "exit $rc, want 2"
	elif [ "$(wc -l <"$T/err")" -ne 1 ]; then fail "$n" "$(wc -l <"$T/err") lines on stderr: $(head -c 200 "$T/err")"
	elif ! grep -q "^summarize: $in: " "$T/err"; then fail "$n" "message names not summarize and $in: $(head -c 200 "$T/err")"
	elif [ -s "$T/out" ]; then fail "$n" "$(wc -c <"$T/out") bytes on stdout"
	else return 0; fi
	return 1
}

mkdir -p "$G"
hdr=$(head -n 1 "$K")
row=$(sed -n 2p "$K")
# random bytes, the same every run
LC_ALL=C awk 'BEGIN { srand(7); for (i = 0; i < 4096; i++) printf "%c", int(rand() * 256) }' >"$G/rand"
{ echo "$hdr"; cat "$G/rand"; } >"$G/hdr-rand"
# printable garbage in exactly the header's columns
LC_ALL=C awk -v n="$(echo "$hdr" | awk -F'\t' '{ print NF }')" 'BEGIN { srand(3)
	for (r = 0; r < 8; r++) { l = ""; for (f = 1; f <= n; f++) { w = ""
		for (c = int(rand() * 9); c > 0; c--) w = w sprintf("%c", 32 + int(rand() * 95))
		l = l (f > 1 ? "\t" : "") w }
		print l } }' >"$G/cols"
{ echo "$hdr"; cat "$G/cols"; } >"$G/hdr-cols"
{ cat "$K"; echo "$row" | cut -f1-10; } >"$G/short"
{ cat "$K"; printf '%s\textra\n' "$row"; } >"$G/long"
{ cat "$K"; echo "$hdr" | cut -f1-20; } >"$G/header2"
{ cat "$K"; echo "kbench"; } >"$G/onefield"
{ echo "$hdr"; echo "$row" | awk -F'\t' -v OFS='\t' 'BEGIN { s = sprintf("%1048576s", "") } { gsub(/ /, "x", s); $2 = s; print }'; } >"$G/huge"
{ echo "$hdr"; echo "$row" | sed 's/flash/fl\x00ash/; s/naive/na\x00ive/'; } >"$G/nul"
sed 's/$/\r/' "$K" >"$G/crlf"
{ echo "$hdr"; echo "$row" | sed 's/\tbf16\t/\tbf\r16\t/'; } >"$G/cr"
{ echo "$hdr"; echo "$row" | sed 's/\tok\t/\tokay\t/'; } >"$G/status"
{ echo "$hdr"; echo "$row" | awk -F'\t' -v OFS='\t' '{ $4 = "16K"; print }'; } >"$G/seqlen"
printf '\n\n' >"$G/blank"

for awk in awk mawk gawk; do
	command -v $awk >/dev/null 2>&1 || continue
	export AWK=$awk
	nbad=$nfail
	for f in rand hdr-rand hdr-cols short long header2 onefield huge nul crlf cr status seqlen blank; do
		garbage "summarize: $f ($awk)" "$G/$f" summarize "$G/$f"
	done
	garbage "summarize: random bytes on stdin ($awk)" stdin summarize <"$G/rand"
	garbage "summarize -f md: a 1 MB field ($awk)" "$G/huge" summarize -f md "$G/huge"
	garbage "summarize -f tsv: NUL bytes ($awk)" "$G/nul" summarize -f tsv "$G/nul"
	# a damaged file after a good one: still nothing on stdout
	garbage "summarize: good file, then garbage ($awk)" "$G/hdr-cols" summarize "$K" "$G/hdr-cols"

	[ $nfail -eq "$nbad" ] && pass "summarize: damaged input refused ($awk)"
done
unset AWK

# A row cut around each of its tabs, inside the file and as its last line
# (no newline): refused, or harmless with the table of the whole row.  Rows
# whose last column is seed (older streams, cpbench's fixture): a cut in
# seed is harmless; a cut in a last column summarize prints (stack, in the
# titles) reads as a shorter stack, which no portable awk can tell.
K=$TOP/tests/fixtures/cpbench-h200.tsv
row=$(sed -n 2p "$K")
{ cat "$K"; echo "$row"; } | summarize >"$T/whole-end" 2>/dev/null
{ cat "$K"; echo "$row"; tail -n 1 "$K"; } | summarize >"$T/whole-mid" 2>/dev/null
at=$(printf '%s\n' "$row" | awk -F'\t' '{ x = 0; for (i = 1; i < NF; i++) { x += length($i); printf " %d %d %d", x, x + 1, x + 2; x++ } print " " length($0) - 1 }')
nbad=$nfail cuts=0 passed=0
for i in $at; do
	printf '%s\n' "$row" | head -c "$i" >"$G/cut"
	{ cat "$K"; cat "$G/cut"; echo; tail -n 1 "$K"; } >"$G/cut-mid"
	{ cat "$K"; cat "$G/cut"; } >"$G/cut-end"
	for f in cut-mid cut-end; do
		cuts=$((cuts + 1))
		summarize "$G/$f" >"$T/out" 2>"$T/err"
		rc=$?
		if [ $rc -eq 0 ] && cmp -s "$T/out" "$T/whole-${f#cut-}" && [ ! -s "$T/err" ]; then
			passed=$((passed + 1))
		elif [ $rc -eq 0 ]; then
			fail "summarize: row cut at byte $i ($f)" "a different table"
		else
			garbage "summarize: row cut at byte $i ($f)" "$G/$f" summarize "$G/$f"
		fi
	done
done
[ $nfail -eq "$nbad" ] && pass "summarize: $cuts cut rows refused or harmless ($passed cut in the unused last column)"
finish
