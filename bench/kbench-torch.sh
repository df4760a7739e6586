#!/bin/sh
# kbench-torch on one GPU (issue 18).  check: every pattern at 1K tokens
# (and three at 1000, not a multiple of Flex's block) with --check on every
# kernel found, at the paper's heads (64:8, hd 128, bf16).  paper: full,
# causal, causal_document, sliding_window_causal and hash_sparse at 8K, 16K
# and 32K, kbench-torch beside kbench -k hopper,cudnn in the same run.
# Rows to $OUT/check.tsv, $OUT/torch.tsv, $OUT/kbench.tsv; logs beside them.
# usage: bench/kbench-torch.sh [check] [paper]      (W, N: warm-up, iterations)
set -u
cd "$(dirname "$0")/.." || exit 2
OUT=${OUT:-$PWD/out/kbench-torch}
W=${W:-1} N=${N:-3}
mkdir -p "$OUT"
M=$(mktemp -d "${TMPDIR:-/tmp}/kt.XXXXXX")
trap 'rm -rf "$M"' EXIT
export PATH="$PWD/bin:$PATH" LONGATTN_DATA="$PWD/masks/dists" PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
# a kbench built elsewhere may miss cuDNN here: torch's wheel carries one
if ldd bin/kbench 2>/dev/null | grep -q 'not found'; then
	d=$(python3 -c 'import nvidia.cudnn, os; print(os.path.dirname(nvidia.cudnn.__file__) + "/lib")' 2>/dev/null)
	export LD_LIBRARY_PATH="${d:+$d:}${LD_LIBRARY_PATH:-}"
fi
if ! kbench -l >/dev/null 2>&1; then
	set -- -j16 all
	[ -f /usr/include/nccl.h ] && set -- "$@" NCCL_HOME=/usr
	[ -f /usr/include/cudnn.h ] && set -- "$@" CUDNN_HOME=/usr
	make "$@" >"$OUT/build.log" 2>&1 || { tail -n 20 "$OUT/build.log"; exit 1; }
fi
{
	nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
	python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())'
	ldd bin/kbench | grep -E 'cudnn|cublas|cudart'
	kbench -l
	kbench-torch -l
} >"$OUT/env.log" 2>&1
cat "$OUT/env.log"

[ $# -eq 0 ] && set -- check paper
for phase; do
	case $phase in
	check)
		mkdir -p "$M/c"
		printf '0 256 0 256 causal\n256 1024 0 512 full\n512 1024 512 1024 bicausal\n' >"$M/custom.txt"
		for p in $(maskgen -l | awk '{ print $1 }'); do
			x=
			[ "$p" = custom ] && x="-f $M/custom.txt"
			# shellcheck disable=SC2086
			maskgen -p "$p" -n 1024 -s 1 $x -o "$M/c/$p-1024.amask" || echo "maskgen $p failed"
		done
		for p in causal_document sliding_window random_eviction; do
			maskgen -p "$p" -n 1000 -s 2 -o "$M/c/$p-1000.amask"
		done
		t0=$(date +%s)
		kbench-torch --check -v -H 64:8 -D 128 -w 1 -n 2 "$M"/c/*.amask >"$OUT/check.tsv" 2>"$OUT/check.log"
		echo "check: exit $?, $(($(date +%s) - t0)) s, $(awk -F'\t' 'NR > 1' "$OUT/check.tsv" | wc -l) rows," \
		    "$(awk -F'\t' 'NR > 1 { n[$16]++ } END { for (s in n) printf "%s %d ", s, n[s] }' "$OUT/check.tsv")"
		;;
	paper)
		mkdir -p "$M/p"
		for s in 8K 16K 32K; do
			for p in full causal causal_document sliding_window_causal hash_sparse; do
				maskgen -p "$p" -n "$s" -s 1 -o "$M/p/$s-$p.amask"
			done
		done
		set -- "$M"/p/8K-*.amask "$M"/p/16K-*.amask "$M"/p/32K-*.amask
		t0=$(date +%s)
		kbench -v -k hopper,cudnn -w "$W" -n "$N" "$@" >"$OUT/kbench.tsv" 2>"$OUT/kbench.log"
		echo "kbench: exit $?, $(($(date +%s) - t0)) s"
		t0=$(date +%s)
		kbench-torch -v -w "$W" -n "$N" "$@" >"$OUT/torch.tsv" 2>"$OUT/torch.log"
		echo "kbench-torch: exit $?, $(($(date +%s) - t0)) s"
		;;
	esac
done
