#!/bin/bash
# A one-node Slurm cluster on this machine, for the tests and for a workstation.
#
#   bash scripts/slurm.sh start    install (apt-get) and configure Slurm and munge if needed, start the daemons,
#                                  wait until the node is idle; returns at once when the cluster already answers
#   bash scripts/slurm.sh status   sinfo and squeue, or a line saying the cluster is down
#   bash scripts/slurm.sh stop     stop slurmd, slurmctld and munged
#
# Needs root, or sudo without a password. SLURM_CONF (Slurm's own variable) names the slurm.conf to write and use
# (default /etc/slurm/slurm.conf). A start that fails prints the daemons' log tails and exits non-zero.
set -euo pipefail
# the daemons and runuser live in the system folders, which a user's PATH (or a bare env) may lack
export PATH="$PATH:/usr/sbin:/sbin"

CONF=${SLURM_CONF:-/etc/slurm/slurm.conf}
export SLURM_CONF=$CONF
LOG_DIR=/var/log/slurm
STATE_DIR=/var/lib/slurm
WAIT_S=${SLURM_START_WAIT_S:-60}
NODE=$(hostname -s)

say() { echo "slurm.sh: $*" >&2; }
die() { say "$*"; exit 1; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo -n "$@"
  else die "'$*' needs root: run 'sudo bash scripts/slurm.sh ${ACTION:-start}' (sudo -n found no password-free sudo)"
  fi
}

answers() { timeout 10 sinfo -h -n "$NODE" -o '%t' 2>/dev/null; }   # the node's state, when slurmctld answers

node_idle() { case "$(answers)" in idle*|mix*|alloc*) return 0 ;; *) return 1 ;; esac; }

log_tails() {
  for f in "$LOG_DIR/slurmctld.log" "$LOG_DIR/slurmd.log" /var/log/munge/munged.log; do
    if [ -r "$f" ]; then echo "---- last lines of $f" >&2; tail -n 20 "$f" >&2; else echo "---- no $f" >&2; fi
  done
}

install() {
  local missing=()
  for cmd in slurmctld slurmd sbatch munged; do command -v "$cmd" >/dev/null || [ -x "/usr/sbin/$cmd" ] || missing+=("$cmd"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  command -v apt-get >/dev/null || die "missing ${missing[*]}, and no apt-get to install them: install Slurm and munge yourself"
  say "installing slurmctld slurmd slurm-client munge (missing: ${missing[*]})"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    slurmctld slurmd slurm-client munge >&2
}

write_config() {
  local cpus mem_mb dir
  cpus=$(nproc)
  mem_mb=$(free -m | awk '/^Mem:/ {print int($2 * 0.9)}')
  dir=$(dirname "$CONF")
  as_root mkdir -p "$dir" "$LOG_DIR" "$STATE_DIR/slurmctld" "$STATE_DIR/slurmd" /run/munge /var/log/munge
  if [ ! -s /etc/munge/munge.key ]; then
    say "writing a munge key"
    as_root mkdir -p /etc/munge
    as_root dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
  fi
  id munge >/dev/null 2>&1 && as_root chown -R munge:munge /etc/munge /run/munge /var/log/munge
  as_root chmod 700 /etc/munge && as_root chmod 400 /etc/munge/munge.key
  # one node: this host, all its cores and 90% of its memory; root runs the daemons
  as_root tee "$CONF" >/dev/null <<EOF
# written by scripts/slurm.sh: a one-node cluster on $NODE
ClusterName=local
SlurmctldHost=$NODE
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# a requeued job may start again cred_expire + 1 seconds later (Slurm's default: 120)
AuthInfo=cred_expire=10
StateSaveLocation=$STATE_DIR/slurmctld
SlurmdSpoolDir=$STATE_DIR/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
# try to start pending jobs every 5 s (default 60), e.g. a requeued job once it may start again
SchedulerParameters=sched_interval=5
ReturnToService=2
# a stopped job's processes get SIGTERM, then KillWait seconds to checkpoint before SIGKILL
KillWait=30
# finished jobs stay visible to scontrol for MinJobAge seconds (there is no accounting database)
MinJobAge=600
JobRequeue=1
MpiDefault=none
NodeName=$NODE CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
# FORCE:1 shares nothing: one job per core, since on a small machine more would only thrash
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:1
EOF
}

start_daemons() {
  if ! pgrep -x munged >/dev/null; then
    if id munge >/dev/null 2>&1; then as_root runuser -u munge -- /usr/sbin/munged
    else as_root /usr/sbin/munged --force
    fi
  fi
  pgrep -x slurmctld >/dev/null || as_root /usr/sbin/slurmctld
  pgrep -x slurmd >/dev/null || as_root /usr/sbin/slurmd
}

start() {
  if node_idle; then say "Slurm already answers: node $NODE is $(answers)"; return 0; fi
  install
  if [ ! -s "$CONF" ] || head -1 "$CONF" | grep -q '^# written by scripts/slurm.sh'; then write_config
  else say "keeping the slurm.conf already at $CONF"
  fi
  start_daemons
  local t0=$SECONDS state=
  while [ $((SECONDS - t0)) -lt "$WAIT_S" ]; do
    state=$(answers || true)
    case "$state" in
      idle*|mix*|alloc*) say "node $NODE is $state (${SECONDS}s)"; return 0 ;;
      down*|drain*|fail*) as_root scontrol update NodeName="$NODE" State=RESUME 2>/dev/null || true ;;
    esac
    sleep 1
  done
  say "Slurm did not come up within ${WAIT_S}s (node state: '${state:-no answer}')"
  log_tails
  exit 1
}

stop() {
  for d in slurmd slurmctld; do
    if pgrep -x "$d" >/dev/null; then as_root kill "$(pgrep -x "$d" | head -1)"; fi
  done
  if pgrep -x munged >/dev/null; then as_root kill "$(pgrep -x munged | head -1)"; fi
  for _ in $(seq 20); do pgrep -x slurmd >/dev/null || pgrep -x slurmctld >/dev/null || pgrep -x munged >/dev/null || break
    sleep 0.5; done
  say "stopped"
}

status() {
  if [ -n "$(answers)" ]; then sinfo; squeue; else say "Slurm does not answer on $NODE"; exit 1; fi
}

ACTION=${1:-}
case "$ACTION" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: bash scripts/slurm.sh start|stop|status" >&2; exit 2 ;;
esac
