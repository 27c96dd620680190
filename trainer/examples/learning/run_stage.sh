#!/usr/bin/env bash
# One stage of the learning run: python -m trainer <kind> --spec <spec>, timed.
# Usage (from the repository root): trainer/examples/learning/run_stage.sh <kind> <spec> <name>
# Writes var/learning/runs/<name>.events.jsonl (stdout events), .stderr, .time (/usr/bin/time -v)
# and appends "<name> threads=<n> <start> <end> <seconds> <exit code>" to var/learning/runs/stages.log.
# Torch threads: $THREADS (default 1). The 2 cores are shared with other work; under that load one
# thread ran a matmul benchmark 1.6x faster than two (OpenMP threads wait on each other's timeslices).
set -u
kind=$1 spec=$2 name=$3
export OMP_NUM_THREADS=${THREADS:-1}
runs=var/learning/runs
mkdir -p "$runs"
start=$(date +%s)
/usr/bin/time -v -o "$runs/$name.time" .venv/bin/python -m trainer "$kind" --spec "$spec" \
    > "$runs/$name.events.jsonl" 2> "$runs/$name.stderr"
rc=$?
end=$(date +%s)
echo "$name threads=$OMP_NUM_THREADS $(date -u -d @"$start" +%FT%TZ) $(date -u -d @"$end" +%FT%TZ) $((end - start)) $rc" >> "$runs/stages.log"
exit $rc
