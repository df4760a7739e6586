# Shell helpers for tool tests (sourced).  Each check prints "ok NAME" or
# "not ok NAME: why"; tests/run.sh counts them.  A check that cannot run is a
# skip, and with CI=true a skip is a failure.
set -u
TOP=$(cd "$(dirname "$0")/../.." && pwd)
PATH=$TOP/bin:$PATH
T=$(mktemp -d "${TMPDIR:-/tmp}/latest.XXXXXX")
trap 'rm -rf "$T"' EXIT
nfail=0

pass() { echo "ok $1"; }
fail() { echo "not ok $1: $2"; nfail=$((nfail + 1)); }
skip() {
	if [ "${CI:-}" = true ]; then fail "$1" "cannot run in CI: $2"
	else echo "ok $1 # SKIP $2"; fi
}
# check NAME CONDITION-COMMAND...: pass if the command succeeds
check() { n=$1; shift; if "$@"; then pass "$n"; else fail "$n" "$*"; fi; }

# bad NAME OUTFILE CMD...: the command must exit 2, print one line on stderr
# that starts with the tool's name, and leave OUTFILE absent ("" for none).
bad() {
	n=$1 out=$2; shift 2
	"$@" >"$T/bad.out" 2>"$T/bad.err"
	rc=$?
	lines=$(wc -l <"$T/bad.err")
	tool=$(basename "$1")
	if [ $rc -ne 2 ]; then fail "$n" "exit $rc, want 2"
	elif [ "$lines" -ne 1 ]; then fail "$n" "$lines lines on stderr, want 1: $(head -c 200 "$T/bad.err")"
	elif ! grep -q "^$tool: " "$T/bad.err"; then fail "$n" "message does not name $tool: $(cat "$T/bad.err")"
	elif [ -n "$out" ] && [ -e "$out" ]; then fail "$n" "left $out behind"
	else pass "$n"; fi
}

finish() { [ $nfail -eq 0 ]; exit $?; }

# sr CMD...: CMD on the private cluster's 2 nodes x 2 ranks, under PMIx.
# A step whose rank crashed inside the MPI library's init (cpbench's crash
# line ends in "mpi init": a rare crash of Open MPI 4.1's TCP transport under
# srun, before any row) runs once more, as cpbench.sbatch does.
sr() {
	for try in 1 2; do
		timeout 240 srun --mpi=pmix -N2 --ntasks-per-node=2 "$@" >"$T/sr.out" 2>"$T/sr.err"
		src=$?
		[ $try -eq 1 ] && [ $src -ne 0 ] && grep -q "$INITCRASH" "$T/sr.err" || break
		cat "$T/sr.err" >&2
		echo "sr: a rank crashed inside MPI's init: once more" >&2
	done
	cat "$T/sr.out"
	cat "$T/sr.err" >&2
	return $src
}
INITCRASH='^cpbench: crashed (signal [0-9]*) in rank [0-9]* of [0-9]* (.*): mpi init$'

# slurm_up NAME: the private cluster (tests/slurm/cluster.sh) started for a
# cpbench test, stopped when the test exits, its environment set; where it
# cannot run, NAME is skipped (failed in CI) and the test ends.
slurm_up() {
	CL="$TOP/tests/slurm/cluster.sh"
	if [ "$(id -u)" -ne 0 ] || ! command -v slurmctld >/dev/null || [ ! -f "$CL" ]; then
		skip "$1" "needs root, slurm-wlm, munge and tests/slurm/cluster.sh"; finish
	fi
	if [ ! -x "$TOP/bin/cpbench" ] || ! command -v maskgen >/dev/null; then
		fail "$1" "bin/cpbench or bin/maskgen missing (make)"; finish
	fi
	export LONGATTN_SLURM_DIR=$T/slurm
	trap 'sh "$CL" stop >/dev/null 2>&1; rm -rf "$T"' EXIT
	trap 'exit 1' INT TERM HUP
	if ! sh "$CL" start >"$T/start.log" 2>&1; then
		fail "$1-start" "$(tail -n 20 "$T/start.log")"; finish
	fi
	eval "$(sh "$CL" env)"
}
