# The A/B modes of tests/gpu/cpbench.sh and tests/gpu/kern.sh (sourced):
# a variant is NAME=ENV, ENV the VAR=value pairs joined by commas, or
# nothing for the build's default; a piece without = belongs to the value
# before it (LONGATTN_HOPPER_BWD=qm,seg128 is one pair).
# ab_env VARIANT: its VAR=value words, for env(1)
ab_env() {
	echo "${1#*=}" | awk -F, '{ s = ""; for (i = 1; i <= NF; i++)
	    s = s (i == 1 ? "" : $i ~ /=/ ? " " : ",") $i; print s }'
}
# ab_add ROUND VARIANT ROWS OUT: the rows of ROWS onto OUT, round and
# variant name first (the header once)
ab_add() {
	[ -s "$4" ] || head -1 "$3" | sed 's/^/round\tvariant\t/' >"$4"
	awk -v r="$1" -v v="${2%%=*}" 'NR > 1 { print r "\t" v "\t" $0 }' "$3" >>"$4"
}
