#!/bin/sh
# cluster.sh: a private two-node Slurm cluster on this one machine, for tests.
#
#   sh tests/slurm/cluster.sh start    munged, slurmctld, slurmd n1 and n2; waits
#                                      until both nodes are idle (or fails, with logs)
#   sh tests/slurm/cluster.sh stop     cancels the jobs, kills every daemon it started
#                                      and their steps; safe to call twice
#   sh tests/slurm/cluster.sh status   the daemons and sinfo; exit 0 iff all are up
#   eval "$(sh tests/slurm/cluster.sh env)"
#                                      sets SLURM_CONF (srun, sbatch, squeue, scontrol
#                                      then talk to this cluster) and LONGATTN_SLURM_SHARED
#   sh tests/slurm/cluster.sh          (no argument, as make check runs it) a
#                                      self-test in a fresh private directory
#
# State lives in LONGATTN_SLURM_DIR (default ${TMPDIR:-/tmp}/longattn-slurm):
# slurm.conf, the munge key and socket, pid files, logs (slurmctld.log,
# n1/slurmd.log, n2/slurmd.log, munge/munged.log) and jobcomp.log, one line per
# finished job with its JobState and ExitCode.  Nothing in /etc is touched;
# the ports are the first free ones from LONGATTN_SLURM_PORT (default 16817).
# Two test files may run two clusters at once if their LONGATTN_SLURM_DIRs differ.
#
# Both "nodes" are this host (NodeAddr 127.0.0.1, distinct slurmd ports, 4
# CPUs each by config_overrides, so srun -N2 --ntasks-per-node=2 fits on any
# machine).  Each slurmd runs in its own mount namespace with a private /tmp
# and /dev/shm: Slurm's pmix plugin, PMIx and Open MPI name their files there
# after the host and local rank, and two nodes on one host would share and
# delete them under each other (Open MPI's shared-memory transport crashes).
# So a job does NOT see the caller's /tmp.  It sees, at their usual paths,
# everything outside /tmp, the state directory (LONGATTN_SLURM_SHARED is a
# directory in it meant for job files), this repository (a clone under /tmp
# too) and the directories listed,
# colon-separated, in LONGATTN_SLURM_BIND when start ran.  Submit from such a
# directory (or use --chdir), or slurmd falls back to its private /tmp.
#
# Example (as root, which the daemons need):
#   export LONGATTN_SLURM_DIR=$(mktemp -d /var/tmp/slurm.XXXXXX)
#   sh tests/slurm/cluster.sh start && eval "$(sh tests/slurm/cluster.sh env)"
#   trap 'sh tests/slurm/cluster.sh stop' EXIT
#   srun --mpi=pmix -N2 --ntasks-per-node=2 env | grep PMIX_RANK
set -u
S=${LONGATTN_SLURM_DIR:-${TMPDIR:-/tmp}/longattn-slurm}
case $S in /*) ;; *) S=$(pwd)/$S;; esac
NODES="n1 n2"
REPO=$(cd "$(dirname "$0")/../.." && pwd)
CONF=$S/slurm.conf
HOST=$(hostname -s)
me=cluster.sh

die() { echo "$me: $*" >&2; exit 1; }
# startfail MSG: the logs, then stop what did start, then die
startfail() { logs; stop; die "$*"; }

# alive PIDFILE NAME: the pid in PIDFILE runs a program called NAME
alive() {
	[ -s "$1" ] || return 1
	p=$(cat "$1")
	[ -r "/proc/$p/comm" ] && [ "$(cat "/proc/$p/comm")" = "$2" ]
}

logs() {
	for f in "$S/munge/munged.log" "$S/slurmctld.log" "$S"/n?/slurmd.log; do
		[ -f "$f" ] || continue
		echo "---- $f (last 40 lines)" >&2
		tail -n 40 "$f" >&2
	done
}

# freeports N: N TCP ports from LONGATTN_SLURM_PORT up that no socket uses,
# in any state (a port in TIME_WAIT from the last cluster would not bind).
freeports() {
	used=$(cat /proc/net/tcp /proc/net/tcp6 2>/dev/null |
	    awk 'NR > 1 { split($2, a, ":"); print a[2] }' | sort -u)
	p=${LONGATTN_SLURM_PORT:-16817} got=0
	while [ $got -lt "$1" ] && [ "$p" -lt 65000 ]; do
		if ! echo "$used" | grep -qx "$(printf '%04X' "$p")"; then
			echo "$p"; got=$((got + 1))
		fi
		p=$((p + 1))
	done
}

writeconf() {
	set -- $(freeports 3)
	[ $# -eq 3 ] || die "no free TCP ports from ${LONGATTN_SLURM_PORT:-16817}"
	: >"$S/plugstack.conf"
	cat >"$CONF" <<EOF
# Written by tests/slurm/cluster.sh; removed by its stop.
ClusterName=longattn
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$1
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$S/munge/munge.socket.2
CredType=cred/munge
StateSaveLocation=$S/ctld
SlurmdSpoolDir=$S/%n/spool
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/%n/slurmd.pid
SlurmctldLogFile=$S/slurmctld.log
SlurmdLogFile=$S/%n/slurmd.log
SlurmdParameters=config_overrides
PlugStackConfig=$S/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=pmix
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$S/jobcomp.log
# Finished jobs stay in scontrol show job for an hour: no slurmdbd needed.
MinJobAge=3600
ReturnToService=2
SlurmdTimeout=300
InactiveLimit=0
KillWait=5
MessageTimeout=30
NodeName=n1 NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$2 CPUs=4 RealMemory=2000 State=UNKNOWN
NodeName=n2 NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$3 CPUs=4 RealMemory=2000 State=UNKNOWN
PartitionName=debug Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP
EOF
}

startmunge() {
	m=$S/munge
	mkdir -p "$m" && chmod 700 "$m" || die "cannot make $m"
	dd if=/dev/urandom of="$m/munge.key" bs=1024 count=1 2>/dev/null &&
	    chmod 400 "$m/munge.key" || die "cannot write $m/munge.key"
	# --force: the state directory may sit below a world-writable /tmp.
	munged --force --socket="$m/munge.socket.2" --key-file="$m/munge.key" \
	    --pid-file="$m/munged.pid" --log-file="$m/munged.log" \
	    --seed-file="$m/munged.seed" 2>>"$m/munged.log" ||
	    startfail "munged did not start"
}

# startslurmd NODE: slurmd -N NODE in a mount namespace of its own whose /tmp
# is $S/NODE/tmp, with the state directory and LONGATTN_SLURM_BIND bound back
# in at their own paths.
startslurmd() {
	n=$1 p=$S/$1/tmp
	mkdir -p "$S/$n/spool" "$p" && chmod 1777 "$p" || die "cannot make $S/$n"
	unshare --mount --propagation private sh -euc '
		p=$1; shift
		for d in "$@"; do
			case $d in /tmp/*) ;; *) continue;; esac
			[ -d "$d" ] || continue
			mkdir -p "$p${d#/tmp}"
			mount --bind "$d" "$p${d#/tmp}"
		done
		mount --rbind "$p" /tmp
		mount -t tmpfs -o mode=1777 shm /dev/shm
		readlink /proc/self/ns/mnt >"$S_DIR/$N/mntns"
		exec slurmd -N "$N" -f "$SLURM_CONF"
	' sh "$p" "$S" "$REPO" $(echo "${LONGATTN_SLURM_BIND:-}" | tr ':' ' ') \
	    2>>"$S/$n/slurmd.log" || startfail "slurmd -N $n did not start"
}

start() {
	[ "$(id -u)" -eq 0 ] || die "start: the daemons need root"
	for c in munged slurmctld slurmd unshare sinfo; do
		command -v $c >/dev/null || die "start: $c not found (make deps)"
	done
	if alive "$S/slurmctld.pid" slurmctld || alive "$S/munge/munged.pid" munged; then
		die "start: a cluster already runs in $S (cluster.sh stop first)"
	fi
	rm -rf "$S/ctld" "$S/n1" "$S/n2" "$S/jobcomp.log" "$S"/*.log
	mkdir -p "$S/ctld" "$S/shared" || die "cannot make $S"
	writeconf
	export SLURM_CONF=$CONF S_DIR=$S
	startmunge
	slurmctld -f "$CONF" 2>>"$S/slurmctld.log" || startfail "slurmctld did not start"
	for n in $NODES; do N=$n startslurmd $n; done
	i=0
	while [ $i -lt 60 ]; do
		idle=$(sinfo -h -N -o '%N %t' 2>/dev/null | awk '$2 == "idle"' | wc -l)
		[ "$idle" -eq 2 ] && { echo "$me: 2 nodes idle ($S)"; return 0; }
		sleep 0.5
		i=$((i + 1))
	done
	sinfo -N >&2
	startfail "start: the nodes are not idle after 30 s"
}

# killpid PIDFILE NAME: TERM, then KILL after 10 s
killpid() {
	alive "$1" "$2" || { rm -f "$1"; return 0; }
	p=$(cat "$1")
	kill "$p" 2>/dev/null
	i=0
	while [ -d "/proc/$p" ] && [ $i -lt 20 ]; do sleep 0.5; i=$((i + 1)); done
	[ -d "/proc/$p" ] && kill -9 "$p" 2>/dev/null
	rm -f "$1"
}

# Every process in a node's namespace is that slurmd, its slurmstepds or
# their tasks: all started by us.
killns() {
	[ -s "$S/$1/mntns" ] || return 0
	ns=$(cat "$S/$1/mntns")
	for sig in TERM KILL; do
		for d in /proc/[0-9]*; do
			[ "$(readlink "$d/ns/mnt" 2>/dev/null)" = "$ns" ] || continue
			kill -s $sig "${d#/proc/}" 2>/dev/null
		done
		[ $sig = TERM ] && sleep 1
	done
	rm -f "$S/$1/mntns"
}

stop() {
	if [ -f "$CONF" ] && alive "$S/slurmctld.pid" slurmctld; then
		SLURM_CONF=$CONF scancel --quiet --full $(SLURM_CONF=$CONF squeue -h -o %A 2>/dev/null) \
		    2>/dev/null
	fi
	for n in $NODES; do killpid "$S/$n/slurmd.pid" slurmd; killns $n; done
	killpid "$S/slurmctld.pid" slurmctld
	killpid "$S/munge/munged.pid" munged
	return 0
}

status() {
	rc=0
	for d in "munge/munged.pid munged" "slurmctld.pid slurmctld" \
	    "n1/slurmd.pid slurmd" "n2/slurmd.pid slurmd"; do
		set -- $d
		if alive "$S/$1" $2; then echo "$2 ($1): running, pid $(cat "$S/$1")"
		else echo "$2 ($1): not running"; rc=1; fi
	done
	[ $rc -eq 0 ] && SLURM_CONF=$CONF sinfo -N
	return $rc
}

# With no argument (as tests/run.sh calls it): a self-test of a fresh
# cluster in a private directory: PMIx ranks on both nodes, Open MPI
# initialising under srun, a failing batch job reported FAILED, stop leaving
# no daemon behind.
selftest() {
	. "$(dirname "$0")/../lib.sh"
	if [ "$(id -u)" -ne 0 ] || ! command -v slurmctld >/dev/null; then
		skip cluster "needs root and slurm-wlm, munge (make deps)"; finish
	fi
	S=$T/slurm CONF=$T/slurm/slurm.conf
	export LONGATTN_SLURM_DIR=$S SLURM_CONF=$CONF
	trap 'stop; rm -rf "$T"' EXIT
	if ! start >"$T/start.log" 2>&1; then
		fail cluster-start "$(cat "$T/start.log")"; finish
	fi
	pass cluster-start
	cd "$S/shared" || exit 1
	timeout 60 srun --mpi=pmix -N2 --ntasks-per-node=2 \
	    sh -c 'echo "$SLURMD_NODENAME $PMIX_RANK"' >ranks 2>&1
	check srun-pmix-ranks test "$(sort ranks | tr '\n' ' ')" = "n1 0 n1 1 n2 2 n2 3 "
	if command -v mpicc >/dev/null; then
		cat >hello.c <<-'EOF'
		#include <mpi.h>
		#include <stdio.h>
		int main(int argc, char **argv) {
			int r, n, sum = 0;
			MPI_Init(&argc, &argv);
			MPI_Comm_rank(MPI_COMM_WORLD, &r);
			MPI_Comm_size(MPI_COMM_WORLD, &n);
			MPI_Allreduce(&r, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
			printf("%d %d %d\n", r, n, sum);
			MPI_Finalize();
			return 0;
		}
		EOF
		mpicc -o hello hello.c 2>"$T/mpicc.log" &&
		    timeout 60 srun --mpi=pmix -N2 --ntasks-per-node=2 ./hello >mpi.out 2>&1
		check srun-mpi-allreduce test "$(sort mpi.out | tr '\n' ' ')" = "0 4 6 1 4 6 2 4 6 3 4 6 "
	else
		skip srun-mpi-allreduce "no mpicc (libopenmpi-dev)"
	fi
	printf '#!/bin/sh\nexit 3\n' >fail.sh
	id=$(timeout 60 sbatch --parsable --wait -o /dev/null fail.sh 2>/dev/null)
	check sbatch-failed-state sh -c "scontrol show job '$id' | grep -q 'JobState=FAILED .*' &&
	    scontrol show job '$id' | grep -q ' ExitCode=3:0' &&
	    grep -q 'JobId=$id .*JobState=FAILED' '$S/jobcomp.log'"
	stop
	stop
	left=
	for f in munge/munged.pid slurmctld.pid n1/slurmd.pid n2/slurmd.pid; do
		[ -e "$S/$f" ] && left="$left $f"
	done
	check stop-twice test -z "$left"
	finish
}

case ${1:-} in
'') selftest;;
start) start;;
stop) stop;;
status) status;;
env) echo "export SLURM_CONF='$CONF' LONGATTN_SLURM_SHARED='$S/shared'";;
*) echo "usage: $me start | stop | status | env" >&2; exit 2;;
esac
