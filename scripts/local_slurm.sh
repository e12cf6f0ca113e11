#!/usr/bin/env bash
# A single-node SLURM cluster on loopback, for rlsweep's tests and CI (Debian/Ubuntu, root).
#
#   scripts/local_slurm.sh start    install the packages if missing, write the config, start the daemons,
#                                   wait for the node, run a smoke job (idempotent: a healthy cluster is left alone)
#   scripts/local_slurm.sh stop     stop the daemons it started (by PID file, after checking the process name)
#   scripts/local_slurm.sh status   sinfo + the daemons' PIDs
#
# Settings (environment):
#   RLSWEEP_SLURM_DIR=/tmp/rlsweep-slurm   state, spool, logs, PID files, fake GPU devices
#   RLSWEEP_SLURM_ACCOUNTING=slurmdbd      slurmdbd + MariaDB (unix socket only) so `sacct` works; `none` skips both
#   RLSWEEP_SLURM_CPUS=<n>                 CPUs the node advertises (default nproc; more = oversubscribe)
#   RLSWEEP_SLURM_GPUS=2                   fake GPUs (char devices aliasing /dev/null) so --gres=gpu:N schedules
#   RLSWEEP_SLURM_MAX_ARRAY_SIZE=1001      MaxArraySize (tests lower it to see arrays split)
#   RLSWEEP_SLURM_FIX_HOSTS=0               1: map `hostname` to 127.0.1.1 in /etc/hosts if it resolves elsewhere (CI)
#
# Everything listens on 127.0.0.1 only (CommunicationParameters=NoInAddrAny), so `hostname` must resolve to 127.x.
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

write_config() {  # sets CHANGED=1 when slurm.conf or gres.conf changed
  local mem cpus accounting gres_node="" gres_types=""
  mem=$(( $(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p') * 9 / 10 ))
  cpus=${RLSWEEP_SLURM_CPUS:-$(nproc)}
  if [ "$GPUS" -gt 0 ]; then
    for i in $(seq 0 $((GPUS - 1))); do [ -c "$DIR/dev/gpu$i" ] || mknod "$DIR/dev/gpu$i" c 1 3; done
    gres_node=" Gres=gpu:$GPUS"; gres_types="GresTypes=gpu"
  fi
  if [ "$ACCOUNTING" = slurmdbd ]; then
    accounting=$'AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=localhost\nAccountingStoragePort=6819\nAccountingStorageTRES=gres/gpu'
  else
    accounting="AccountingStorageType=accounting_storage/none"
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
$accounting
$gres_types
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

start_accounting() {
  install -d -o mysql -g mysql /run/mysqld
  if ! mariadb -e 'select 1' >/dev/null 2>&1; then
    say "starting mariadbd (unix socket only)"
    setsid /usr/sbin/mariadbd --user=mysql --skip-networking --skip-log-bin --innodb-buffer-pool-size=64M \
      --pid-file=/run/mysqld/mysqld.pid >"$DIR/log/mariadb.log" 2>&1 </dev/null &
    retry 300 mariadb -e 'select 1' || die "mariadb did not start (see $DIR/log/mariadb.log)"
  fi
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

  [ -s /etc/munge/munge.key ] || { mungekey --create --keyfile=/etc/munge/munge.key
    chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key; }
  install -d -o munge -g munge -m 0755 /run/munge
  running /run/munge/munged.pid munged || { say "starting munged"; runuser -u munge -- /usr/sbin/munged; }
  retry 100 bash -c "munge -n | unmunge" || die "munged is not answering"

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
  stop_daemon /run/mysqld/mysqld.pid mariadbd
  stop_daemon /run/munge/munged.pid munged
}

status() {
  sinfo 2>/dev/null || say "slurmctld is not answering"
  for d in slurmctld slurmd slurmdbd; do
    running "$DIR/run/$d.pid" $d && say "$d: pid $(cat "$DIR/run/$d.pid")" || say "$d: not running"
  done
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
