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
