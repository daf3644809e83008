#!/usr/bin/env bash
# Stop the daemons slurm-up.sh started (their PID files are listed in $1), newest first.
STARTED=${1:?usage: slurm-down.sh STARTED_FILE}
[ -f "$STARTED" ] || exit 0
tac "$STARTED" | while read -r pidfile; do
  [ -s "$pidfile" ] || continue
  pid=$(cat "$pidfile")
  kill "$pid" 2>/dev/null || continue
  for _ in $(seq 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
done
rm -f "$STARTED"
