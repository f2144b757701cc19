#!/bin/bash
# plan-times.sh — how long `hanayo plan` takes to choose its order, over
# the grid docs/schedules.md ("What the choice costs") reports: hanayo at
# P = 2, 4, 8; M = 2P, 8P, 32P, 128, 512, 1024; whole and split backward;
# W = 1, 2; transfers c = 0, 0.05, 0.2, 0.5, and at c = 0.2 caps of 2P and
# P + 2 activations per rank (at least 2W).
#
#   bash tools/plan-times.sh [HANAYO]     (default build/hanayo)
#
# Prints one line per plan, "wall-seconds cpu-seconds the-plan", as the
# plan's own planning line gives them, then the totals. A measurement to
# read, not a test: the times depend on the machine and its load.
set -euo pipefail
bin=${1:-build/hanayo}
[ -x "$bin" ] || { echo "plan-times.sh: no executable $bin (make first)" >&2; exit 2; }

one() {
    local line
    line=$("$bin" plan --schedule hanayo "$@" | grep '^planning') ||
        { echo "plan-times.sh: no planning line from: plan $*" >&2; exit 1; }
    # "planning   0.60 s (1.18 s of CPU on 2 threads): ..."
    echo "$line" | awk -v args="$*" '{ sub(/^\(/, "", $4); print $2, $4, args }'
}

for P in 2 4 8; do
    for M in $(printf '%s\n' $((2 * P)) $((8 * P)) $((32 * P)) 128 512 1024 | sort -n | uniq); do
        for split in "" --split-backward; do
            for W in 1 2; do
                base="--ranks $P --micro-batches $M --waves $W $split"
                for c in 0 0.05 0.2 0.5; do one $base --comm-cost $c; done
                least=$((2 * W))
                for cap in $(printf '%s\n' $((2 * P)) $((P + 2)) |
                             awk -v l=$least '{ print ($1 < l ? l : $1) }' | uniq); do
                    one $base --comm-cost 0.2 --max-activations $cap
                done
            done
        done
    done
done | awk '{ print; n++; wall += $1; cpu += $2; if ($1 > 1) over++; if ($1 > most) most = $1 }
            END { printf "%d plans: %.1f s wall, %.1f s of CPU; %d over 1 s; the slowest %.2f s\n",
                         n, wall, cpu, over, most }'
