#!/bin/sh
# GPU check of the cudnn kernel without kbench: builds tests/gpu/cudnn_try.c
# with kernels/cudnn.c against each cuDNN named (a directory holding include/
# and the library; default $CUDNN_HOME, else /usr), runs its correctness
# matrix (fwd o+lse, bwd dq/dk/dv against fp64; bf16, fp16; GQA 8:1 and MHA;
# hd 64, 128; full, causal, sliding windows, documents, odd lengths, a CP
# band), and with TIME="8192 16384" also its timings at heads 64:8.
# "pip" names the cuDNN of PyTorch's wheels.
set -u
cd "$(dirname "$0")/../.." || exit 2
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
[ $# -eq 0 ] && set -- "${CUDNN_HOME:-/usr}"
mkdir -p build
rc=0 n=0
for home in "$@"; do
	if [ "$home" = pip ]; then
		home=$(python3 -c 'import nvidia.cudnn, os; print(os.path.dirname(nvidia.cudnn.__file__))') || { rc=1; continue; }
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
exit $rc
