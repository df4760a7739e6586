#!/bin/bash
# round 11 call 2 (nvidia-h200-x2): CE default; A/B ce vs ce+one, traced; then tests/gpu/cpbench.sh at 8K
set -u
T0=$(date +%s)
C=$(cat .cp/commit)
make -j16 all build/tests/comm COMMIT=$C NCCL_HOME=/usr CUDNN_HOME=/usr >$OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
export LONGATTN_DATA=$PWD/masks/dists NCCL_NVLS_ENABLE=0
PATH=$PWD/bin:$PATH
W=$(mktemp -d)
el() { echo $(( $(date +%s) - T0 )); }
for m in sliding_window_causal causal_document full_document; do
	case $m in *document) long=--long;; *) long=;; esac
	maskgen -p $m -n 16384 -s 1 $long -o $W/b-$m.amask
done
first=1
for r in 1 2; do
	for m in sliding_window_causal causal_document full_document; do
		for v in ce one nccl; do
			case $v in
			ce) e=;; one) e=LONGATTN_BALANCED_ONE=1;; nccl) e=LONGATTN_BALANCED_CE=0;;
			esac
			env $e LONGATTN_CP_TRACE=1 timeout 60 mpirun --allow-run-as-root --bind-to none -n 2 cpbench -p fwd -w 3 -n 10 -s balanced $W/b-$m.amask >$W/o.tsv 2>$W/o.err
			rc=$?
			[ $first = 1 ] && { head -1 $W/o.tsv | sed 's/^/round\tvariant\t/' >$OUT/ab.tsv; first=0; }
			awk -v r=$r -v v=$v 'NR>1{print r "\t" v "\t" $0}' $W/o.tsv >>$OUT/ab.tsv
			grep 'trace' $W/o.err | sed "s/^/$r $v $m /" >>$OUT/trace.txt
			echo "$r $v $m rc=$rc $(awk -F'\t' 'NR>1{printf "%s %s %s; ", $12, $16, $18}' $W/o.tsv) at $(el)"
		done
	done
done
echo "ab done at $(el) s"
CPB_TPG=8192 sh tests/gpu/cpbench.sh $OUT/cp8k > $OUT/cp8k.txt 2>&1
echo "cpbench.sh rc=$? at $(el) s"
grep -c '^ok' $OUT/cp8k.txt; grep '^not ok' $OUT/cp8k.txt
