# The GPU scripts' shared helpers (sourced): gpu_homes, short_lens, and the A/B modes
# of tests/gpu/cpbench.sh and tests/gpu/kern.sh, where a variant is
# NAME=ENV, ENV the VAR=value pairs joined by commas, or nothing for the
# build's default; a piece without = belongs to the value
# before it (LONGATTN_HOPPER_BWD=qm,seg128 is one pair).  In kern.sh ab,
# NAME=@REV runs another build instead: REV a commit (ab_build makes
# build/rev-REV from git archive) or a source tree (its own make), so
# that old commits time beside the head in one call (bench/NOTES.md,
# round 13's bisect).
# ab_env VARIANT: its VAR=value words, for env(1)
ab_env() {
	[ -n "$(ab_rev "$1")" ] && return 0
	echo "${1#*=}" | awk -F, '{ s = ""; for (i = 1; i <= NF; i++)
	    s = s (i == 1 ? "" : $i ~ /=/ ? " " : ",") $i; print s }'
}
# ab_add ROUND VARIANT ROWS OUT: the rows of ROWS onto OUT, round and
# variant name first (the header once)
ab_add() {
	[ -s "$4" ] || head -1 "$3" | sed 's/^/round\tvariant\t/' >"$4"
	awk -v r="$1" -v v="${2%%=*}" 'NR > 1 { print r "\t" v "\t" $0 }' "$3" >>"$4"
}
# short_lens N: maskgen -L lengths of documents under one tile, 48-127
# tokens in N, one fixed draw (the same documents in every script and
# every session's rows)
short_lens() {
	awk -v n="$1" 'BEGIN { srand(7); print "len"; for (t = 0; t < n; t += l) {
	    l = 48 + int(rand() * 80); if (t + l > n) l = n - t; print l } }'
}
# ab_rev VARIANT: the REV of NAME=@REV, else nothing
ab_rev() {
	case ${1#*=} in @?*) echo "${1#*=@}" ;; esac
}
# ab_tree REV: where REV's build lives
ab_tree() {
	if [ -d "$1" ]; then echo "$1"; else echo "build/rev-$1"; fi
}
# ab_build REV: REV's kbench, its rows naming REV (a tree: its .commit,
# else its name)
ab_build() {
	d=$(ab_tree "$1") c=$1
	[ -d "$1" ] && { c=$(cat "$1/.commit" 2>/dev/null) || c=$(basename "$1"); }
	if [ ! -d "$1" ] && [ ! -f "$d/Makefile" ]; then
		mkdir -p "$d" && git archive "$1" | tar x -C "$d" || return 1
	fi
	# shellcheck disable=SC2046
	make -C "$d" -j16 bin/kbench bin/maskgen COMMIT="$c" $(gpu_homes) >"$d.build.log" 2>&1 &&
	    [ -x "$d/bin/kbench" ]
}
# gpu_homes: make's NCCL_HOME and CUDNN_HOME where the device has the
# headers in /usr (its NCCL and cuDNN are system packages)
gpu_homes() {
	[ -f /usr/include/nccl.h ] && printf 'NCCL_HOME=/usr '
	[ -f /usr/include/cudnn.h ] && printf 'CUDNN_HOME=/usr '
	return 0
}
