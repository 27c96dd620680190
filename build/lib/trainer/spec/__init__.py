"""The trainer's torch-free face: what the web app may know of a job before any model loads.

- `config`: the typed-config machinery (`config_from_json`, `config_help`), the expected-failure
  errors, the LoRA settings and the knobs every training kind shares;
- `eval`, `sft`, `grpo`, `gate`, `mine`, `replay`: each job kind's config (the gate's also holds the promotion
  policy; replay's also its cases);
- `kinds`: which config belongs to which job kind;
- `tasks`: reading, hashing and sampling task files (one stratified sampler for app and gate);
- `adapters`: the adapter and checkpoint folder layout, manifests and their verification;
- `bfcl`, `workbench`: the third-party task sets under shared/external as `Task`s, split without leakage;
- `stats`: intervals and percentiles over per-task measurements, shared by evaluation, the gate and
  the app's monitor (one Wilson interval for all).

Nothing here imports torch, transformers, trl, peft, vllm or datasets, not even inside a
function: `tests/test_boundaries.py` checks it. What trains, generates or loads a model is in
the modules beside this package.
"""
