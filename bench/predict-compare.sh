#!/bin/sh
# predict-compare.sh [-c COLUMN] MEASURED.tsv PREDICTED.tsv: cpbench rows
# measured against cpbench --predict rows of the same (strategy, mask,
# seqlen, pass, world, degrees): one line each with both times and the
# error of the prediction (predicted/measured - 1; rows of one node and of
# several, real or --node-size's, kept apart), then the median and
# worst absolute error on standard error.  COLUMN: the measured time,
# ms_median (default) or ms_min (the undisturbed time on a shared host).
# Rows with no partner are left out.
col=ms_median
[ "${1:-}" = -c ] && { col=${2:-}; shift 2; }
case $col in ms_median|ms_min) ;; *) echo "predict-compare: -c: '$col' is not ms_median or ms_min" >&2; exit 2;; esac
[ $# -eq 2 ] || { echo "usage: predict-compare.sh [-c ms_median|ms_min] MEASURED.tsv PREDICTED.tsv" >&2; exit 2; }
awk -F'\t' -v OFS='\t' -v col="$col" '
$1 == "tool" { for (i = 1; i <= NF; i++) c[$i] = i; next }
function key() { return $c["kernel"] SUBSEP $c["mask"] SUBSEP $c["seqlen_q"] SUBSEP $c["pass"] SUBSEP $c["world"] SUBSEP $c["ulysses"] SUBSEP $c["ring"] SUBSEP (("nodes" in c) && $c["nodes"] > 1 ? $c["nodes"] : 1) }
FNR == NR { if ($c["status"] == "ok") { k = key(); if (!(k in m)) order[++n] = k; m[k] = $c[col]; dev[k] = $c["device"] } next }
$c["status"] == "predicted" { p[key()] = $c["ms_median"] }
END {
	print "strategy", "mask", "seqlen", "pass", "world", "ulysses", "ring", "measured_ms", "predicted_ms", "error_pct", "device"
	for (i = 1; i <= n; i++) {
		k = order[i]
		if (!(k in p)) continue
		split(k, f, SUBSEP)
		e = (p[k] / m[k] - 1) * 100
		print f[1], f[2], f[3], f[4], f[5], f[6], f[7], m[k], p[k], sprintf("%+.1f", e), dev[k]
		a[++na] = e < 0 ? -e : e
	}
	for (i = 2; i <= na; i++) { x = a[i]; for (j = i; j > 1 && a[j - 1] > x; j--) a[j] = a[j - 1]; a[j] = x }
	if (na)
		printf "predict-compare: %d rows (%s), median |error| %.1f%%, worst %.1f%%\n", na, col,
		    na % 2 ? a[(na + 1) / 2] : (a[na / 2] + a[na / 2 + 1]) / 2, a[na] > "/dev/stderr"
}' "$1" "$2"
