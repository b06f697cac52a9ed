#!/usr/bin/env bash
# start.sh - start sporch's loopback Slurm lab (Debian 12, as root).
#
# One slurmctld, one `slurmd -N nodeI` per emulated node (all NodeAddr=127.0.0.1, own port),
# a private munged, and accounting (slurmdbd + a private mariadbd on 127.0.0.1) so sacct works.
# Default: 4 nodes x 2 CPUs x 2 fake GPUs, partition `lab` (Default=YES, MaxTime=02:00:00),
# matching clusters/slurmlab.yaml. Knobs: see lib.sh. Docs: docs/slurmlab.md.
#
# Idempotent: when our daemons are all up with the same settings and every node answers, it only
# prints the env file. Otherwise it stops our leftovers, wipes the Slurm state and starts fresh.
# "Ready" means a probe job ran one task on every node.
#
#   scripts/slurmlab/start.sh && source /var/tmp/sporch-slurmlab/slurmlab.env
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[ "$(id -u)" = 0 ] || die "must run as root (it starts daemons and edits /etc/hosts)"
T0=$(date +%s.%N)

install_packages() {
  local need=()
  [ -x /usr/sbin/slurmctld-wlm ] || need+=(slurmctld)
  [ -x /usr/sbin/slurmd-wlm ]    || need+=(slurmd)
  command -v sbatch >/dev/null   || need+=(slurm-client)
  command -v munged >/dev/null   || need+=(munge)
  command -v unshare >/dev/null  || need+=(util-linux)
  if [ "$ACCT" = 1 ]; then
    [ -x /usr/sbin/slurmdbd ]      || need+=(slurmdbd)
    command -v mariadbd >/dev/null || need+=(mariadb-server)
  fi
  [ ${#need[@]} -eq 0 ] && return 0
  [ "$INSTALL" = 1 ] || die "missing packages: ${need[*]} (apt-get install them, or set SLURMLAB_INSTALL=1)"
  log "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # Keep the packages' own services (system munged, mariadb, slurmd) from starting on a
  # systemd machine: we run private daemons. policy-rc.d exit 101 = "do not start".
  local policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    policy=/usr/sbin/policy-rc.d
    printf '#!/bin/sh\nexit 101\n' > "$policy"; chmod 755 "$policy"
  fi
  local rc=0
  # a fresh machine has no package lists: refresh them when a package is unknown (or install fails)
  if ! apt-cache show "${need[@]}" >/dev/null 2>&1; then apt-get update -qq || true; fi
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null \
    || { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null; } \
    || rc=$?
  [ -z "$policy" ] || rm -f "$policy"
  [ $rc = 0 ] || die "apt-get install ${need[*]} failed"
}

all_running() {   # our daemons alive, same settings, every node usable
  [ -f "$ENV_FILE" ] && [ "$(cat "$D/run/knobs" 2>/dev/null)" = "$KNOBS" ] || return 1
  pid_of "$D/run/slurmctld.pid" >/dev/null && pid_of "$D/munge/munged.pid" >/dev/null || return 1
  local i
  for i in $(seq 1 "$NNODES"); do pid_of "$D/run/slurmd-node$i.pid" >/dev/null || return 1; done
  if [ "$ACCT" = 1 ]; then
    pid_of "$D/run/slurmdbd.pid" >/dev/null && pid_of "$D/mysql/mariadbd.pid" >/dev/null || return 1
  fi
  [ "$(nodes_up)" -ge "$NNODES" ]
}

start_munge() {
  chmod 711 "$D/munge"                       # munged insists on o+x for its socket directory
  if [ ! -s "$D/munge/munge.key" ]; then
    mungekey --create --keyfile="$D/munge/munge.key" 2>/dev/null \
      || dd if=/dev/urandom of="$D/munge/munge.key" bs=1024 count=1 status=none
  fi
  chmod 400 "$D/munge/munge.key"
  rm -f "$D/munge/munge.socket.2" "$D/munge/munged.pid"
  munged --socket="$D/munge/munge.socket.2" --key-file="$D/munge/munge.key" \
         --log-file="$D/munge/munged.log" --pid-file="$D/munge/munged.pid" --seed-file="$D/munge/munged.seed"
  munge -S "$D/munge/munge.socket.2" -n | unmunge -S "$D/munge/munge.socket.2" >/dev/null \
    || die "munge self-test failed (see $D/munge/munged.log)"
}

sql() { mariadb --no-defaults -S "$D/mysql/mysqld.sock" -uroot -e "$1"; }

start_accounting() {
  local db=$D/mysql deadline
  mkdir -p "$db"
  if [ ! -d "$db/data/mysql" ]; then
    rm -rf "$db/data"; mkdir -p "$db/data"
    mariadb-install-db --no-defaults --user=root --datadir="$db/data" \
      --auth-root-authentication-method=normal --skip-test-db >"$D/log/mariadb-install.log" 2>&1 \
      || die "mariadb-install-db failed (see $D/log/mariadb-install.log)"
  fi
  # own session: a test runner that kills our process group must not take the database down
  setsid mariadbd --no-defaults --user=root --datadir="$db/data" --socket="$db/mysqld.sock" \
    --pid-file="$db/mariadbd.pid" --log-error="$D/log/mariadbd.log" \
    --bind-address=127.0.0.1 --port="$DB_PORT" --skip-name-resolve \
    --innodb-buffer-pool-size=32M --innodb-log-file-size=16M --innodb-lock-wait-timeout=900 \
    --performance-schema=OFF --max-connections=50 </dev/null >/dev/null 2>&1 &
  deadline=$((SECONDS + 60))
  until sql 'select 1' >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || { tail -5 "$D/log/mariadbd.log" >&2; die "mariadbd not up after 60s"; }
    sleep 0.2
  done
  # the Slurm state is wiped on a fresh start, so is the accounting database
  sql "DROP DATABASE IF EXISTS slurm_acct_db; CREATE DATABASE slurm_acct_db;
       CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurmlab';
       GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; FLUSH PRIVILEGES;"
  render "$LAB_HERE/slurmdbd.conf.in" "$D/etc/slurmdbd.conf" DIR="$D" DBD_PORT="$DBD_PORT" DB_PORT="$DB_PORT" DB_PASS=slurmlab
  chmod 600 "$D/etc/slurmdbd.conf"
  "$D/sbin/slurmdbd"                         # no -f: reads $(dirname $SLURM_CONF)/slurmdbd.conf
  deadline=$((SECONDS + 30))
  until (exec 3<>"/dev/tcp/127.0.0.1/$DBD_PORT") 2>/dev/null; do
    if [ -s "$D/run/slurmdbd.pid" ] && ! pid_of "$D/run/slurmdbd.pid" >/dev/null; then
      tail -5 "$D/log/slurmdbd.log" >&2; die "slurmdbd died"
    fi
    [ $SECONDS -lt $deadline ] || die "slurmdbd not listening on $DBD_PORT after 30s"
    sleep 0.1
  done
}

write_configs() {
  local acct nodes="" gres_node="" gres_types="" gres_lines="" i
  if [ "$ACCT" = 1 ]; then
    acct="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$DBD_PORT
# slurmctld and sacct authenticate to slurmdbd through THIS socket (AuthInfo is not used for it)
AccountingStoragePass=$D/munge/munge.socket.2"
  else
    acct="AccountingStorageType=accounting_storage/none"
  fi
  if [ "$GPUS" -gt 0 ]; then
    gres_types="GresTypes=gpu"; gres_node=" Gres=gpu:$GPUS"
    gres_lines="NodeName=node[1-$NNODES] Name=gpu File=$D/dev/nvidia[0-$((GPUS - 1))]"
  fi
  for i in $(seq 1 "$NNODES"); do
    nodes+="NodeName=node$i NodeAddr=127.0.0.1 NodeHostname=node$i Port=$((NODE_PORT0 + i)) CPUs=$CPUS RealMemory=$MEM${gres_node} Features=lab,fakegpu State=UNKNOWN"$'\n'
  done
  render "$LAB_HERE/slurm.conf.in" "$D/etc/slurm.conf" DIR="$D" CTLD_PORT="$CTLD_PORT" \
    MEM_PER_CPU=$((MEM / CPUS)) ACCOUNTING="$acct" FIRST_JOB_ID="$FIRST_JOB_ID" GRES_TYPES="$gres_types" \
    NODES="${nodes%$'\n'}" PARTITION="$PARTITION" DEFAULT_TIME="$DEFAULT_TIME" MAX_TIME="$MAX_TIME"
  render "$LAB_HERE/gres.conf.in" "$D/etc/gres.conf" GRES_LINES="$gres_lines"
}

system_integration() {
  if [ "$LINK_ETC" = 1 ]; then   # clients then work without SLURM_CONF
    mkdir -p /etc/slurm
    if [ ! -e /etc/slurm/slurm.conf ] || [ "$(readlink /etc/slurm/slurm.conf)" = "$SLURM_CONF" ]; then
      ln -sfn "$SLURM_CONF" /etc/slurm/slurm.conf
    else
      log "WARNING: /etc/slurm/slurm.conf is not ours; clients need SLURM_CONF=$SLURM_CONF (see $ENV_FILE)"
    fi
  fi
  if [ "$ETC_HOSTS" = 1 ]; then   # MASTER_ADDR=node1 must resolve
    local line i
    line="127.0.0.1 $(for i in $(seq 1 "$NNODES"); do printf 'node%s ' "$i"; done)$HOSTS_MARK"
    if ! grep -qxF "$line" /etc/hosts; then
      { grep -vF "$HOSTS_MARK" /etc/hosts || true; echo "$line"; } > "$D/run/hosts.new"
      cat "$D/run/hosts.new" > /etc/hosts     # rewrite in place: /etc/hosts may be a bind mount
    fi
  fi
}

start_slurm() {
  local i deadline
  "$D/sbin/slurmctld" -f "$SLURM_CONF" -i
  deadline=$((SECONDS + 30))
  until timeout 5 scontrol ping 2>/dev/null | grep -q 'is UP'; do
    [ ! -s "$D/run/slurmctld.pid" ] || pid_of "$D/run/slurmctld.pid" >/dev/null \
      || { tail -5 "$D/log/slurmctld.log" >&2; die "slurmctld died"; }
    [ $SECONDS -lt $deadline ] || { tail -5 "$D/log/slurmctld.log" >&2; die "slurmctld not answering after 30s"; }
    sleep 0.1
  done
  for i in $(seq 1 "$NNODES"); do
    mkdir -p "$D/spool/node$i"
    if [ "$UTS" = 1 ]; then
      unshare --uts sh -c 'hostname "$0" && exec "$@"' "node$i" \
        "$D/sbin/slurmd" -f "$SLURM_CONF" -d "$D/sbin/slurmstepd" -N "node$i"
    else
      "$D/sbin/slurmd" -f "$SLURM_CONF" -d "$D/sbin/slurmstepd" -N "node$i"
    fi
  done
  deadline=$((SECONDS + 60))
  until [ "$(nodes_up)" -ge "$NNODES" ]; do
    pid_of "$D/run/slurmctld.pid" >/dev/null || { tail -5 "$D/log/slurmctld.log" >&2; die "slurmctld died"; }
    [ $SECONDS -lt $deadline ] || { timeout 5 sinfo -N -l >&2 || true; die "nodes not idle after 60s; see $D/log"; }
    sleep 0.1
  done
  # slurmctld's first scheduling pass comes ~3 s after start (it then logs "SchedulerParameters=");
  # jobs submitted earlier just wait. Then prove it: one task on every node.
  deadline=$((SECONDS + 20))
  until grep -q 'SchedulerParameters=' "$D/log/slurmctld.log" 2>/dev/null || [ $SECONDS -ge $deadline ]; do
    sleep 0.1
  done
  local out
  out=$(timeout 60 srun -p "$PARTITION" -N "$NNODES" --ntasks-per-node=1 -J slurmlab-probe -t 1 \
        bash -c 'echo "$SLURMD_NODENAME $(hostname)"' 2>&1) || die "probe job failed: $out"
  [ "$(echo "$out" | awk '{print $1}' | sort -u | wc -l)" -eq "$NNODES" ] || die "probe job output unexpected: $out"
  if [ "$UTS" = 1 ]; then
    echo "$out" | awk '$1 != $2 {bad=1} END {exit bad}' || die "hostname inside tasks is not the node name: $out"
  fi
}

write_env() {
  cat > "$ENV_FILE" <<EOF
# sporch loopback Slurm lab -- written by scripts/slurmlab/start.sh; source it before using Slurm.
export SLURM_CONF=$SLURM_CONF
export SLURMLAB_DIR=$D
export SLURMLAB_PARTITION=$PARTITION
export SLURMLAB_NODES=$NNODES
export SLURMLAB_CPUS_PER_NODE=$CPUS
export SLURMLAB_GPUS_PER_NODE=$GPUS
export SLURMLAB_MEM_MB=$MEM
export SLURMLAB_MAX_TIME=$MAX_TIME
export SLURMLAB_ACCOUNTING=$ACCT
# logs: $D/log   stop: $LAB_HERE/stop.sh  (--purge also deletes $D)
EOF
}

# ---------------------------------------------------------------------------------------------
install_packages
if [ "$UTS" = 1 ] && ! unshare --uts true 2>/dev/null; then
  log "WARNING: 'unshare --uts' is not permitted here; every node will report hostname $(hostname)"
  UTS=0
fi
KNOBS="nodes=$NNODES cpus=$CPUS gpus=$GPUS mem=$MEM partition=$PARTITION time=$DEFAULT_TIME/$MAX_TIME acct=$ACCT uts=$UTS ports=$CTLD_PORT,$NODE_PORT0,$DBD_PORT,$DB_PORT"
KNOBS+=" scripts=$(cat "$LAB_HERE"/start.sh "$LAB_HERE"/lib.sh "$LAB_HERE"/*.in | md5sum | cut -c1-12)"

if all_running; then
  log "already running ($NNODES nodes up)"
  cat "$ENV_FILE"
  exit 0
fi

# partial or stale: stop whatever of ours is left, then start clean
SLURMLAB_DIR=$D "$LAB_HERE/stop.sh" >/dev/null 2>&1 || true
# Slurm state is wiped, so job ids would restart at 1 and collide with old %j folders: use the
# clock (changes every second, wraps after ~16 h, stays below MaxJobId=67043328).
FIRST_JOB_ID=${SLURMLAB_FIRST_JOB_ID:-$(( $(date +%s) % 60000 * 1000 + 1 ))}
rm -rf "$D/state" "$D/spool" "$D/log" "$D/run" "$D/etc" "$D/dev" "$D/sbin" "$ENV_FILE"
mkdir -p "$D"/{state,spool,log,run,etc,dev,sbin,munge}
chmod 755 "$D"

# Slurm decides "am I slurmctld / slurmd?" from argv[0]: started as *-wlm (Debian's names) the
# daemons silently drop Gres= from every node. Start them through correctly named symlinks.
ln -s /usr/sbin/slurmctld-wlm  "$D/sbin/slurmctld"
ln -s /usr/sbin/slurmd-wlm     "$D/sbin/slurmd"
ln -s /usr/sbin/slurmstepd-wlm "$D/sbin/slurmstepd"
if [ "$ACCT" = 1 ]; then ln -s /usr/sbin/slurmdbd "$D/sbin/slurmdbd"; fi

# fake GPUs: character devices (c 1 3 is /dev/null); plain files make slurmd complain
for g in $(seq 0 $((GPUS - 1))); do
  mknod -m 666 "$D/dev/nvidia$g" c 1 3 2>/dev/null || touch "$D/dev/nvidia$g"
done

start_munge
if [ "$ACCT" = 1 ]; then start_accounting; fi
write_configs
system_integration
start_slurm
echo "$KNOBS" > "$D/run/knobs"
write_env
sinfo -N -o '%N %P %T %c %m %G %f'
log "lab ready in $(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $T0}") s: source $ENV_FILE"
cat "$ENV_FILE"
