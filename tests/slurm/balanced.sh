#!/bin/sh
# balanced under the private two-node Slurm cluster (tests/slurm/cluster.sh),
# on the CPU over MPI: every pattern maskgen makes, forward and backward,
# checked against the fp64 reference on 2 nodes x 2 ranks (--node-size 2);
# the row's sent_bytes and imbalance columns; and on a sliding window it
# moves a fraction of what ring_p2p moves.
. "$(dirname "$0")/../lib.sh"
slurm_up balanced-slurm
export SLURM_CONF LONGATTN_THREADS=1
cd "$LONGATTN_SLURM_SHARED" || exit 1
args="--backend mpi --node-size 2 -H 8:4 -D 32 -w 0 -n 1"

# every pattern at 2K tokens, windows and blocks scaled to it (as tests/gpu/kern.sh)
n=2048
gen() { p=$1; shift; maskgen -p "$p" -n $n -s 3 "$@" -o "$p.amask" || fail balanced-slurm-maskgen-$p "maskgen $*"; }
for p in $(maskgen -l | cut -f1); do
	case $p in
	sliding_window|sliding_window_causal) gen $p -w 200 ;;
	global_sliding_window) gen $p -w 200 -g 80 ;;
	block_sparse_uniform) gen $p -B 64 -H 2 --ratio 0.3 ;;
	block_sparse_variable) gen $p -H 2 --min-block 32 --avg-block 200 --ratio 0.4 ;;
	block_causal_document) gen $p -B 256 ;;
	custom)
		h=$((n / 2)) f=$((n / 5))
		printf '0 %d 0 %d full\n%d %d %d %d causal\n%d %d %d %d bicausal\n%d %d %d %d invcausal\n' \
		    $h $((3 * f / 2)) $h $n $f $((h + f)) $((f / 2)) $((2 * f)) $h $((n - f)) \
		    $((h + h / 5)) $n $((n - f)) $n >custom.txt
		gen $p -f custom.txt ;;
	*) gen $p ;;
	esac
done
for m in *.amask; do
	p=${m%.amask}
	sr "$TOP/bin/cpbench" $args -s balanced --check "$m" >"$p.tsv" 2>"$p.err"
	rc=$?
	st=$(awk -F'\t' 'NR > 1 { printf "%s:%s ", $12, $16 }' "$p.tsv")
	if [ $rc -eq 0 ] && [ "$st" = "fwd:ok bwd:ok " ]; then
		pass balanced-slurm-check-$p
	else
		fail balanced-slurm-check-$p "exit $rc, rows $st: $(grep -v '^cpbench: rank' "$p.err" | head -c 600)"
	fi
done
# sent_bytes and imbalance: a whole number, and max/mean >= 1
check balanced-slurm-columns awk -F'\t' 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i
        ok = ("sent_bytes" in c) && ("imbalance" in c); next }
    !($c["sent_bytes"] ~ /^[0-9]+$/ && $c["imbalance"] + 0 >= 1 && $c["imbalance"] + 0 < 2) { ok = 0 }
    END { exit !ok }' causal_document.tsv

# A window of 200 over 2K: balanced moves the few blocks its rows read,
# ring_p2p every K/V shard around the ring
sr "$TOP/bin/cpbench" $args -s balanced,ring_p2p -p fwd sliding_window_causal.amask >win.tsv 2>win.err
rc=$?
# "balanced-bytes ring_p2p-bytes", 0 where a row is missing
# shellcheck disable=SC2046
set -- $(awk -F'\t' 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    { b[$2] = $c["sent_bytes"] }
    END { print ("balanced" in b) ? b["balanced"] : 0, ("ring_p2p" in b) ? b["ring_p2p"] : 0 }' win.tsv)
bytes="balanced=${1:-0} ring_p2p=${2:-0}"
if [ $rc -eq 0 ] && [ "${1:-0}" -gt 0 ] && [ $((${1:-0} * 4)) -le "${2:-0}" ]; then
	pass balanced-slurm-window-bytes
else
	fail balanced-slurm-window-bytes "exit $rc, sent_bytes $bytes: $(grep -v '^cpbench: rank' win.err | head -c 600)"
fi
finish
