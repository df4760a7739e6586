# The A/B modes of tests/gpu/cpbench.sh and tests/gpu/kern.sh (sourced):
# a variant is NAME=ENV, ENV the VAR=value pairs joined by commas, or
# nothing for the build's default.
# ab_env VARIANT: its VAR=value words, for env(1)
ab_env() { echo "${1#*=}" | tr ',' ' '; }
# ab_add ROUND VARIANT ROWS OUT: the rows of ROWS onto OUT, round and
# variant name first (the header once)
ab_add() {
	[ -s "$4" ] || head -1 "$3" | sed 's/^/round\tvariant\t/' >"$4"
	awk -v r="$1" -v v="${2%%=*}" 'NR > 1 { print r "\t" v "\t" $0 }' "$3" >>"$4"
}
