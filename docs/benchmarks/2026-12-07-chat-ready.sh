#!/bin/bash
# The chat's start in a real terminal (tmux), timed from the command to its first frame and to the
# models ready (the title then names the pair: "target ← draft"), polling the screen every 50 ms.
# This folder's README and the README's "Memory, disk and start-up".
#
# Run from the repository root: bash docs/benchmarks/2026-12-07-chat-ready.sh
# For a start with the page cache dropped first (as root): sync; echo 3 > /proc/sys/vm/drop_caches
# Runs of 2026-12-07 (Zen 4 EPYC, 2 cores, main at 77b3a7e and 9b14274): ready at 3.71-4.15 s (first frame
# 2.30-2.52 s), four runs; 6.07-6.28 s (first frame 3.14-3.37 s) with the page cache dropped, two runs.
set -u
tmux kill-session -t ready 2>/dev/null
start=$(date +%s.%N)
tmux new-session -d -s ready -x 160 -y 45 ".venv/bin/specdec-tui"
first=""
for _ in $(seq 1 600); do
  screen=$(tmux capture-pane -p -t ready 2>/dev/null)
  now=$(date +%s.%N)
  if [ -z "$first" ] && grep -q "specdec-tui" <<< "$screen"; then first=$(echo "$now - $start" | bc); fi
  if grep -q "←" <<< "$screen"; then
    echo "first frame ${first} s, ready $(echo "$now - $start" | bc) s"
    break
  fi
  sleep 0.05
done
tmux kill-session -t ready 2>/dev/null
