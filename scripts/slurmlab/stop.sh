#!/usr/bin/env bash
# stop.sh - stop sporch's loopback Slurm lab (started by start.sh).
# Cancels all jobs first (Slurm then cleans up its slurmstepd's and task processes), then stops
# slurmd's, slurmctld, slurmdbd, mariadbd and munged. Only signals pids read from our own pid files
# whose command line mentions $SLURMLAB_DIR -- never processes found by name.
#   --purge  also delete $SLURMLAB_DIR (munge key, database), our /etc/slurm/slurm.conf link and
#            our line in /etc/hosts
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# stop_all PIDFILE:LABEL...: TERM each, wait up to 10 s, then KILL what is left
stop_all() {
  local item p i pids=() labels=()
  for item in "$@"; do
    p=$(pid_of "${item%%:*}") || continue
    kill -TERM "$p" 2>/dev/null && pids+=("$p") && labels+=("${item#*:}")
  done
  [ ${#pids[@]} -eq 0 ] && return 0
  for _ in $(seq 100); do
    local alive=0
    for p in "${pids[@]}"; do [ -d "/proc/$p" ] && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  for i in "${!pids[@]}"; do
    if [ -d "/proc/${pids[$i]}" ]; then kill -KILL "${pids[$i]}" 2>/dev/null; log "killed -9 ${labels[$i]} (${pids[$i]})"
    else log "stopped ${labels[$i]} (${pids[$i]})"; fi
  done
}

if pid_of "$D/run/slurmctld.pid" >/dev/null; then
  ids=$(timeout 5 squeue -h -o %i 2>/dev/null)
  if [ -n "$ids" ]; then
    # shellcheck disable=SC2086
    timeout 10 scancel --quiet $ids 2>/dev/null || true
    for _ in $(seq 100); do
      [ -z "$(timeout 5 squeue -h -t PD,R,CG,S 2>/dev/null)" ] && break
      sleep 0.1
    done
  fi
fi
slurmds=()
for f in "$D"/run/slurmd-*.pid; do
  [ -e "$f" ] && slurmds+=("$f:slurmd $(basename "$f" .pid | sed 's/^slurmd-//')")
done
[ ${#slurmds[@]} -gt 0 ] && stop_all "${slurmds[@]}"
stop_all "$D/run/slurmctld.pid:slurmctld" "$D/run/slurmdbd.pid:slurmdbd"
stop_all "$D/mysql/mariadbd.pid:mariadbd" "$D/munge/munged.pid:munged"
rm -f "$D/run/knobs"

# report (never kill) a slurmstepd that outlived its slurmd
left=""
for p in /proc/[0-9]*; do
  case "$(readlink "$p/exe" 2>/dev/null)" in */slurmstepd-wlm) left="$left ${p#/proc/}";; esac
done
[ -n "$left" ] && log "WARNING: slurmstepd still running:$left"

if [ "${1:-}" = "--purge" ]; then
  [ "$(readlink /etc/slurm/slurm.conf 2>/dev/null)" = "$SLURM_CONF" ] && rm -f /etc/slurm/slurm.conf
  if grep -qF "$HOSTS_MARK" /etc/hosts; then
    tmp=$(mktemp)
    grep -vF "$HOSTS_MARK" /etc/hosts > "$tmp"; cat "$tmp" > /etc/hosts; rm -f "$tmp"
  fi
  rm -rf "$D"
  log "purged $D"
fi
log "lab stopped"
