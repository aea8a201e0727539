#!/usr/bin/env bash
# Replays every recorded trajectory with one or more loopguard binaries and
# prints per run: the INDEX judgement, the highest level reached, the first
# request index (0-based) with a warning and with a critical-or-above
# verdict, and the detectors behind them.
#
#   benches/trajectories.sh [BIN...]        # default: target/release/loopguard
#   TRAJECTORIES=dir benches/trajectories.sh BIN_BEFORE BIN_AFTER
#
# Columns per binary: max level, first warning (request:detector), first
# critical+ (request:detector). A summary per binary follows: loop runs
# flagged (warning or above) and progress runs stopped (critical or above).
set -euo pipefail
DIR="${TRAJECTORIES:-$(dirname "$0")/../../shared/trajectories}"
[ $# -gt 0 ] || set -- target/release/loopguard
INDEX="$DIR/INDEX.md"

judgement() { # file name -> judgement (last column of its INDEX row)
  awk -F'|' -v f="$1" '$2 ~ " "f" " { gsub(/ /, "", $(NF-1)); print $(NF-1) }' "$INDEX"
}

summarise() { # replay output on stdin -> "max first_warning first_critical"
  jq -rs '
    def rank: {"warning":1,"critical":2,"breaker":3}[.level] // 0;
    (map(rank) | max // 0) as $m
    | ([.[] | select(.level == "warning")] | first) as $w
    | ([.[] | select(rank >= 2)] | first) as $c
    | [(["-","warning","critical","breaker"][$m]),
       (if $w then "\($w.request):\($w.detector)" else "-" end),
       (if $c then "\($c.request):\($c.detector)" else "-" end)] | join(" ")'
}

declare -A flagged stopped
printf '%-58s %-9s' run judgement
for bin in "$@"; do printf ' | %-44s' "$(basename "$bin"): max warn crit"; done
echo
loops=0; progress=0
for f in "$DIR"/*.jsonl; do
  name="$(basename "$f")"
  j="$(judgement "$name")"
  [ "$j" = loop ] && loops=$((loops + 1))
  [ "$j" = progress ] && progress=$((progress + 1))
  printf '%-58s %-9s' "${name%.jsonl}" "$j"
  for bin in "$@"; do
    read -r max w c < <("$bin" replay "$f" 2>/dev/null | summarise)
    printf ' | %-8s %-17s %-17s' "$max" "$w" "$c"
    if [ "$j" = loop ] && [ "$max" != - ]; then flagged[$bin]=$((${flagged[$bin]:-0} + 1)); fi
    if [ "$j" = progress ] && [ "$max" != - ] && [ "$max" != warning ]; then
      stopped[$bin]=$((${stopped[$bin]:-0} + 1))
    fi
  done
  echo
done
for bin in "$@"; do
  echo "$bin: loop runs flagged ${flagged[$bin]:-0}/$loops; progress runs stopped ${stopped[$bin]:-0}/$progress"
done
