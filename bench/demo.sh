#!/bin/sh
# The main job (make demo): seqsample | maskgen | kbench | summarize on a
# small default, full, causal, causal_document and sliding_window masks.
# On a GPU: the paper's shape (heads 64:8, head dim 128, bf16) at 2K-8K
# with flash (naive when flash is not built).  Without one: the cpu kernel
# with small heads (2:1, head dim 32) at 2K and 4K, so it ends in well
# under a minute on two cores.  Prints the table and the plots' paths.
# DEMO_DIR (default ./out/demo) holds the masks, rows and plots.
set -eu
cd "$(dirname "$0")/.."
PATH=$PWD/bin:$PATH
D=${DEMO_DIR:-$PWD/out/demo}
mkdir -p "$D"
rm -f "$D"/*.amask "$D"/rows.tsv

enabled() { kbench -l | awk -v k="$1" '$1 == k && $2 !~ /^disabled/ { f = 1 } END { exit !f }'; }

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && enabled naive; then
	k=naive
	enabled flash && k=flash
	set -- -k "$k" -H 64:8 -D 128 -w 5 -n 20
	lens="2048 4096 8192"
else
	set -- -k cpu -H 2:1 -D 32 -w 0 -n 1
	lens="2048 4096"
fi
echo "demo: kbench $* on $lens tokens, in $D" >&2
for n in $lens; do
	seqsample -n "$n" -s 1 >"$D/lengths-$n.tsv"
	maskgen -p full -n "$n" -o "$D/full-$n.amask"
	maskgen -p causal -n "$n" -o "$D/causal-$n.amask"
	maskgen -p causal_document -n "$n" -L "$D/lengths-$n.tsv" -o "$D/causal_document-$n.amask"
	maskgen -p sliding_window -n "$n" -o "$D/sliding_window-$n.amask"
done
kbench "$@" -p fwd,bwd "$D"/*.amask >"$D/rows.tsv"
if command -v gnuplot >/dev/null 2>&1; then
	summarize -p "$D/plots" "$D/rows.tsv"
else
	summarize "$D/rows.tsv"
	echo "demo: no gnuplot here, so no plots (make deps installs it)" >&2
fi
echo "demo: rows in $D/rows.tsv" >&2
