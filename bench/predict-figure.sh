#!/bin/sh
# The paper's CP figure by prediction (issue 16): per-GPU TFLOP/s of every
# strategy on 8, 16, 32, 64 and 96 GPUs (8 a node), 8K tokens a GPU, heads
# 64:8, head dim 128, bf16, on full, causal, full_document and
# causal_document (--long, seed 1), from one GPU's kbench -k hopper rows
# and the links that cpbench --probe-links measured inside a node; between
# nodes 400 Gb/s a GPU (--link-inter 50,10) unless INTER says otherwise.
#   sh bench/predict-figure.sh KBENCH.tsv LINKS.tsv OUT.tsv [PLOTDIR]
# The calibration masks of bench/predict-gpu.sh are made again here (maskgen
# is deterministic) so that kbench's rows find them; only the figure's rows
# are kept.  With PLOTDIR, summarize draws one picture per (mask, pass):
# bars by total tokens (8K a GPU: 64K is 8 GPUs ... 768K is 96), a colour
# per strategy.
set -u
TOP=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 3 ] || { echo "usage: predict-figure.sh KBENCH.tsv LINKS.tsv OUT.tsv [PLOTDIR]" >&2; exit 2; }
KB=$1 LK=$2 OT=$3 PD=${4:-}
B=$TOP/bin
export LONGATTN_DATA=$TOP/masks/dists
M=$(mktemp -d)
trap 'rm -rf "$M"' EXIT
cal=
for m in full causal full_document causal_document sliding_window_causal; do
	long=
	case $m in *document) long=--long ;; esac
	for n in 8192 16384; do
		"$B/maskgen" -p $m -n $n -s 1 $long -w 1024 -o "$M/c-$m-$n.amask" || exit 1
		cal="$cal $M/c-$m-$n.amask"
	done
	[ $m = sliding_window_causal ] && continue
	"$B/maskgen" -p $m -n 131072 -s 1 $long -o "$M/c-$m-131072.amask" || exit 1
	cal="$cal $M/c-$m-131072.amask"
done
: >"$M/all.tsv"
for n in 1 2 4 8 12; do
	S=$((8192 * 8 * n))
	fig=
	for m in full causal full_document causal_document; do
		long=
		case $m in *document) long=--long ;; esac
		"$B/maskgen" -p $m -n $S -s 1 $long -o "$M/f-$m-$S.amask" || exit 1
		fig="$fig $M/f-$m-$S.amask"
	done
	# shellcheck disable=SC2086
	"$B/cpbench" --predict ${n}x8 --calibrate "$KB" --links "$LK" --link-inter "${INTER:-50,10}" \
	    $fig $cal >"$M/p.tsv" || exit 1
	awk -F'\t' -v S=$S 'NR == 1 || $4 == S' "$M/p.tsv" >>"$M/all.tsv"
done
awk 'NR == 1 || $1 != "tool"' "$M/all.tsv" >"$OT"
# the table: GPUs down, strategies across, per (mask, pass)
awk -F'\t' '
$1 == "tool" { next }
{ k = $3 " " $12; if (!(k in seen)) { seen[k] = 1; tabs[++nt] = k }
  if (!(($13) in sw)) { sw[$13] = 1; ws[++nw] = $13 }
  if (!(($2) in ss)) { ss[$2] = 1; st[++ns] = $2 }
  v[k, $13, $2] = $16 == "predicted" ? sprintf("%.0f", $21) : "X" }
END {
	for (t = 1; t <= nt; t++) {
		printf "\n%s, per-GPU TFLOP/s (predicted)\n| GPUs |", tabs[t]
		for (s = 1; s <= ns; s++) printf " %s |", st[s]
		printf "\n|---:|"
		for (s = 1; s <= ns; s++) printf "---:|"
		printf "\n"
		for (w = 1; w <= nw; w++) {
			printf "| %s |", ws[w]
			for (s = 1; s <= ns; s++) printf " %s |", v[tabs[t], ws[w], st[s]]
			printf "\n"
		}
	}
}' "$OT"
if [ -n "$PD" ]; then
	# one label per strategy: the rows as another tool's, so no /world
	awk -F'\t' -v OFS='\t' 'NR > 1 { $1 = "predict"; sub(/^[0-9]+x/, "Nx", $23)
	    $23 = $23 ", 8K tokens a GPU" } { print }' "$OT" >"$M/plot.tsv"
	"$B/summarize" -p "$PD" "$M/plot.tsv" >/dev/null
fi
