#!/bin/sh
# cpbench --predict against measured rows on the CPU backend, under the
# private two-node Slurm cluster (tests/slurm/cluster.sh, as root): 2
# nodes x 2 ranks, one thread each (LONGATTN_THREADS=1; MPI yields when
# idle, as 4 ranks share this host's cores).  The links probed with
# cpbench --probe-links, kbench -k cpu rows for the calibration (run by 4
# ranks at once, as cpbench's ranks run), every strategy measured and
# predicted on full, causal, full_document, causal_document and
# sliding_window_causal (-w 256) at S tokens, fwd and bwd.
#   sh bench/predict-cpu.sh OUTDIR [S]     (after make; default S 2048)
# Writes OUTDIR/links.tsv, kbench.tsv, measured.tsv, predicted.tsv and
# compare.tsv (bench/predict-compare.sh).
set -u
TOP=$(cd "$(dirname "$0")/.." && pwd)
O=$(cd "${1:?usage: predict-cpu.sh OUTDIR [S]}" && pwd) || exit 2
S=${2:-2048}
CL=$TOP/tests/slurm/cluster.sh
export LONGATTN_SLURM_DIR=${LONGATTN_SLURM_DIR:-/var/tmp/longattn-predict}
export LONGATTN_DATA=$TOP/masks/dists LONGATTN_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
mkdir -p "$LONGATTN_SLURM_DIR"
sh "$CL" status >/dev/null 2>&1 || sh "$CL" start >&2 || exit 1
eval "$(sh "$CL" env)"
export SLURM_CONF
W=$LONGATTN_SLURM_SHARED/predict.$$
mkdir -p "$W" && cd "$W" || exit 1
sr() { timeout 1800 srun --mpi=pmix -N2 --ntasks-per-node=2 "$@"; }
B=$TOP/bin
sh="-H 8:4 -D 32"

sr "$B/cpbench" --backend mpi --probe-links >"$O/links.tsv" 2>probe.err || { cat probe.err >&2; exit 1; }
masks=
for m in full causal full_document causal_document sliding_window_causal; do
	for n in $((S / 4)) $((S / 2)) $S; do
		"$B/maskgen" -p $m -n $n -s 1 -w $((S / 8)) -o $m-$n.amask || exit 1
	done
	masks="$masks $m-$S.amask"
done
# shellcheck disable=SC2086
sr "$B/kbench" -k cpu $sh -w 1 -n 3 ./*.amask >"$O/kbench.tsv" 2>kbench.err || { cat kbench.err >&2; exit 1; }
for m in $masks; do
	# shellcheck disable=SC2086
	sr "$B/cpbench" --backend mpi $sh -w 1 -n 3 $m >"$m.tsv" 2>>cpbench.err
done
awk 'FNR > 1 || NR == 1' ./*.amask.tsv >"$O/measured.tsv"
# shellcheck disable=SC2086
"$B/cpbench" --predict 2x2 --calibrate "$O/kbench.tsv" --links "$O/links.tsv" $sh -v ./*.amask \
    >"$O/predicted.tsv" 2>"$O/predict.log"
sh "$TOP/bench/predict-compare.sh" "$O/measured.tsv" "$O/predicted.tsv" >"$O/compare.tsv"
rm -rf "$W"
