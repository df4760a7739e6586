#!/bin/sh
# The 2-GPU half of cpbench --predict's validation (issue 16), in one device
# call on nvidia-h200-x2: cpbench --probe-links, kbench -k hopper rows on one
# GPU for the calibration (every mask at 8K and 16K, heads 64:8; full,
# causal and the documents at 128K with heads 8:1, the shape of Ulysses on
# many GPUs), and cpbench rows of the five strategies (-k hopper, 8K tokens a
# GPU) on full, causal, full_document and causal_document (--long) and
# sliding_window_causal (-w 1024).  The prediction runs elsewhere
# (cpbench --predict needs no GPU): maskgen makes the same masks anywhere.
#   sh bench/predict-gpu.sh OUTDIR [COMMIT]
# Binaries: those in PREBUILT (a folder with cpbench, kbench, maskgen) when
# they load and list hopper, else a build of what is needed here.
# Writes OUTDIR/links.tsv, kbench.tsv, cpbench.tsv, log (and build.log).
set -u
cd "$(dirname "$0")/.." || exit 2
O=${1:-${OUT:-.}}
mkdir -p "$O"
export NCCL_NVLS_ENABLE=0 LONGATTN_DATA=$PWD/masks/dists
t0=$(date +%s)
log() { echo "predict-gpu: $* ($(($(date +%s) - t0)) s)" | tee -a "$O/log"; }
mr() { t=$1; shift; timeout "$t" mpirun --allow-run-as-root --bind-to none -n 2 "$@"; }

# Prebuilt binaries pass if they load, check hopper on a small mask and
# probe the links over NCCL; else build what is needed.
build() {
	set -- -j16 bin/cpbench bin/kbench bin/maskgen COMMIT="$C" \
	    GENCODE=-gencode=arch=compute_90a,code=sm_90a
	[ -f /usr/include/nccl.h ] && set -- "$@" NCCL_HOME=/usr
	[ -f /usr/include/cudnn.h ] && set -- "$@" CUDNN_HOME=/usr
	make "$@" >"$O/build.log" 2>&1 || { tail -n 30 "$O/build.log"; exit 1; }
	B=$PWD/bin
	log build
}
works() {
	[ -n "$B" ] && ! ldd "$B/cpbench" "$B/kbench" | grep 'not found' &&
	"$B/maskgen" -p causal -n 1024 -o "$T/t.amask" &&
	CUDA_VISIBLE_DEVICES=0 "$B/kbench" -k hopper --check -H 8:8 -w 0 -n 1 "$T/t.amask" >"$T/t.tsv" &&
	mr 60 "$B/cpbench" --probe-links >"$O/links.tsv" 2>>"$O/log"
}
C=${2:-unknown}
T=$(mktemp -d)
B=${PREBUILT:-}
if works; then
	log "prebuilt binaries work"
else
	build
	mr 60 "$B/cpbench" --probe-links >"$O/links.tsv" 2>>"$O/log"
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$O/log"
log "probe"
M=$(mktemp -d)
for m in full causal full_document causal_document sliding_window_causal; do
	long=
	case $m in *document) long=--long ;; esac
	for n in 8192 16384; do
		"$B/maskgen" -p $m -n $n -s 1 $long -w 1024 -o "$M/$m-$n.amask" || exit 1
	done
done
CUDA_VISIBLE_DEVICES=0 timeout 90 "$B/kbench" -k hopper -w 2 -n 5 "$M"/*.amask >"$O/kbench.tsv" 2>>"$O/log"
log "kbench $?"
for m in causal full causal_document full_document sliding_window_causal; do
	mr 90 "$B/cpbench" -k hopper -w 2 -n 5 "$M/$m-16384.amask" >>"$O/cpbench.tsv" 2>>"$O/log"
	log "cpbench $m $?"
done
L=$(mktemp -d)
for m in full causal full_document causal_document; do
	long=
	case $m in *document) long=--long ;; esac
	"$B/maskgen" -p $m -n 131072 -s 1 $long -o "$L/$m-131072.amask" || exit 1
done
CUDA_VISIBLE_DEVICES=0 timeout 60 "$B/kbench" -k hopper -H 8:1 -w 1 -n 3 "$L"/*.amask >>"$O/kbench.tsv" 2>>"$O/log"
log "kbench 128K $?"
rm -rf "$M" "$L" "$T"
