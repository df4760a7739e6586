#!/bin/sh
# GPU check of the cudnn kernel without kbench: builds tests/gpu/cudnn_try.c
# with kernels/cudnn.c against each cuDNN named (a directory holding include/
# and the library; default $CUDNN_HOME, else /usr), runs its correctness
# matrix (fwd o+lse, bwd dq/dk/dv against fp64; bf16, fp16; GQA 8:1 and MHA;
# hd 64, 128; full, causal, sliding windows, documents, odd lengths, a CP
# band), and with TIME="8192 16384" also its timings at heads 64:8.
# "pip" names the cuDNN of PyTorch's wheels.
# Then, if bin/kbench is built, `kbench --check -k cudnn` over the masks in
# $MASKS (made with bin/maskgen when unset): every row must be ok or
# unsupported, and the full/causal/window/document ones must be ok.
# TRY=0 skips the standalone matrix; KBENCH and CONFIGS pick the binary and
# the dtype,heads,head_dim triples.
set -u
cd "$(dirname "$0")/../.." || exit 2
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
[ $# -eq 0 ] && set -- "${CUDNN_HOME:-/usr}"
mkdir -p build
rc=0 n=0
for home in "$@"; do
	[ "${TRY:-1}" = 0 ] && break
	if [ "$home" = pip ]; then
		home=$(python3 -c 'import nvidia.cudnn; print(list(nvidia.cudnn.__path__)[0])') || { rc=1; continue; }
	fi
	lib=
	for d in "$home/lib64" "$home/lib" "$home/lib/x86_64-linux-gnu"; do
		ls "$d"/libcudnn.so* >/dev/null 2>&1 && { lib=$d; break; }
	done
	if [ -z "$lib" ]; then
		echo "not ok cudnn under $home: no libcudnn"
		rc=1
		continue
	fi
	if [ -e "$lib/libcudnn.so" ]; then l=-lcudnn; else l=-l:libcudnn.so.9; fi
	n=$((n + 1))
	bin=build/cudnn_try.$n
	if ! cc -O2 -std=c11 -Wall -Wextra -Werror -D_GNU_SOURCE -DCOMMIT='"gpu"' \
	    -Ilib -Ikernels -I"$home/include" -I"$CUDA_HOME/include" -o "$bin" \
	    tests/gpu/cudnn_try.c kernels/cudnn.c lib/dev_cuda.c lib/util.c \
	    -L"$lib" -Wl,-rpath,"$lib" "$l" -L"$CUDA_HOME/lib64" -Wl,-rpath,"$CUDA_HOME/lib64" \
	    -lcudart -lm -lpthread; then
		echo "not ok cudnn build against $home"
		rc=1
		continue
	fi
	echo "== cuDNN at $home"
	if "$bin" check; then echo "ok cudnn check ($home)"; else echo "not ok cudnn check ($home)"; rc=1; fi
	[ -n "${TIME:-}" ] && "$bin" time $TIME
done

KBENCH=${KBENCH:-bin/kbench}
CONFIGS=${CONFIGS:-"bf16,64:8,128 fp16,64:8,64 bf16,8:8,64 fp16,8:8,128"}
[ -x "$KBENCH" ] || { echo "ok kbench section # SKIP no $KBENCH"; exit $rc; }
if [ -z "${MASKS:-}" ]; then
	MASKS=build/cudnn-masks
	mkdir -p $MASKS
	for p in full causal sliding_window sliding_window_causal full_document causal_document \
	    share_question block_sparse_uniform; do
		bin/maskgen -p $p -n 1024 -w 128 -s 3 -o $MASKS/$p.1k.amask || rc=1
	done
	bin/maskgen -p sliding_window -n 2048 -w 256 -o $MASKS/sliding_window.2k.amask || rc=1
fi
for cfg in $CONFIGS; do
	t=${cfg%%,*} r=${cfg#*,}
	h=${r%%,*} d=${r#*,}
	"$KBENCH" --check -v -k cudnn -t $t -H $h -D $d -w 1 -n 2 $MASKS/*.amask \
	    >build/cudnn-check.tsv 2>build/cudnn-check.err
	awk -F'\t' -v cfg="$t $h hd$d" '
	    NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
	    { m = $c["mask"]; s = $c["status"]; tag = m " " $c["seqlen_q"] " " $c["pass"] " " cfg
	      want = m ~ /^(full|causal|sliding_window|sliding_window_causal|full_document|causal_document)$/
	      if (s == "ok" || (s == "unsupported" && !want)) print "ok kbench cudnn " tag " " s
	      else if (s == "unsupported" && m == "sliding_window" && $c["seqlen_k"] > 1024) print "ok kbench cudnn " tag " unsupported (cuDNN 9.14.0 bug)"
	      else { print "not ok kbench cudnn " tag ": " s; bad = 1 } }
	    END { exit bad }' build/cudnn-check.tsv || { rc=1; cat build/cudnn-check.err; }
done
exit $rc
