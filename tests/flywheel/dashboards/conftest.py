from tests.flywheel.triage.conftest import tau_airline, tau_bench_path  # noqa: F401  (shared fixtures)
