# shellcheck shell=bash
# Shared settings and helpers of start.sh / stop.sh (sourced, not run).
#
# Knobs (environment, default):
#   SLURMLAB_DIR=/var/tmp/sporch-slurmlab   all state: etc/ run/ log/ spool/ state/ munge/ mysql/ dev/ sbin/
#   SLURMLAB_NODES=4 SLURMLAB_CPUS=2 SLURMLAB_GPUS=2 SLURMLAB_MEM_MB=4000   per-node resources
#   SLURMLAB_PARTITION=lab  SLURMLAB_MAX_TIME=02:00:00  SLURMLAB_DEFAULT_TIME=01:00:00
#   SLURMLAB_ACCOUNTING=1   private mariadbd + slurmdbd (sacct; submitit needs it to see cancelled jobs)
#   SLURMLAB_INSTALL=1      apt-get install missing Debian packages
#   SLURMLAB_UTS=1          each slurmd in its own UTS namespace: `hostname` in a task says nodeI
#   SLURMLAB_ETC_HOSTS=1    "127.0.0.1 node1 .. nodeN  # sporch-slurmlab" in /etc/hosts
#   SLURMLAB_LINK_ETC=1     /etc/slurm/slurm.conf -> our conf (only if absent or already ours)
#   SLURMLAB_FIRST_JOB_ID   first job id of a fresh start (default: from the clock)
#   ports: SLURMLAB_CTLD_PORT=16817 SLURMLAB_NODE_PORT0=17000 (nodeI: +I) SLURMLAB_DBD_PORT=16819 SLURMLAB_DB_PORT=16806

LAB_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
D=${SLURMLAB_DIR:-/var/tmp/sporch-slurmlab}
NNODES=${SLURMLAB_NODES:-4}
CPUS=${SLURMLAB_CPUS:-2}
GPUS=${SLURMLAB_GPUS:-2}
MEM=${SLURMLAB_MEM_MB:-4000}
PARTITION=${SLURMLAB_PARTITION:-lab}
MAX_TIME=${SLURMLAB_MAX_TIME:-02:00:00}
DEFAULT_TIME=${SLURMLAB_DEFAULT_TIME:-01:00:00}
ACCT=${SLURMLAB_ACCOUNTING:-1}
INSTALL=${SLURMLAB_INSTALL:-1}
UTS=${SLURMLAB_UTS:-1}
ETC_HOSTS=${SLURMLAB_ETC_HOSTS:-1}
LINK_ETC=${SLURMLAB_LINK_ETC:-1}
CTLD_PORT=${SLURMLAB_CTLD_PORT:-16817}
NODE_PORT0=${SLURMLAB_NODE_PORT0:-17000}
DBD_PORT=${SLURMLAB_DBD_PORT:-16819}
DB_PORT=${SLURMLAB_DB_PORT:-16806}
ENV_FILE=$D/slurmlab.env
HOSTS_MARK='# sporch-slurmlab'
export SLURM_CONF=$D/etc/slurm.conf

log() { echo "[slurmlab $(date +%T)] $*"; }
die() { echo "[slurmlab] ERROR: $*" >&2; exit 1; }

# pid_of PIDFILE: print the pid if that process is alive AND its command line mentions $D
# (we only ever signal our own daemons; never by process name).
pid_of() {
  local p
  [ -s "$1" ] || return 1
  p=$(cat "$1" 2>/dev/null) || return 1
  [ -n "$p" ] && [ -r "/proc/$p/cmdline" ] || return 1
  tr '\0' ' ' < "/proc/$p/cmdline" | grep -qF -- "$D" || return 1
  echo "$p"
}

# nodes_up: how many nodes slurmctld sees as usable
nodes_up() {
  timeout 5 sinfo -h -N -o '%N %T' 2>/dev/null \
    | awk '$2 ~ /^(idle|mixed|allocated|completing)$/ {print $1}' | sort -u | wc -l
}

# render TEMPLATE OUT KEY=VALUE...: replace @KEY@ (values may span lines)
render() {
  local tpl=$1 out=$2 text kv; shift 2
  text=$(<"$tpl")
  for kv in "$@"; do text=${text//@${kv%%=*}@/${kv#*=}}; done
  printf '%s\n' "$text" > "$out"
}
