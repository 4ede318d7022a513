#!/usr/bin/env bash
# A throwaway SLURM cluster for the tests, entirely under one directory.
#   tests/slurm/cluster.sh start DIR [HOSTS]  # munged + slurmctld + slurmd(s); writes DIR/env.sh
#   source DIR/env.sh                  # SLURM_CONF, and SLURM_CLIENT: the prefix for client commands
#   tests/slurm/cluster.sh stop DIR    # ends exactly the daemons `start` recorded in DIR/run/*.started
#
# munged runs with its own key and socket (DIR/munge), slurmctld and slurmd with a generated
# DIR/etc/slurm.conf: free TCP ports, state, spool, pid and log files under DIR, no accounting
# database, no cgroups (proctrack/linuxproc, task/none), MpiDefault=pmix, one partition "debug".
# Without HOSTS: one node "localhost" with this machine's CPUs. With HOSTS, a directory of test
# hosts made by tests/cluster/hosts.sh: one node per host (h1..hN, NodeAddr its address), each
# with its own slurmd inside its namespace, and slurmctld on h1. Client commands (sbatch, squeue,
# scontrol, ...) must then run inside h1's namespace: env.sh sets SLURM_CLIENT to that prefix
# ("ip netns exec NS"; empty for one node) and defines sbatch/squeue/... functions that use it.
# Each host after h1 also gets a munged of its own (see start()). Nothing outside DIR is
# touched, so it runs beside a system SLURM (none is needed) and several can run at once.
#
# Environment: SLURM_TEST_CPUS (CPUs of the node, default: this machine's, nproc), SLURM_TEST_CRED_EXPIRE
# (seconds a requeued job waits before it starts again, default 5; SLURM's own default is 120),
# SLURM_TEST_DEBUG (slurmctld/slurmd log level, default info).
set -euo pipefail

usage() { echo "usage: $0 start DIR [HOSTS] | stop DIR | status DIR" >&2; exit 2; }
[ $# -eq 2 ] || { [ $# -eq 3 ] && [ "$1" = start ]; } || usage
action=$1
mkdir -p "$2"
dir=$(cd "$2" && pwd)
hosts_dir=${3:-}
hosts_sh=$(cd "$(dirname "$0")/../cluster" && pwd)/hosts.sh

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

# A client command (squeue, scontrol, ...) where slurmctld can be reached: inside h1's namespace
# on a cluster of test hosts (env.sh's SLURM_CLIENT).
client() {
  local SLURM_CLIENT=""
  # shellcheck disable=SC1091
  [ ! -f "$dir/env.sh" ] || source "$dir/env.sh"
  # shellcheck disable=SC2086
  $SLURM_CLIENT "$@"
}

daemon_names() {  # KIND -> the daemons of that kind recorded: KIND (one node) or KIND-h1, ...
  local f
  for f in "$dir"/run/"$1"*.started; do [ -e "$f" ] && basename "$f" .started; done
}

cancel_jobs() {  # jobs left on this cluster (a failed test): cancel them, so their processes end
  [ -n "$(started_pid slurmctld)" ] || return 0
  export SLURM_CONF="$dir/etc/slurm.conf"
  local jobs i
  jobs=$(client squeue -h -o %i 2>/dev/null | tr '\n' ' ')
  [ -n "${jobs// /}" ] || return 0
  log "cancelling jobs left on the cluster: $jobs"
  # shellcheck disable=SC2086
  client scancel $jobs 2>/dev/null || true
  for i in $(seq 1 60); do
    [ -z "$(client squeue -h -o %i 2>/dev/null)" ] && return 0
    sleep 0.5
  done
  log "jobs still listed after 30 s: $(client squeue -h -o '%i %T' 2>/dev/null | tr '\n' ' ')"
}

stop_all() {
  cancel_jobs
  # slurmd first, then slurmctld and munged.
  local name
  for name in $(daemon_names slurmd); do stop_daemon "$name"; done
  stop_daemon slurmctld
  for name in $(daemon_names munged); do stop_daemon "$name"; done
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
  if [ -n "$(started_pid slurmctld)$(started_pid munged)" ]; then
    log "a cluster already runs under $dir; stop it first"
    exit 1
  fi
  mkdir -p "$dir"/{etc,munge,state,spool,log,run}
  rm -f "$dir/run/ports"
  local user cpus ctld_port slurmd_port
  user=$(id -un)
  # Not plain nproc: it answers OMP_NUM_THREADS when that is set (ctest sets it to 1).
  cpus=${SLURM_TEST_CPUS:-$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)}

  # --- munge: its own key, socket, pid, seed and log --------------------------------------
  local key="$dir/munge/munge.key" socket="$dir/munge/munge.socket.2"  # socket: slurm.conf's AuthInfo
  if [ ! -s "$key" ]; then
    if command -v mungekey >/dev/null; then
      mungekey --create --keyfile="$key" 2>/dev/null || dd if=/dev/urandom of="$key" bs=1024 count=1 status=none
    else
      dd if=/dev/urandom of="$key" bs=1024 count=1 status=none
    fi
  fi
  chmod 600 "$key"
  start_munged munged "$dir/munge"

  # --- slurm.conf -----------------------------------------------------------------------
  ctld_port=$(free_port)
  slurmd_port=$(free_port)
  describe_nodes "$cpus"
  cat > "$dir/etc/slurm.conf" <<EOF
# Generated by tests/slurm/cluster.sh: a test cluster of ${#node_names[@]} node(s) under $dir.
ClusterName=mpiberttest
SlurmctldHost=$controller
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$socket,cred_expire=${SLURM_TEST_CRED_EXPIRE:-5}
StateSaveLocation=$dir/state
# %n: the node's name, so that several slurmd share the directory.
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
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
$(printf '%s\n' "${node_lines[@]}")
PartitionName=debug Nodes=$(IFS=,; echo "${node_names[*]}") Default=YES MaxTime=INFINITE State=UP
EOF
  mkdir -p "$dir/pmix"
  echo "PMIxCliTmpDirBase=$dir/pmix" > "$dir/etc/mpi.conf"
  export SLURM_CONF="$dir/etc/slurm.conf"
  write_env

  # --- slurmctld and slurmd in the foreground (-D), so that the pid we record is theirs ---
  # -i: ignore state left by an earlier run in this directory.
  start_daemon slurmctld "${node_hosts[0]}" slurmctld -D -i -f "$SLURM_CONF"
  if ! wait_for 30 "slurmctld to answer" client scontrol ping; then
    show_logs; stop_all; exit 1
  fi
  local i setup
  for i in "${!node_names[@]}"; do
    mkdir -p "$dir/spool/${node_names[$i]}"
    # What each node of a real cluster has to itself: a munged (one shared by several slurmd
    # takes the job credential that two nodes decode for a replay) and the PMIx client directory
    # (in /tmp by default, named by job and step alone). The shared files name one path for each;
    # hosts after the first see their own directory there, bound in their mount namespace.
    setup=""
    if [ "$i" -gt 0 ]; then
      start_munged "munged-${node_names[$i]}" "$dir/munge-${node_names[$i]}"
      mkdir -p "$dir/pmix-${node_names[$i]}"
      setup="mount --bind $dir/munge-${node_names[$i]} $dir/munge && mount --bind $dir/pmix-${node_names[$i]} $dir/pmix && "
    fi
    # -N: the node name in slurm.conf, whatever this machine's host name is.
    HOST_SETUP=$setup start_daemon "slurmd${node_hosts[$i]:+-${node_names[$i]}}" "${node_hosts[$i]}" \
      slurmd -D -N "${node_names[$i]}" -f "$SLURM_CONF"
  done
  if ! wait_for 60 "every node to become idle" all_nodes_idle; then
    client sinfo -N -l >&2 || true
    show_logs; stop_all; exit 1
  fi
  log "up under $dir: slurmctld port $ctld_port (pid $(cat "$dir/run/slurmctld.started")), slurmd port $slurmd_port" \
      "on ${node_names[*]}, munged (pid $(cat "$dir/run/munged.started")), $cpus CPUs per node; source $dir/env.sh"
}

all_nodes_idle() { [ "$(client sinfo -h -N -o %T | sort -u)" = idle ]; }

# A munged with the cluster's key, its socket in SOCKET_DIR.
start_munged() {  # NAME SOCKET_DIR
  local name=$1 socket=$2/munge.socket.2
  mkdir -p "$2"
  chmod 755 "$2"  # munged wants the socket directory searchable by all
  # --force: munged refuses some ownership/permission layouts (e.g. a /tmp ancestor, root);
  # the key and socket directory are private to us anyway.
  nohup munged --foreground --force --key-file="$dir/munge/munge.key" --socket="$socket" \
    --pid-file="$dir/run/$name.pid" --seed-file="$2/munged.seed" \
    --log-file="$dir/log/$name.log" >> "$dir/log/$name.out" 2>&1 < /dev/null &
  echo $! > "$dir/run/$name.started"
  if ! wait_for 15 "$name's socket" sh -c "munge -n -S '$socket' | unmunge -S '$socket'"; then
    cat "$dir/log/$name.out" "$dir/log/$name.log" >&2 2>/dev/null || true
    stop_all
    exit 1
  fi
}

# node_names, node_hosts (the test host each node's slurmd runs in; "" = here), node_lines
# (slurm.conf), controller (SlurmctldHost) and client_prefix: one node "localhost", or one node
# per test host of $hosts_dir with slurmctld on h1.
describe_nodes() {  # CPUS
  node_names=() node_hosts=() node_lines=() client_prefix=""
  if [ -z "$hosts_dir" ]; then
    node_names=(localhost)
    node_hosts=("")
    node_lines=("NodeName=localhost NodeAddr=127.0.0.1 CPUs=$1 State=UNKNOWN")
    controller="localhost(127.0.0.1)"
    return
  fi
  [ -f "$hosts_dir/hosts.env" ] || { log "$hosts_dir: no test hosts there (tests/cluster/hosts.sh up)"; exit 1; }
  # shellcheck disable=SC1091
  source "$hosts_dir/hosts.env"
  local i address
  for i in $(seq 1 "$HOSTS_N"); do
    address=${HOSTS_SUBNET%.0/24}.$(( i + 10 ))  # as hosts.sh numbers them
    node_names+=("h$i")
    node_hosts+=("h$i")
    node_lines+=("NodeName=h$i NodeAddr=$address CPUs=$1 State=UNKNOWN")
  done
  controller="h1(${HOSTS_SUBNET%.0/24}.11)"
  client_prefix="ip netns exec $HOSTS_PREFIX-h1"
}

# A daemon in the foreground under nohup, its pid recorded as DIR/run/NAME.started: here, or in
# test host HOST with that host name (hosts.sh exec ends in exec's, so the pid is the daemon's),
# after the shell commands in HOST_SETUP (inside the host's own mount namespace).
start_daemon() {  # NAME HOST|"" COMMAND...
  local name=$1 host=$2
  shift 2
  if [ -z "$host" ]; then
    nohup "$@" >> "$dir/log/$name.out" 2>&1 < /dev/null &
  else
    nohup bash "$hosts_sh" exec "$hosts_dir" "$host" "${HOST_SETUP:-}exec $*" >> "$dir/log/$name.out" 2>&1 < /dev/null &
  fi
  echo $! > "$dir/run/$name.started"
}

write_env() {
  cat > "$dir/env.sh" <<EOF
# Source this to talk to the test cluster under $dir.
export SLURM_CONF="$dir/etc/slurm.conf"
SLURM_CLIENT="$client_prefix"
EOF
  [ -z "$client_prefix" ] || cat >> "$dir/env.sh" <<EOF
# slurmctld is reachable only inside the test hosts' network: client commands run in h1's.
sbatch() { $client_prefix sbatch "\$@"; }
squeue() { $client_prefix squeue "\$@"; }
scontrol() { $client_prefix scontrol "\$@"; }
scancel() { $client_prefix scancel "\$@"; }
sinfo() { $client_prefix sinfo "\$@"; }
EOF
}

case "$action" in
  start) start ;;
  stop) stop_all; log "stopped the daemons under $dir" ;;
  status)
    for d in $(daemon_names munged) slurmctld $(daemon_names slurmd); do
      pid=$(started_pid "$d")
      echo "$d: ${pid:-not running}"
    done
    ;;
  *) usage ;;
esac
