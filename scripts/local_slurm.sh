#!/usr/bin/env bash
# A SLURM cluster on this one machine, for rlsweep's tests and CI (Debian/Ubuntu, root): one node on loopback, or
# with --nodes N, N nodes that are hosts of their own (network namespaces: addresses, hostnames, sockets).
#
#   scripts/local_slurm.sh start    install the packages if missing, write the config, start the daemons,
#                                   wait for the node, run a smoke job (idempotent: a healthy cluster is left alone)
#   scripts/local_slurm.sh stop     stop the daemons it started (by PID file, after checking the process name)
#   scripts/local_slurm.sh status   sinfo + the daemons' PIDs
#
#   scripts/local_slurm.sh start --nodes 2        2 nodes, rlsw1 and rlsw2 (10.77.0.2, .3), each slurmd in its own
#                                                 network and UTS namespace; slurmctld (and slurmdbd) in a third,
#                                                 rlswctl (10.77.0.1), all on a bridge inside that namespace: nothing
#                                                 is added to this machine's own network
#   scripts/local_slurm.sh run --nodes 2 -- CMD   run CMD where that cluster's clients work (its controller's
#                                                 namespace, SLURM_CONF set): sbatch, squeue, snakemake --profile ...
#   scripts/local_slurm.sh stop|status --nodes 2
#
# Settings (environment):
#   RLSWEEP_SLURM_DIR=/tmp/rlsweep-slurm   state, spool, logs, PID files, fake GPU devices (--nodes N: -Nn added;
#                                          its slurm.conf, gres.conf, hosts and slurmdbd.conf are in its etc/)
#   RLSWEEP_SLURM_ACCOUNTING=slurmdbd      slurmdbd + MariaDB (unix socket only) so `sacct` works; `none` skips both
#   RLSWEEP_SLURM_CPUS=<n>                 CPUs the node advertises (default nproc; more = oversubscribe)
#   RLSWEEP_SLURM_GPUS=2                   fake GPUs per node (char devices aliasing /dev/null): --gres=gpu:N schedules
#   RLSWEEP_SLURM_MAX_ARRAY_SIZE=1001      MaxArraySize (tests lower it to see arrays split)
#   RLSWEEP_SLURM_FIX_HOSTS=0               1: map `hostname` to 127.0.1.1 in /etc/hosts if it resolves elsewhere (CI)
#
# One node: everything listens on 127.0.0.1 only (CommunicationParameters=NoInAddrAny), so `hostname` must resolve to
# 127.x. --nodes N: each daemon listens inside its own namespace only (10.77.0.0/24 exists nowhere else).
set -euo pipefail

DIR=${RLSWEEP_SLURM_DIR:-/tmp/rlsweep-slurm}
ACCOUNTING=${RLSWEEP_SLURM_ACCOUNTING:-slurmdbd}
GPUS=${RLSWEEP_SLURM_GPUS:-2}
MAX_ARRAY_SIZE=${RLSWEEP_SLURM_MAX_ARRAY_SIZE:-1001}
CLUSTER=rlsweep
NODE=$(hostname -s)

say() { echo "[local_slurm] $*"; }
die() { echo "[local_slurm] error: $*" >&2; exit 1; }
# is the process in PID file $1 alive and called $2?
running() { [ -s "$1" ] && [ -r "/proc/$(cat "$1")/comm" ] && [ "$(cat "/proc/$(cat "$1")/comm")" = "$2" ]; }
retry() { local n=$1; shift; for _ in $(seq "$n"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done; return 1; }
stop_daemon() {  # pidfile name
  running "$1" "$2" || { rm -f "$1"; return 0; }
  local pid; pid=$(cat "$1")
  say "stopping $2 (pid $pid)"
  kill "$pid"
  retry 100 bash -c "! kill -0 $pid" || kill -9 "$pid"
  rm -f "$1"
}

install_packages() {
  local want="munge slurm-client slurmctld slurmd" missing=""
  [ "$ACCOUNTING" = slurmdbd ] && want="$want slurmdbd mariadb-server"
  [ "${NODES:-1}" -gt 1 ] && want="$want iproute2"  # ip netns: each node's network namespace
  for p in $want; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"; done
  [ -z "$missing" ] && return 0
  say "installing:$missing"
  local policy=/usr/sbin/policy-rc.d added=0
  if [ ! -e $policy ]; then  # keep the packages' maintainer scripts from starting daemons themselves
    printf '#!/bin/sh\nexit 101\n' > $policy && chmod +x $policy && added=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
  [ $added = 1 ] && rm -f $policy
  return 0
}

scheduling_conf() {  # the slurm.conf lines every cluster it makes shares: scheduling, limits, accounting, GPUs
  cat <<CONF
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1000
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
MinJobAge=300
MaxArraySize=$MAX_ARRAY_SIZE
KillWait=5
ReturnToService=2
MpiDefault=none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/linux
CONF
  if [ "$ACCOUNTING" = slurmdbd ]; then
    printf '%s\n' AccountingStorageType=accounting_storage/slurmdbd AccountingStorageHost=localhost \
      AccountingStoragePort=6819 AccountingStorageTRES=gres/gpu
  else
    echo "AccountingStorageType=accounting_storage/none"
  fi
  [ "$GPUS" -gt 0 ] && echo "GresTypes=gpu"
  return 0
}

write_config() {  # sets CHANGED=1 when slurm.conf or gres.conf changed
  local mem cpus gres_node=""
  mem=$(( $(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p') * 9 / 10 ))
  cpus=${RLSWEEP_SLURM_CPUS:-$(nproc)}
  if [ "$GPUS" -gt 0 ]; then
    for i in $(seq 0 $((GPUS - 1))); do [ -c "$DIR/dev/gpu$i" ] || mknod "$DIR/dev/gpu$i" c 1 3; done
    gres_node=" Gres=gpu:$GPUS"
  fi
  local conf
  conf=$(cat <<EOF
# written by rlsweep scripts/local_slurm.sh
ClusterName=$CLUSTER
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# a requeued job restarts after cred_expire seconds (default 120)
AuthInfo=cred_expire=10
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
$(scheduling_conf)
$([ "$cpus" -gt "$(nproc)" ] && echo "SlurmdParameters=config_overrides")
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem$gres_node State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
)
  local gres="AutoDetect=off"
  [ "$GPUS" -gt 0 ] && gres="$gres"$'\n'"NodeName=$NODE Name=gpu File=$DIR/dev/gpu[0-$((GPUS - 1))]"
  mkdir -p /etc/slurm
  CHANGED=0
  [ "$(cat /etc/slurm/slurm.conf 2>/dev/null)" = "$conf" ] || { echo "$conf" > /etc/slurm/slurm.conf; CHANGED=1; }
  [ "$(cat /etc/slurm/gres.conf 2>/dev/null)" = "$gres" ] || { echo "$gres" > /etc/slurm/gres.conf; CHANGED=1; }
}

start_munge() {  # one munged for every cluster on the machine (a unix socket)
  [ -s /etc/munge/munge.key ] || { mungekey --create --keyfile=/etc/munge/munge.key
    chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key; }
  install -d -o munge -g munge -m 0755 /run/munge
  running /run/munge/munged.pid munged || { say "starting munged"; runuser -u munge -- /usr/sbin/munged; }
  retry 100 bash -c "munge -n | unmunge" || die "munged is not answering"
}

start_mariadb() {  # one MariaDB for every cluster's slurmdbd (a unix socket, no network)
  install -d -o mysql -g mysql /run/mysqld
  if ! mariadb -e 'select 1' >/dev/null 2>&1; then
    say "starting mariadbd (unix socket only)"
    setsid /usr/sbin/mariadbd --user=mysql --skip-networking --skip-log-bin --innodb-buffer-pool-size=64M \
      --pid-file=/run/mysqld/mysqld.pid >"$DIR/log/mariadb.log" 2>&1 </dev/null &
    retry 300 mariadb -e 'select 1' || die "mariadb did not start (see $DIR/log/mariadb.log)"
  fi
}

start_accounting() {
  start_mariadb
  mariadb -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
    CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'rlsweep_local';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"
  local dbd
  dbd=$(printf '%s\n' "AuthType=auth/munge" "DbdHost=localhost" "DbdPort=6819" "CommunicationParameters=NoInAddrAny" \
    "SlurmUser=root" "LogFile=$DIR/log/slurmdbd.log" "PidFile=$DIR/run/slurmdbd.pid" \
    "StorageType=accounting_storage/mysql" "StorageHost=localhost" "StorageUser=slurm" \
    "StoragePass=rlsweep_local" "StorageLoc=slurm_acct_db")
  if [ "$(cat /etc/slurm/slurmdbd.conf 2>/dev/null)" != "$dbd" ]; then
    echo "$dbd" > /etc/slurm/slurmdbd.conf && chmod 600 /etc/slurm/slurmdbd.conf
    stop_daemon "$DIR/run/slurmdbd.pid" slurmdbd
  fi
  running "$DIR/run/slurmdbd.pid" slurmdbd || { say "starting slurmdbd"; slurmdbd; }
  retry 200 sacctmgr -n list cluster || die "slurmdbd not answering (see $DIR/log/slurmdbd.log)"
  sacctmgr -n -P list cluster format=cluster | grep -qx $CLUSTER || sacctmgr -i add cluster $CLUSTER >/dev/null
  sacctmgr -n -P list account format=account | grep -qx default ||
    sacctmgr -i add account default Cluster=$CLUSTER >/dev/null
  sacctmgr -n -P list user format=user,defaultaccount | grep -q '^root|default$' ||
    sacctmgr -i add user root Account=default DefaultAccount=default >/dev/null
}

node_state() { sinfo -h -n "$NODE" -o %t 2>/dev/null; }

start() {
  [ "$(id -u)" = 0 ] || die "needs root (it installs packages and runs the daemons)"
  case $ACCOUNTING in slurmdbd|none) ;; *) die "RLSWEEP_SLURM_ACCOUNTING must be slurmdbd or none";; esac
  local t0=$SECONDS
  install_packages
  local ip; ip=$(getent ahostsv4 "$NODE" | awk 'NR == 1 {print $1}')
  case "$ip" in
    127.*) ;;
    *) if [ "${RLSWEEP_SLURM_FIX_HOSTS:-0}" = 1 ]; then  # throwaway machines (CI) only: never edit a user's hosts
         say "hostname $NODE resolves to '${ip:-nothing}': adding '127.0.1.1 $NODE' to /etc/hosts"
         echo "127.0.1.1 $NODE" >> /etc/hosts
       else
         die "hostname $NODE resolves to '${ip:-nothing}', not 127.x: add '127.0.1.1 $NODE' to /etc/hosts (or set RLSWEEP_SLURM_FIX_HOSTS=1 on a throwaway machine)"
       fi;;
  esac
  mkdir -p "$DIR"/{state,spool,log,run,dev}

  start_munge

  write_config
  [ "$ACCOUNTING" = slurmdbd ] && start_accounting
  if [ "$CHANGED" = 1 ]; then
    stop_daemon "$DIR/run/slurmd.pid" slurmd
    stop_daemon "$DIR/run/slurmctld.pid" slurmctld
  fi
  running "$DIR/run/slurmctld.pid" slurmctld || { say "starting slurmctld"; slurmctld; }
  retry 200 bash -c "scontrol ping | grep -q UP" || die "slurmctld is not up (see $DIR/log/slurmctld.log)"
  running "$DIR/run/slurmd.pid" slurmd || { say "starting slurmd"; slurmd; }
  retry 200 bash -c "sinfo -h -n $NODE -o %t | grep -qE '^(idle|mix|alloc|drain|inval|down)'" ||
    die "node $NODE never registered (see $DIR/log/slurmd.log)"
  node_state | grep -qE 'drain|down' && scontrol update nodename="$NODE" state=resume || true
  retry 100 bash -c "sinfo -h -n $NODE -o %t | grep -qE '^(idle|mix|alloc)$'" ||
    die "node $NODE is '$(node_state)': $(scontrol show node "$NODE" | grep -o 'Reason=.*')"

  local out job; out=$(mktemp)
  job=$(sbatch --parsable -o "$out" --wrap 'echo ok') || die "sbatch failed"
  retry 300 bash -c "scontrol -o show job $job | grep -q JobState=COMPLETED" || die "smoke job $job did not complete"
  retry 50 grep -qx ok "$out" || die "smoke job $job wrote no output"
  rm -f "$out"
  if command -v ss >/dev/null; then
    ss -ltn | awk '$4 ~ /:68(17|18|19)$/ && $4 !~ /^127\./ {bad = 1} END {exit bad}' ||
      die "a SLURM daemon listens off loopback"
  fi
  say "up in $((SECONDS - t0)) s: $(sinfo -h -o '%P %a %D %t %N %G') (accounting: $ACCOUNTING)"
}

stop() {
  stop_daemon "$DIR/run/slurmd.pid" slurmd
  stop_daemon "$DIR/run/slurmctld.pid" slurmctld
  stop_daemon "$DIR/run/slurmdbd.pid" slurmdbd
  if ! running "$DIR-2n/run/slurmctld.pid" slurmctld; then  # (a --nodes 2 cluster still uses them)
    stop_daemon /run/mysqld/mysqld.pid mariadbd
    stop_daemon /run/munge/munged.pid munged
  fi
}

status() {
  sinfo 2>/dev/null || say "slurmctld is not answering"
  for d in slurmctld slurmd slurmdbd; do
    running "$DIR/run/$d.pid" $d && say "$d: pid $(cat "$DIR/run/$d.pid")" || say "$d: not running"
  done
}

# ------------------------------------------------------------------------------------------ --nodes N (N >= 2)
# Each node is a host of its own: a network namespace (its address on a bridge, reachable from the others), a UTS
# namespace (its hostname, which srun and the job's processes see) and a mount namespace that puts the cluster's
# hosts file over /etc/hosts. nsenter (not `ip netns exec`) so /sys and its cgroup mounts stay the machine's: slurmd
# refuses to start without them.
CTL_NS=rlsw-ctl CTL_HOST=rlswctl CTL_IP=10.77.0.1
node_ns() { echo "rlsw-n$1"; }
node_name() { echo "rlsw$1"; }
node_ip() { echo "10.77.0.$(( $1 + 1 ))"; }

inns() {  # NS HOSTNAME CMD...: run CMD as a process of that host
  local ns=$1 host=$2; shift 2
  nsenter --net="/run/netns/$ns" unshare --mount --uts sh -c \
    "mount --bind '$DIR/etc/hosts' /etc/hosts && hostname '$host' && exec \"\$@\"" sh "$@"
}
ctl() { inns "$CTL_NS" "$CTL_HOST" "$@"; }

net_up() {
  ip netns list | grep -qw "$CTL_NS" || {
    ip netns add "$CTL_NS"
    ip -n "$CTL_NS" link set lo up
    ip -n "$CTL_NS" link add br0 type bridge
    ip -n "$CTL_NS" addr add "$CTL_IP/24" dev br0
    ip -n "$CTL_NS" link set br0 up
  }
  local i ns
  for i in $(seq "$NODES"); do
    ns=$(node_ns "$i")
    ip netns list | grep -qw "$ns" && continue
    ip netns add "$ns"
    ip link add "rlsw-v$i" type veth peer name eth0 netns "$ns"
    ip link set "rlsw-v$i" netns "$CTL_NS"
    ip -n "$CTL_NS" link set "rlsw-v$i" master br0
    ip -n "$CTL_NS" link set "rlsw-v$i" up
    ip -n "$ns" addr add "$(node_ip "$i")/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
  done
}

net_down() {
  local i
  for i in $(seq "$NODES"); do ip netns del "$(node_ns "$i")" 2>/dev/null || true; done
  ip netns del "$CTL_NS" 2>/dev/null || true
}

write_config_nodes() {  # sets CHANGED=1 when a config file changed
  local mem cpus conf gres hosts nodes="" i g name file var
  mem=$(( $(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p') * 9 / 10 / NODES ))
  cpus=${RLSWEEP_SLURM_CPUS:-$(nproc)}
  gres="AutoDetect=off"
  hosts=$(printf '127.0.0.1 localhost\n%s %s' "$CTL_IP" "$CTL_HOST")
  for i in $(seq "$NODES"); do
    name=$(node_name "$i")
    nodes="$nodes"$'\n'"NodeName=$name NodeAddr=$(node_ip "$i") CPUs=$cpus RealMemory=$mem"
    [ "$GPUS" -gt 0 ] && nodes="$nodes Gres=gpu:$GPUS"
    nodes="$nodes State=UNKNOWN"
    hosts="$hosts"$'\n'"$(node_ip "$i") $name"
    if [ "$GPUS" -gt 0 ]; then
      for g in $(seq 0 $((GPUS - 1))); do [ -c "$DIR/dev/$name-gpu$g" ] || mknod "$DIR/dev/$name-gpu$g" c 1 3; done
      gres="$gres"$'\n'"NodeName=$name Name=gpu File=$DIR/dev/$name-gpu[0-$((GPUS - 1))]"
    fi
  done
  # memory limits: the cgroup v1 memory controller where the machine has it (a job above its --mem then ends
  # OUT_OF_MEMORY, as on a real cluster); slurmd refuses to autodetect a hybrid v1 + v2 machine, hence cgroup/v1
  local task="task/none" cgroup=""
  if [ -d /sys/fs/cgroup/memory ]; then
    task="task/cgroup" cgroup=$'CgroupPlugin=cgroup/v1\nConstrainRAMSpace=yes\nCgroupMountpoint=/sys/fs/cgroup'
  fi
  conf=$(cat <<CONF
# written by rlsweep scripts/local_slurm.sh --nodes $NODES
ClusterName=$CLUSTER
SlurmctldHost=$CTL_HOST($CTL_IP)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=cred_expire=10
CommunicationParameters=NoCtldInAddrAny
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=$task
# a node whose slurmd stops answering is DOWN (its jobs NODE_FAIL) after 10 s, not 300: tests kill nodes
SlurmdTimeout=10
$(scheduling_conf)
SlurmdParameters=config_overrides
$nodes
PartitionName=debug Nodes=rlsw[1-$NODES] Default=YES MaxTime=INFINITE State=UP
CONF
)
  CHANGED=0
  for file in slurm.conf:conf gres.conf:gres hosts:hosts cgroup.conf:cgroup; do
    var=${file#*:} file=${file%%:*}
    [ "$(cat "$DIR/etc/$file" 2>/dev/null)" = "${!var}" ] || { echo "${!var}" > "$DIR/etc/$file"; CHANGED=1; }
  done
}

start_accounting_nodes() {  # slurmdbd in the controller's namespace, its own database on the shared MariaDB
  start_mariadb
  local db="slurm_acct_db_${NODES}n" dbd
  mariadb -e "CREATE DATABASE IF NOT EXISTS $db; CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY
    'rlsweep_local'; GRANT ALL ON $db.* TO 'slurm'@'localhost';"
  dbd=$(printf '%s\n' "AuthType=auth/munge" "DbdHost=localhost" "DbdPort=6819" "SlurmUser=root" \
    "LogFile=$DIR/log/slurmdbd.log" "PidFile=$DIR/run/slurmdbd.pid" "StorageType=accounting_storage/mysql" \
    "StorageHost=localhost" "StorageUser=slurm" "StoragePass=rlsweep_local" "StorageLoc=$db")
  if [ "$(cat "$DIR/etc/slurmdbd.conf" 2>/dev/null)" != "$dbd" ]; then
    echo "$dbd" > "$DIR/etc/slurmdbd.conf" && chmod 600 "$DIR/etc/slurmdbd.conf"
    stop_daemon "$DIR/run/slurmdbd.pid" slurmdbd
  fi
  running "$DIR/run/slurmdbd.pid" slurmdbd || { say "starting slurmdbd"; ctl slurmdbd; }
  retry 200 ctl sacctmgr -n list cluster || die "slurmdbd not answering (see $DIR/log/slurmdbd.log)"
  ctl sacctmgr -n -P list cluster format=cluster | grep -qx "$CLUSTER" || ctl sacctmgr -i add cluster "$CLUSTER" >/dev/null
  ctl sacctmgr -n -P list account format=account | grep -qx default ||
    ctl sacctmgr -i add account default Cluster="$CLUSTER" >/dev/null
  ctl sacctmgr -n -P list user format=user,defaultaccount | grep -q '^root|default$' ||
    ctl sacctmgr -i add user root Account=default DefaultAccount=default >/dev/null
}

nodes_up() { [ "$(ctl sinfo -h -N -t idle,mix,alloc -o %N 2>/dev/null | wc -l)" = "$NODES" ]; }

start_nodes() {
  [ "$(id -u)" = 0 ] || die "needs root (it installs packages, makes namespaces and runs the daemons)"
  local t0=$SECONDS i name out job
  install_packages
  command -v nsenter >/dev/null && command -v ip >/dev/null || die "needs nsenter and ip (util-linux, iproute2)"
  mkdir -p "$DIR"/{etc,state,spool,log,run,dev}
  start_munge
  net_up
  write_config_nodes
  [ "$ACCOUNTING" = slurmdbd ] && start_accounting_nodes
  if [ "$CHANGED" = 1 ]; then
    for i in $(seq "$NODES"); do stop_daemon "$DIR/run/slurmd-$(node_name "$i").pid" slurmd; done
    stop_daemon "$DIR/run/slurmctld.pid" slurmctld
  fi
  running "$DIR/run/slurmctld.pid" slurmctld || { say "starting slurmctld"; ctl slurmctld; }
  retry 200 ctl scontrol ping || die "slurmctld is not up (see $DIR/log/slurmctld.log)"
  for i in $(seq "$NODES"); do
    name=$(node_name "$i")
    running "$DIR/run/slurmd-$name.pid" slurmd || { say "starting slurmd on $name"; inns "$(node_ns "$i")" "$name" slurmd -N "$name"; }
  done
  retry 300 nodes_up || { ctl scontrol update nodename="rlsw[1-$NODES]" state=resume 2>/dev/null || true; }
  retry 100 nodes_up ||
    die "not every node is up: $(ctl sinfo -h -N -o '%N %t %E' | tr '\n' ';') (see $DIR/log/slurmd-*.log)"
  out="$DIR/smoke.out"; rm -f "$out"
  job=$(cd "$DIR" && ctl sbatch --parsable -N "$NODES" -o "$out" --wrap 'srun hostname') || die "sbatch failed"
  retry 300 bash -c "[ \$(sort -u '$out' 2>/dev/null | wc -l) = $NODES ]" ||
    die "smoke job $job did not run on all $NODES nodes: $(tr '\n' ' ' < "$out" 2>/dev/null)"
  say "up in $((SECONDS - t0)) s: $(ctl sinfo -h -N -o '%N %t %G' | tr '\n' ' ')(accounting: $ACCOUNTING); smoke job $job ran on $(sort -u "$out" | tr '\n' ' ')"
  say "clients: $0 run --nodes $NODES -- sbatch|squeue|snakemake ..."
}

stop_nodes() {
  local i
  for i in $(seq "$NODES"); do stop_daemon "$DIR/run/slurmd-$(node_name "$i").pid" slurmd; done
  stop_daemon "$DIR/run/slurmctld.pid" slurmctld
  stop_daemon "$DIR/run/slurmdbd.pid" slurmdbd
  net_down
  if ! running "${DIR%-"${NODES}"n}/run/slurmctld.pid" slurmctld; then  # (the one-node cluster still uses them)
    stop_daemon /run/mysqld/mysqld.pid mariadbd
    stop_daemon /run/munge/munged.pid munged
  fi
}

status_nodes() {
  local i f
  { ip netns list | grep -qw "$CTL_NS" && ctl sinfo -N 2>/dev/null; } || say "slurmctld is not answering"
  running "$DIR/run/slurmctld.pid" slurmctld && say "slurmctld: pid $(cat "$DIR/run/slurmctld.pid")" || say "slurmctld: not running"
  for i in $(seq "$NODES"); do
    f="$DIR/run/slurmd-$(node_name "$i").pid"
    running "$f" slurmd && say "slurmd on $(node_name "$i"): pid $(cat "$f")" || say "slurmd on $(node_name "$i"): not running"
  done
}

# ---------------------------------------------------------------------------------------------------- main
usage="usage: $0 start|stop|status [--nodes N] | run --nodes N -- CMD..."
CMD=${1:-}; [ $# -gt 0 ] && shift
NODES=1
while [ $# -gt 0 ]; do
  case $1 in
    --nodes) NODES=${2:-}; shift; [ $# -gt 0 ] && shift ;;
    --) shift; break ;;
    *) die "unknown option '$1' ($usage)" ;;
  esac
done
case $NODES in ''|*[!0-9]*|0) die "--nodes must be a whole number >= 1, got '$NODES'" ;; esac
if [ "$NODES" -gt 1 ]; then
  DIR=${RLSWEEP_SLURM_DIR:-/tmp/rlsweep-slurm}-${NODES}n
  CLUSTER=rlsweep${NODES}n
  export SLURM_CONF=$DIR/etc/slurm.conf
  case $CMD in
    start) start_nodes ;;
    stop) stop_nodes ;;
    status) status_nodes ;;
    run) [ $# -gt 0 ] || die "run: which command? ($usage)"; ctl "$@" ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
  exit
fi
case $CMD in
  start) start ;;
  stop) stop ;;
  status) status ;;
  run) [ $# -gt 0 ] || die "run: which command? ($usage)"; exec "$@" ;;
  *) echo "$usage" >&2; exit 2 ;;
esac
