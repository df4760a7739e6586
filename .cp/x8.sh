#!/bin/bash
# round 11 call 1 (nvidia-h200-x2): CE --check on every pattern, CE hang,
# 8K/GPU A/B base / lead60 / lead120 / grid / ce, traced, up to two rounds
set -u
T0=$(date +%s)
C=$(cat .cp/commit)
make -j16 all build/tests/comm COMMIT=$C NCCL_HOME=/usr CUDNN_HOME=/usr >$OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
export LONGATTN_DATA=$PWD/masks/dists NCCL_NVLS_ENABLE=0
PATH=$PWD/bin:$PATH
W=$(mktemp -d)
mr() { t=$1; shift; timeout "$t" mpirun --allow-run-as-root --bind-to none -n 2 "$@"; }
el() { echo $(( $(date +%s) - T0 )); }
echo "built at $(el) s"
for m in $([ "${X8_CHECK:-1}" = 1 ] && maskgen -l | cut -f1); do
	[ $m = custom ] && continue
	maskgen -p $m -n 2K -s 7 -o $W/$m.amask || continue
	LONGATTN_BALANCED_CE=1 mr 120 cpbench -H 8:4 -D 128 -w 0 -n 1 --check -v -s balanced $W/$m.amask >$W/ce-$m.tsv 2>>$OUT/x8.log
	rc=$?
	awk -v m=$m -v rc=$rc -F'\t' 'NR>1{print "ce-check", m, $12, $16, "exit", rc}' $W/ce-$m.tsv
done | tee $OUT/ce-check.txt
echo "checks at $(el) s"
[ "${X8_CHECK:-1}" = 1 ] && {
maskgen -p causal -n 4K -s 7 -o $W/die.amask
t0=$(date +%s)
LONGATTN_BALANCED_CE=1 LONGATTN_DIE_RANK=1 LONGATTN_DIE_AFTER=5 LONGATTN_DIE_HOW=hang \
    LONGATTN_TIMEOUT=10 mr 90 cpbench -H 8:4 -D 128 -w 1 -n 3 -s balanced $W/die.amask >/dev/null 2>$W/die.err
echo "ce-hang exit $? after $(( $(date +%s) - t0 )) s" | tee -a $OUT/ce-check.txt
tail -3 $W/die.err
}
for m in full causal full_document causal_document prefix_lm_causal sliding_window_causal; do
	case $m in *document) long=--long;; *) long=;; esac
	maskgen -p $m -n 16384 -s 1 $long -o $W/b-$m.amask
done
first=1
for r in 1 2; do
	for m in causal_document sliding_window_causal full_document causal full prefix_lm_causal; do
		for v in base lead60 lead120 grid ce; do
			[ $(el) -gt 540 ] && break 3
			case $v in
			base) e=;; lead60) e=LONGATTN_BALANCED_LEAD=60;; lead120) e=LONGATTN_BALANCED_LEAD=120;;
			grid) e=LONGATTN_HOPPER_FWD=grid;; ce) e=LONGATTN_BALANCED_CE=1;;
			esac
			env $e LONGATTN_CP_TRACE=1 timeout 60 mpirun --allow-run-as-root --bind-to none -n 2 cpbench -w 3 -n 10 -s balanced $W/b-$m.amask >$W/o.tsv 2>$W/o.err
			rc=$?
			[ $first = 1 ] && { head -1 $W/o.tsv | sed 's/^/round\tvariant\t/' >$OUT/ab.tsv; first=0; }
			awk -v r=$r -v v=$v 'NR>1{print r "\t" v "\t" $0}' $W/o.tsv >>$OUT/ab.tsv
			grep 'trace' $W/o.err | sed "s/^/$r $v $m /" >>$OUT/trace.txt
			grep -v 'trace' $W/o.err | tail -3 | sed "s/^/$r $v $m: /" >>$OUT/x8.log
			echo "$r $v $m rc=$rc $(awk -F'\t' 'NR>1{printf "%s %s %s; ", $12, $16, $18}' $W/o.tsv) at $(el)"
		done
	done
done
echo "done at $(el) s"
