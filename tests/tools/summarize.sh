#!/bin/sh
# summarize on fixture TSVs: exact table, markdown and TSV text (medians,
# numeric seqlen order, OOM/X/!/ERR cells, cpbench labels, repeated
# headers), plots, bad input; with every awk at hand.
. "$(dirname "$0")/../lib.sh"
F=$TOP/tests/fixtures
K=$F/kbench-h200.tsv C=$F/cpbench-h200.tsv

for awk in awk mawk gawk; do
	command -v $awk >/dev/null 2>&1 || continue
	export AWK=$awk
	# two streams concatenated: the second header is skipped
	cat "$K" "$C" | summarize >"$T/table" 2>"$T/err"
	check "summarize table ($awk)" cmp -s "$T/table" "$F/summarize-table.txt"
	summarize -f md "$K" "$C" >"$T/md" 2>"$T/err"
	check "summarize -f md ($awk)" cmp -s "$T/md" "$F/summarize-md.txt"
	summarize -f tsv "$K" - <"$C" >"$T/tsv" 2>"$T/err"
	check "summarize -f tsv, stdin as - ($awk)" cmp -s "$T/tsv" "$F/summarize-tsv.txt"
done
unset AWK

# The medians and marks, asserted apart from the expected files.
check "median of three rows (85.94, 171.89, 57.29)" grep -q '^  2048   85.9  343.8      -$' "$F/summarize-table.txt"
check "a wrong row wins over an ok one, error is ERR" grep -q '^  2048  214.9      !    ERR$' "$F/summarize-table.txt"
check "seqlen ascending numerically" sh -c "awk '/^causal fwd/{f=1;next} f&&/^\$/{exit} f&&NR>2{print \$1}' '$F/summarize-table.txt' | tr '\n' ' ' | grep -qx '2048 16384 49152 '"
check "cpbench columns strategy/world" grep -q 'ring_p2p/8  ulysses/8  ring_p2p/4' "$F/summarize-table.txt"
check "CPU rows recomputed from ms and area" grep -q '0.0047$' "$F/summarize-table.txt"

# Rows with the newer columns (sent_bytes, imbalance after seed), alone or
# after a stream without them, give the same tables.
awk -F'\t' -v OFS='\t' 'NR == 1 { print $0, "sent_bytes", "imbalance"; next }
    { print $0, ($16 == "ok" ? 1048576 * NR : ""), ($16 == "ok" ? "1.0100" : "") }' "$C" >"$T/cnew.tsv"
check "new columns: the extra fields are there" test "$(awk -F'\t' 'NR == 2 { print NF }' "$T/cnew.tsv")" -eq 28
summarize "$K" "$T/cnew.tsv" >"$T/newcols" 2>"$T/err"
check "new columns: same table as without them" cmp -s "$T/newcols" "$F/summarize-table.txt"
cat "$K" "$T/cnew.tsv" | summarize -f tsv >"$T/newcols.tsv" 2>"$T/err"
summarize -f tsv "$K" "$C" >"$T/oldcols.tsv" 2>/dev/null
check "old stream then new stream, one input: same aggregate" cmp -s "$T/newcols.tsv" "$T/oldcols.tsv"
{ cat "$T/cnew.tsv"; cat "$K"; } | summarize >/dev/null 2>"$T/err"
check "new stream then old stream: read" test $? -eq 0
{ head -n 1 "$T/cnew.tsv"; sed -n 2p "$C"; } >"$T/mix.tsv"
# nodes (after imbalance): rows on 2 nodes, real or --node-size's, are
# their own series, (Nn) in the label, beside the same strategy on one
awk -F'\t' -v OFS='\t' 'NR == 1 { print $0, "nodes"; next } { print $0, 1 }
    NR > 1 && $2 == "ring_p2p" { print $0, 2 }' "$T/cnew.tsv" >"$T/cnodes.tsv"
summarize "$T/cnodes.tsv" >"$T/nodes" 2>"$T/err"
check "nodes: ring_p2p on 2 nodes its own column" grep -q 'ring_p2p/8(2n)' "$T/nodes"
check "nodes: ... beside the one-node ring_p2p" grep -q 'ring_p2p/8  ' "$T/nodes"
awk -F'\t' -v OFS='\t' '$NF == 2 { $14 = 2; $15 = 4 } { print }' "$T/cnodes.tsv" | summarize >"$T/nodes2" 2>"$T/err"
check "nodes: degrees and nodes in one label (2x4,2n)" grep -q 'ring_p2p/8(2x4,2n)' "$T/nodes2"
awk -F'\t' 'NR == 1 || $NF == 1' "$T/cnodes.tsv" | summarize "$K" - >"$T/nodes1" 2>"$T/err"
check "nodes: one node labels as without the column" cmp -s "$T/nodes1" "$F/summarize-table.txt"
bad "summarize: an old row under a new header" "" summarize "$T/mix.tsv"

# A table whose rows differ in shape says so in its title.
awk -F'\t' -v OFS='\t' 'NR == 3 { $8 = 32 } { print }' "$K" | summarize >"$T/mixed" 2>/dev/null
check "mixed shapes are flagged in the title" grep -q '^causal fwd: heads 64:8, .*(and other shapes or devices)$' "$T/mixed"
check "... and only that table" sh -c "[ \$(grep -c 'other shapes' '$T/mixed') -eq 1 ]"

# Plots: one PNG and one SVG per (mask, pass), paths on stderr.
if command -v gnuplot >/dev/null 2>&1; then
	summarize -p "$T/plots" "$K" "$C" >/dev/null 2>"$T/err"
	rc=$?
	check "summarize -p exits 0" [ $rc -eq 0 ]
	n=$(ls "$T/plots" | grep -v '^fig-' | grep -c '\.png$')
	check "four PNGs for four (mask, pass) tables" [ "$n" -eq 4 ]
	check "PNG magic" sh -c "head -c 8 '$T/plots/causal_fwd.png' | od -An -c | grep -q 'P   N   G'"
	check "SVG is SVG" grep -q '<svg' "$T/plots/causal_bwd.svg"
	check "plot paths on stderr" grep -q "wrote $T/plots/full_fwd.png" "$T/err"
	check "no temporary pictures left" sh -c "! ls -a '$T/plots' | grep -q tmp"
else
	skip "summarize -p" "no gnuplot"
fi

# Bad input: exit 2, one line naming summarize, no output.
printf 'tool\tkernel\n' >"$T/short.tsv"
bad "summarize: missing file" "" summarize "$T/nonexistent.tsv"
bad "summarize: unknown format" "" summarize -f xml "$K"
bad "summarize: unknown option" "" summarize -x "$K"
bad "summarize: option without its argument" "" summarize -f
bad "summarize: header without the columns" "" summarize "$T/short.tsv"
{ cat "$K"; printf 'kbench\tflash\tcausal\n'; } >"$T/cut.tsv"
bad "summarize: a short row" "" summarize "$T/cut.tsv"
tail -n 2 "$K" >"$T/nohdr.tsv"
bad "summarize: rows without a header" "" summarize "$T/nohdr.tsv"
head -n 1 "$K" >"$T/empty.tsv"
bad "summarize: no rows" "" summarize "$T/empty.tsv"
summarize -h 2>"$T/help" >/dev/null
check "summarize -h prints the usage" grep -q 'usage: summarize \[-f table|md|tsv\] \[-p PLOTDIR\] \[FILE...\]' "$T/help"
finish
