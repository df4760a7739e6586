#!/bin/sh
# cpbench --predict against measured rows on the CPU backend, under the
# private two-node Slurm cluster (tests/slurm/cluster.sh, as root): 2 nodes
# x 1 rank and 2 nodes x 2 ranks, one thread a rank (LONGATTN_THREADS=1;
# MPI yields when idle, as ranks may share this host's cores).  Per
# configuration: the links probed with cpbench --probe-links, kbench -k cpu
# rows for the calibration (run by as many ranks at once as cpbench runs),
# and every strategy measured on full, causal, full_document,
# causal_document and sliding_window_causal (-w S/8) at S tokens, fwd and
# bwd; then predicted, and compared.
#
# This host is shared (2 cores, other sessions' builds): its load moves the
# times by 2-3x over minutes.  So the whole measurement runs ROUNDS times,
# interleaved, and each row keeps its least disturbed round: measured rows
# the smallest median over the rounds, calibration rows the smallest over
# the rounds of the median over the ranks that ran at once.
#   sh bench/predict-cpu.sh OUTDIR [S [ROUNDS]]   (after make; S 2048, 3 rounds)
# Writes OUTDIR/links-NxG.tsv, kbench-NxG.tsv, measured-NxG.tsv,
# predicted-NxG.tsv, compare-NxG.tsv (bench/predict-compare.sh) and the
# raw rounds under OUTDIR/raw/.
set -u
TOP=$(cd "$(dirname "$0")/.." && pwd)
O=$(cd "${1:?usage: predict-cpu.sh OUTDIR [S [ROUNDS]]}" && pwd) || exit 2
S=${2:-2048}
ROUNDS=${3:-3}
CL=$TOP/tests/slurm/cluster.sh
export LONGATTN_SLURM_DIR=${LONGATTN_SLURM_DIR:-/var/tmp/longattn-predict}
export LONGATTN_DATA=$TOP/masks/dists LONGATTN_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
mkdir -p "$LONGATTN_SLURM_DIR" "$O/raw"
sh "$CL" status >/dev/null 2>&1 || sh "$CL" start >&2 || exit 1
eval "$(sh "$CL" env)"
export SLURM_CONF
W=$LONGATTN_SLURM_SHARED/predict.$$
mkdir -p "$W" && cd "$W" || exit 1
B=$TOP/bin
sh="-H 4:2 -D 32"
it="-w 1 -n 3"

masks=
for m in full causal full_document causal_document sliding_window_causal; do
	for n in $((S / 4)) $((S / 2)) $S; do
		"$B/maskgen" -p $m -n $n -s 1 -w $((S / 8)) -o $m-$n.amask || exit 1
	done
	masks="$masks $m-$S.amask"
done
for r in $(seq "$ROUNDS"); do
	for per in 1 2; do
		c=2x$per
		sr() { timeout 1800 srun --mpi=pmix -N2 --ntasks-per-node=$per "$@"; }
		[ "$r" = 1 ] && { sr "$B/cpbench" --backend mpi --probe-links >"$O/links-$c.tsv" 2>>log || exit 1; }
		# shellcheck disable=SC2086
		sr "$B/kbench" -k cpu $sh $it ./*.amask >"$O/raw/kbench-$c-$r.tsv" 2>>log || exit 1
		for m in $masks; do
			# shellcheck disable=SC2086
			sr "$B/cpbench" --backend mpi $sh $it $m 2>>log
		done >"$O/raw/measured-$c-$r.tsv"
		echo "predict-cpu: round $r $c done $(date +%T) (load $(cut -d' ' -f1 /proc/loadavg))" >&2
	done
done

# min over rounds (files) of the median over the rows of one file (ranks)
least() {
	awk -F'\t' -v OFS='\t' '
	$1 == "tool" { if (!hd) { hd = $0; for (i = 1; i <= NF; i++) c[$i] = i }; next }
	$c["status"] != "ok" { next }
	{ k = $c["kernel"] SUBSEP $c["mask"] SUBSEP $c["seqlen_q"] SUBSEP $c["pass"] SUBSEP $c["world"]
	  g = FILENAME SUBSEP k
	  if (!(k in seen)) { seen[k] = 1; order[++n] = k }
	  if (!(g in cnt)) { files[k] = files[k] SUBSEP FILENAME }
	  v[g, ++cnt[g]] = $c["ms_median"] + 0; row[g, cnt[g]] = $0 }
	END {
		print hd
		for (i = 1; i <= n; i++) {
			k = order[i]; best = ""; nf = split(substr(files[k], 2), f, SUBSEP)
			for (j = 1; j <= nf; j++) {
				g = f[j] SUBSEP k; m = cnt[g]
				for (a = 2; a <= m; a++) { x = v[g, a]; y = row[g, a]
					for (b = a; b > 1 && v[g, b - 1] > x; b--) { v[g, b] = v[g, b - 1]; row[g, b] = row[g, b - 1] }
					v[g, b] = x; row[g, b] = y }
				mid = int((m + 1) / 2)
				if (best == "" || v[g, mid] < best) { best = v[g, mid]; br = row[g, mid] }
			}
			print br
		}
	}' "$@"
}
for c in 2x1 2x2; do
	least "$O"/raw/kbench-$c-*.tsv >"$O/kbench-$c.tsv"
	least "$O"/raw/measured-$c-*.tsv >"$O/measured-$c.tsv"
	# shellcheck disable=SC2086
	"$B/cpbench" --predict $c --calibrate "$O/kbench-$c.tsv" --links "$O/links-$c.tsv" $sh -v \
	    ./*-$S.amask ./*-$((S / 2)).amask ./*-$((S / 4)).amask >"$O/predicted-$c.tsv" 2>"$O/predict-$c.log"
	sh "$TOP/bench/predict-compare.sh" "$O/measured-$c.tsv" "$O/predicted-$c.tsv" >"$O/compare-$c.tsv"
done
rm -rf "$W"
