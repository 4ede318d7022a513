#!/usr/bin/env bash
# A throwaway one-node SLURM cluster for the tests, entirely under one directory.
#   tests/slurm/cluster.sh start DIR   # munged + slurmctld + slurmd; writes DIR/env.sh
#   source DIR/env.sh                  # SLURM_CONF (and PATH) for sbatch/squeue/scontrol/srun
#   tests/slurm/cluster.sh stop DIR    # ends exactly the daemons `start` recorded in DIR/run/*.pid
#
# munged runs with its own key and socket (DIR/munge), slurmctld and slurmd with a generated
# DIR/etc/slurm.conf: free TCP ports, state, spool, pid and log files under DIR, no accounting
# database, no cgroups (proctrack/linuxproc, task/none), MpiDefault=pmix, one node "localhost"
# with this machine's CPUs and one partition "debug". Nothing outside DIR is touched, so it runs
# beside a system SLURM (none is needed) and several can run at once.
#
# Environment: SLURM_TEST_CPUS (CPUs of the node, default: this machine's, nproc), SLURM_TEST_CRED_EXPIRE
# (seconds a requeued job waits before it starts again, default 5; SLURM's own default is 120),
# SLURM_TEST_DEBUG (slurmctld/slurmd log level, default info).
set -euo pipefail

usage() { echo "usage: $0 start|stop|status DIR" >&2; exit 2; }
[ $# -eq 2 ] || usage
action=$1
mkdir -p "$2"
dir=$(cd "$2" && pwd)

log() { echo "cluster.sh: $*" >&2; }

# Daemons started by us, by the pid we recorded. munged and slurmctld/slurmd run in the
# foreground (-F/-D) under nohup, so the recorded pid is the daemon's own.
started_pid() {  # NAME -> pid if that process still runs, else nothing
  local file="$dir/run/$1.started" pid
  [ -s "$file" ] || return 0
  pid=$(cat "$file")
  if kill -0 "$pid" 2>/dev/null; then echo "$pid"; fi
}

stop_daemon() {  # NAME
  local pid i
  pid=$(started_pid "$1")
  [ -n "$pid" ] || { rm -f "$dir/run/$1.started"; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    log "$1 (pid $pid) did not end on SIGTERM; SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$dir/run/$1.started"
}

cancel_jobs() {  # jobs left on this cluster (a failed test): cancel them, so their processes end
  [ -n "$(started_pid slurmctld)" ] && [ -n "$(started_pid slurmd)" ] || return 0
  export SLURM_CONF="$dir/etc/slurm.conf"
  local jobs i
  jobs=$(squeue -h -o %i 2>/dev/null | tr '\n' ' ')
  [ -n "${jobs// /}" ] || return 0
  log "cancelling jobs left on the cluster: $jobs"
  # shellcheck disable=SC2086
  scancel $jobs 2>/dev/null || true
  for i in $(seq 1 60); do
    [ -z "$(squeue -h -o %i 2>/dev/null)" ] && return 0
    sleep 0.5
  done
  log "jobs still listed after 30 s: $(squeue -h -o '%i %T' 2>/dev/null | tr '\n' ' ')"
}

stop_all() {
  cancel_jobs
  # slurmd first, then slurmctld and munged.
  stop_daemon slurmd
  stop_daemon slurmctld
  stop_daemon munged
}

free_port() {  # a TCP port nothing listens on, from a random start
  local port=$(( 20000 + RANDOM % 30000 )) tries
  for tries in $(seq 1 200); do
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && ! grep -q "$port" "$dir/run/ports" 2>/dev/null; then
      echo "$port" >> "$dir/run/ports"
      echo "$port"
      return 0
    fi
    port=$(( port + 1 ))
  done
  log "no free TCP port found"
  return 1
}

wait_for() {  # SECONDS DESCRIPTION COMMAND... : polls COMMAND every 0.2 s
  local seconds=$1 what=$2 deadline
  shift 2
  deadline=$(( $(date +%s) + seconds ))
  until "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      log "timed out after ${seconds}s waiting for $what"
      return 1
    fi
    sleep 0.2
  done
}

show_logs() {
  local f
  for f in "$dir"/log/*.log; do
    [ -f "$f" ] || continue
    echo "----- $f (last 40 lines) -----" >&2
    tail -n 40 "$f" >&2
  done
}

start() {
  for tool in munged munge slurmctld slurmd sbatch scontrol sinfo; do
    command -v "$tool" >/dev/null || { log "$tool not found (bash scripts/install-slurm.sh)"; exit 1; }
  done
  if [ -n "$(started_pid slurmctld)$(started_pid slurmd)$(started_pid munged)" ]; then
    log "a cluster already runs under $dir; stop it first"
    exit 1
  fi
  mkdir -p "$dir"/{etc,munge,state,spool,log,run}
  chmod 755 "$dir/munge"  # munged wants the socket directory searchable by all
  rm -f "$dir/run/ports"
  local user cpus ctld_port slurmd_port
  user=$(id -un)
  # Not plain nproc: it answers OMP_NUM_THREADS when that is set (ctest sets it to 1).
  cpus=${SLURM_TEST_CPUS:-$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)}

  # --- munge: its own key, socket, pid, seed and log --------------------------------------
  local key="$dir/munge/munge.key" socket="$dir/munge/munge.socket.2"
  if [ ! -s "$key" ]; then
    if command -v mungekey >/dev/null; then
      mungekey --create --keyfile="$key" 2>/dev/null || dd if=/dev/urandom of="$key" bs=1024 count=1 status=none
    else
      dd if=/dev/urandom of="$key" bs=1024 count=1 status=none
    fi
  fi
  chmod 600 "$key"
  # --force: munged refuses some ownership/permission layouts (e.g. a /tmp ancestor, root);
  # the key and socket directory are private to us anyway.
  nohup munged --foreground --force --key-file="$key" --socket="$socket" \
    --pid-file="$dir/run/munged.pid" --seed-file="$dir/munge/munged.seed" \
    --log-file="$dir/log/munged.log" >> "$dir/log/munged.out" 2>&1 < /dev/null &
  echo $! > "$dir/run/munged.started"
  if ! wait_for 15 "munged's socket" sh -c "munge -n -S '$socket' | unmunge -S '$socket'"; then
    cat "$dir/log/munged.out" "$dir/log/munged.log" >&2 2>/dev/null || true
    stop_all
    exit 1
  fi

  # --- slurm.conf -----------------------------------------------------------------------
  ctld_port=$(free_port)
  slurmd_port=$(free_port)
  cat > "$dir/etc/slurm.conf" <<EOF
# Generated by tests/slurm/cluster.sh: a one-node test cluster under $dir.
ClusterName=mpiberttest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$socket,cred_expire=${SLURM_TEST_CRED_EXPIRE:-5}
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=${SLURM_TEST_DEBUG:-info}
SlurmdDebug=${SLURM_TEST_DEBUG:-info}
# No cgroups in containers: processes tracked by parent pid, no binding.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=pmix
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
# No accounting database: finished jobs stay visible to scontrol for MinJobAge seconds.
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MinJobAge=3600
JobRequeue=1
ReturnToService=2
KillWait=15
InactiveLimit=0
Waittime=0
MessageTimeout=30
MailProg=/bin/true
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
  export SLURM_CONF="$dir/etc/slurm.conf"
  cat > "$dir/env.sh" <<EOF
# Source this to talk to the test cluster under $dir.
export SLURM_CONF="$dir/etc/slurm.conf"
EOF

  # --- slurmctld and slurmd in the foreground (-D), so that the pid we record is theirs ---
  # -i: ignore state left by an earlier run in this directory.
  nohup slurmctld -D -i -f "$SLURM_CONF" >> "$dir/log/slurmctld.out" 2>&1 < /dev/null &
  echo $! > "$dir/run/slurmctld.started"
  if ! wait_for 30 "slurmctld to answer" scontrol ping; then
    show_logs; stop_all; exit 1
  fi
  # -N localhost: the node name in slurm.conf, whatever this machine's host name is.
  nohup slurmd -D -N localhost -f "$SLURM_CONF" >> "$dir/log/slurmd.out" 2>&1 < /dev/null &
  echo $! > "$dir/run/slurmd.started"
  if ! wait_for 60 "the node to become idle" sh -c 'sinfo -h -N -o "%T" | grep -qx idle'; then
    sinfo -N -l >&2 || true
    show_logs; stop_all; exit 1
  fi
  log "up under $dir: slurmctld port $ctld_port (pid $(cat "$dir/run/slurmctld.started")), slurmd port $slurmd_port" \
      "(pid $(cat "$dir/run/slurmd.started")), munged (pid $(cat "$dir/run/munged.started")), $cpus CPUs;" \
      "source $dir/env.sh"
}

case "$action" in
  start) start ;;
  stop) stop_all; log "stopped the daemons under $dir" ;;
  status)
    for d in munged slurmctld slurmd; do
      pid=$(started_pid "$d")
      echo "$d: ${pid:-not running}"
    done
    ;;
  *) usage ;;
esac
