#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for `make test-slurm` (tests/launch/test_slurm_real.py).
#
#   .ci/slurm-one-node.sh [start]   install slurm-wlm and munge with apt if missing, write
#                                   /etc/slurm/slurm.conf for this host (its CPUs and memory, partition
#                                   "debug"), start munged, slurmctld and slurmd, wait until the node is idle
#   .ci/slurm-one-node.sh stop      stop the three daemons (the packages and the config stay)
#   .ci/slurm-one-node.sh run CMD…  start, run CMD, then stop the daemons this call started; CMD's status
#
# Idempotent: a running cluster is left as it is. Needs root (Debian or Ubuntu: apt-get).
# Exit status: 0 ready (or stopped), 1 failed, 77 Slurm cannot be installed or run here (callers skip).
set -euo pipefail

CONF=/etc/slurm/slurm.conf
MARK="# written by bitextmine .ci/slurm-one-node.sh"
LOGS=/var/log/slurm
CANNOT=77  # "skipped", as in automake's test harness

say() { echo "slurm-one-node: $*" >&2; }
cannot() { say "cannot set up Slurm here: $*"; exit "$CANNOT"; }
fail() { say "$*"; exit 1; }

alive() {  # alive PIDFILE: the daemon that wrote it still runs
  [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

install_packages() {
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sinfo >/dev/null \
    && command -v munged >/dev/null && return
  command -v apt-get >/dev/null || cannot "slurm-wlm and munge are not installed, and there is no apt-get"
  say "installing slurm-wlm and munge (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  local log
  log=$(mktemp)
  if ! apt-get install -y -qq --no-install-recommends slurm-wlm munge >"$log" 2>&1; then
    apt-get update -qq >>"$log" 2>&1 || true
    if ! apt-get install -y -qq --no-install-recommends slurm-wlm munge >>"$log" 2>&1; then
      tail -n 5 "$log" >&2
      rm -f "$log"
      cannot "apt-get install slurm-wlm munge failed (see above)"
    fi
  fi
  rm -f "$log"
}

write_config() {  # the node line is what slurmd detects on this host (CPUs, sockets, cores, memory)
  local node host
  node=$(slurmd -C | sed -n 1p)
  host=${node#NodeName=}
  host=${host%% *}
  if [ -e "$CONF" ] && ! grep -qxF "$MARK" "$CONF"; then
    fail "$CONF exists and was not written by this script: not touching a real cluster's configuration"
  fi
  mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd "$LOGS"
  cat >"$CONF.new" <<EOF
$MARK
ClusterName=bitextmine-ci
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
$node State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
  if [ -e "$CONF" ] && cmp -s "$CONF" "$CONF.new"; then
    rm "$CONF.new"
  else
    stop_slurm  # daemons still running on an older config would not match it
    mv "$CONF.new" "$CONF"
  fi
  echo "$host"
}

start_munge() {
  if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    return
  fi
  [ -s /etc/munge/munge.key ] || { mungekey --create && chown munge:munge /etc/munge/munge.key; }
  mkdir -p /run/munge
  chown munge:munge /run/munge
  runuser -u munge -- /usr/sbin/munged || fail "munged did not start (see /var/log/munge/munged.log)"
}

start_slurm() {
  alive /run/slurmctld.pid || slurmctld || fail "slurmctld did not start (see $LOGS/slurmctld.log)"
  alive /run/slurmd.pid || slurmd || fail "slurmd did not start (see $LOGS/slurmd.log)"
}

wait_idle() {  # wait_idle HOST: until the node takes jobs (idle), resuming it once if it is down
  local state resumed=""
  for _ in $(seq 60); do
    state=$(sinfo --noheader --nodes "$1" --format %T 2>/dev/null || true)
    case "$state" in
      idle) say "node $1 is idle (partition debug)"; return ;;
      mixed | allocated) say "node $1 is $state (partition debug): jobs are running"; return ;;
      down* | drain*)
        [ -n "$resumed" ] || scontrol update NodeName="$1" State=RESUME 2>/dev/null || true
        resumed=1 ;;
    esac
    sleep 1
  done
  tail -n 5 "$LOGS/slurmctld.log" "$LOGS/slurmd.log" >&2 || true
  fail "node $1 is not idle after 60 s (sinfo says '${state:-nothing}'; logs above)"
}

stop_daemon() {  # stop_daemon PIDFILE: SIGTERM, then wait up to 15 s for it to exit
  local pid
  alive "$1" || return 0
  pid=$(cat "$1")
  kill "$pid"
  for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.5; done
  say "pid $pid ($1) still runs 15 s after SIGTERM"
}

stop_slurm() {
  stop_daemon /run/slurmd.pid
  stop_daemon /run/slurmctld.pid
}

start() {
  local host
  [ "$(id -u)" = 0 ] || cannot "this needs root (apt-get install; slurmctld and slurmd run as root)"
  install_packages
  host=$(write_config)
  start_munge
  start_slurm
  wait_idle "$host"
}

usage() {
  echo "usage: $0 [start | stop | run COMMAND [ARG...]]" >&2
  exit 2
}

case "${1:-start}" in
  start) start ;;
  stop)
    stop_slurm
    stop_daemon /run/munge/munged.pid
    say "stopped"
    ;;
  run)
    shift
    [ $# -gt 0 ] || usage
    slurm_up="" munge_up=""
    alive /run/slurmctld.pid && alive /run/slurmd.pid && slurm_up=1
    alive /run/munge/munged.pid && munge_up=1
    start
    status=0
    "$@" || status=$?
    [ -n "$slurm_up" ] || stop_slurm
    [ -n "$munge_up" ] || stop_daemon /run/munge/munged.pid
    exit "$status"
    ;;
  *) usage ;;
esac
