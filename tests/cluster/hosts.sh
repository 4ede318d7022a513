#!/usr/bin/env bash
# Throwaway test hosts on this machine: network namespaces joined by veth pairs to a bridge that
# lives in a namespace of its own, on a private subnet that only they have. Nothing outside the
# namespaces is addressed or changed, except /etc/netns/NS/hosts (bound over
# /etc/hosts inside NS), which `down` removes with the namespaces.
#   tests/cluster/hosts.sh up DIR N [K]   # hosts h1..hN; writes DIR/hosts.env and DIR/agent
#   tests/cluster/hosts.sh exec DIR HOST COMMAND...   # COMMAND inside HOST, hostname HOST
#   tests/cluster/hosts.sh mpirun DIR N COMMAND...    # mpirun in h1, one rank per host h1..hN
#                                                     # (HOSTS_RANKS_PER_HOST=P: P ranks each, in host order)
#   tests/cluster/hosts.sh link DIR HOST up|down      # the host's link to the first subnet
#   tests/cluster/hosts.sh shape DIR RATE DELAY       # every host's link (e.g. 100mbit 1ms; netem or tbf)
#   tests/cluster/hosts.sh unshape DIR
#   tests/cluster/hosts.sh down DIR       # removes exactly what `up` made (by the names in DIR)
#
# With K (2..N), hosts h1..hK are multi-homed: they share a second subnet (eth1, a bridge of its
# own) and name each other by their addresses there, so that their traffic to each other takes it,
# while the other hosts, which have no route to it, reach them over the first; Open MPI keeps to
# the first subnet, which every host has.
# DIR/agent is a launch agent in ssh's place (Open MPI's plm_rsh_agent): `agent HOST COMMAND`
# runs COMMAND inside HOST. DIR/hosts.env gives HOSTS_SUBNET, HOSTS_SUBNET2 (empty without K),
# HOSTS_PREFIX, HOSTS_N and HOSTS_K (0 without K). `mpirun`
# starts the daemons through it and keeps Open MPI on the first subnet over TCP (btl tcp,self:
# no shared memory between hosts); HOSTS_MPIRUN_ARGS adds mpirun options, and OMP_NUM_THREADS
# is passed to the ranks.
# Each host gives up on an unanswered TCP connection after ~13 s (net.ipv4.tcp_retries2=5, a
# per-namespace setting), so that a launcher behind a cut link ends in the time of a test.
# Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN), iproute2 and util-linux's unshare.
set -euo pipefail

usage() { sed -n '6,13s/^# \{0,1\}//p' "$0" >&2; exit 2; }
[ $# -ge 2 ] || usage
action=$1
dir=$(mkdir -p "$2" && cd "$2" && pwd)
shift 2
log() { echo "hosts.sh: $*" >&2; }

load() {
  [ -f "$dir/hosts.env" ] || { log "$dir/hosts.env: no hosts made here (run: $0 up $dir N)"; exit 1; }
  # shellcheck disable=SC1091
  source "$dir/hosts.env"
  HOSTS_K=${HOSTS_K:-0} HOSTS_SUBNET2=${HOSTS_SUBNET2:-}  # written before hosts had a second subnet
}
ns() { echo "${HOSTS_PREFIX}-$1"; }  # HOST -> its namespace
host_ip() { echo "${HOSTS_SUBNET%.0/24}.$(( ${1#h} + 10 ))"; }
host_ip2() { echo "${HOSTS_SUBNET2%.0/24}.$(( ${1#h} + 10 ))"; }  # on the second subnet
# The address HOST's name has in FROM's /etc/hosts: the second subnet's between two multi-homed hosts.
named_ip() {  # FROM HOST
  if [ "${1#h}" -le "$HOSTS_K" ] && [ "${2#h}" -le "$HOSTS_K" ]; then host_ip2 "$2"; else host_ip "$2"; fi
}

up() {
  local n=$1 k=${2:-0} i j prefix octet
  [ ! -f "$dir/hosts.env" ] || { log "$dir: hosts already up; run down first"; exit 1; }
  [ "$k" -eq 0 ] || { [ "$k" -ge 2 ] && [ "$k" -le "$n" ]; } || { log "K=$k: expected 2..$n"; exit 2; }
  # A short prefix unique to this instance (interface names are at most 15 characters) and a
  # /24 in 10.231.0.0/16 (the second subnet's in 10.232.0.0/16) derived from it: several fixtures
  # can be up at once.
  prefix="mb$(printf '%05d' $(( $$ % 100000 )))"
  octet=$(( $$ % 250 + 1 ))
  cat > "$dir/hosts.env" <<EOF
HOSTS_PREFIX=$prefix
HOSTS_SUBNET=10.231.$octet.0/24
HOSTS_SUBNET2=$([ "$k" -eq 0 ] || echo "10.232.$octet.0/24")
HOSTS_N=$n
HOSTS_K=$k
EOF
  load
  ip netns add "$(ns sw)"
  ip -n "$(ns sw)" link add br0 type bridge
  ip -n "$(ns sw)" link set br0 up
  for i in $(seq 1 "$n"); do
    ip netns add "$(ns "h$i")"
    ip link add "${prefix}a$i" type veth peer name "${prefix}b$i"
    ip link set "${prefix}a$i" netns "$(ns "h$i")"
    ip link set "${prefix}b$i" netns "$(ns sw)"
    ip -n "$(ns "h$i")" link set "${prefix}a$i" name eth0
    ip -n "$(ns "h$i")" addr add "$(host_ip "h$i")/24" dev eth0
    ip -n "$(ns "h$i")" link set eth0 up
    ip -n "$(ns "h$i")" link set lo up
    # A dead peer is given up after ~13 s of retransmissions instead of Linux's ~15 min
    # (tcp_retries2=15): how long mpirun waits on a daemon behind a dead link.
    ip netns exec "$(ns "h$i")" sysctl -qw net.ipv4.tcp_retries2=5
    ip -n "$(ns sw)" link set "${prefix}b$i" master br0 up
  done
  if [ "$k" -gt 0 ]; then
    ip -n "$(ns sw)" link add br1 type bridge
    ip -n "$(ns sw)" link set br1 up
  fi
  for i in $(seq 1 "$k"); do
    ip link add "${prefix}c$i" type veth peer name "${prefix}d$i"
    ip link set "${prefix}c$i" netns "$(ns "h$i")"
    ip link set "${prefix}d$i" netns "$(ns sw)"
    ip -n "$(ns "h$i")" link set "${prefix}c$i" name eth1
    ip -n "$(ns "h$i")" addr add "$(host_ip2 "h$i")/24" dev eth1
    ip -n "$(ns "h$i")" link set eth1 up
    ip -n "$(ns sw)" link set "${prefix}d$i" master br1 up
  done
  for i in $(seq 1 "$n"); do
    mkdir -p "/etc/netns/$(ns "h$i")"
    { echo "127.0.0.1 localhost"
      for j in $(seq 1 "$n"); do echo "$(named_ip "h$i" "h$j") h$j"; done
    } > "/etc/netns/$(ns "h$i")/hosts"
  done
  cat > "$dir/agent" <<EOF
#!/usr/bin/env bash
# ssh in place: $dir/agent HOST COMMAND... runs COMMAND inside test host HOST.
exec bash "$(cd "$(dirname "$0")" && pwd)/hosts.sh" exec "$dir" "\$@"
EOF
  chmod +x "$dir/agent"
  for i in $(seq 2 "$n"); do  # h1 reaches every other host: a closed port answers "refused"
    reachable h1 "$(host_ip "h$i")" || { log "h1 cannot reach h$i"; exit 1; }
    [ "$i" -gt "$k" ] || reachable h1 "$(host_ip2 "h$i")" || { log "h1 cannot reach h$i on $HOSTS_SUBNET2"; exit 1; }
  done
  log "hosts h1..h$n up on $HOSTS_SUBNET$([ "$k" -eq 0 ] || echo ", h1..h$k on $HOSTS_SUBNET2 too") (namespaces $prefix-*)"
}

reachable() {  # FROM IP: a TCP connection to IP's discard port is refused (not timed out)
  local out
  out=$(ip netns exec "$(ns "$1")" timeout 3 bash -c "exec 3<>/dev/tcp/$2/9" 2>&1) && return 0
  [[ $out == *refused* ]]
}

down() {
  [ -f "$dir/hosts.env" ] || return 0
  load
  local name
  for name in $(ip netns list | awk '{print $1}' | grep "^${HOSTS_PREFIX}-" || true); do
    ip netns pids "$name" 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
    ip netns del "$name"
    rm -rf "/etc/netns/$name"
  done
  rm -f "$dir/hosts.env" "$dir/agent"
}

run_in() {  # HOST COMMAND...: inside the host's namespace, with its own hostname
  local host=$1
  shift
  [ $# -gt 0 ] || usage
  # Launch agents get one string (ssh's convention); a direct call gets words. Both go to sh -c.
  # Not `ip netns exec`: it remounts /sys, which hides the cgroup tree that slurmd needs. Only the
  # network namespace is entered; a private mount namespace gives the host its /etc/hosts.
  exec nsenter --net="/run/netns/$(ns "$host")" unshare --uts --mount -- \
    sh -c "mount --bind /etc/netns/$(ns "$host")/hosts /etc/hosts && hostname $host && exec sh -c \"\$0\"" "$*"
}

# mpirun inside h1 for N ranks, one on each of h1..hN; it prints its map (--display-map).
run_mpi() {  # N COMMAND...
  local n=$1 hosts per=${HOSTS_RANKS_PER_HOST:-1}
  shift
  [ "$n" -le "$HOSTS_N" ] && [ $# -gt 0 ] || usage
  hosts=$(seq -s, -f "h%g:$per" 1 "$n")
  run_in h1 "mpirun -n $(( n * per )) --host $hosts --bind-to none --display-map --mca plm_rsh_agent $dir/agent" \
    "--mca btl tcp,self --mca btl_tcp_if_include $HOSTS_SUBNET --mca oob_tcp_if_include $HOSTS_SUBNET" \
    "-x OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} ${HOSTS_MPIRUN_ARGS:-} $*"
}

# RATE DELAY on each host's egress, so both directions see it. netem does both; where the kernel
# has no netem (this project's VMs: no sch_netem, no modules), a token bucket (tbf) limits the
# rate alone, with a burst of 1 ms at the rate (at least 16 KiB), and a delay other than 0 fails.
shape() {  # RATE DELAY
  local i bits
  case $1 in
    *kbit) bits=$(( ${1%kbit} * 1000 )) ;;
    *mbit) bits=$(( ${1%mbit} * 1000000 )) ;;
    *gbit) bits=$(( ${1%gbit} * 1000000000 )) ;;
    *) log "rate $1: expected NNNkbit, NNNmbit or NNNgbit"; exit 2 ;;
  esac
  for i in $(seq 1 "$HOSTS_N"); do
    if ! ip netns exec "$(ns "h$i")" tc qdisc replace dev eth0 root netem rate "$1" delay "$2" 2>/dev/null; then
      case $2 in 0|0ms|0us) ;; *) log "this kernel has no netem: a delay ($2) cannot be set"; exit 1 ;; esac
      ip netns exec "$(ns "h$i")" tc qdisc replace dev eth0 root tbf rate "$1" \
        burst $(( bits / 8000 > 16384 ? bits / 8000 : 16384 )) latency 100ms
    fi
  done
}

unshape() {
  local i
  for i in $(seq 1 "$HOSTS_N"); do
    ip netns exec "$(ns "h$i")" tc qdisc del dev eth0 root 2>/dev/null || true
  done
}

case $action in
  up) [ $# -eq 1 ] || [ $# -eq 2 ] || usage; up "$@" ;;
  down) down ;;
  exec) load; run_in "$@" ;;
  mpirun) load; run_mpi "$@" ;;
  link) load; [ $# -eq 2 ] || usage; ip -n "$(ns "$1")" link set eth0 "$2" ;;
  shape) load; [ $# -eq 2 ] || usage; shape "$1" "$2" ;;
  unshape) load; unshape ;;
  *) usage ;;
esac
