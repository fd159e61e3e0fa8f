"""How well the policies hold the quota: each evaluation runs as a module from the repository root
(`python -m evaluations.run_all`, `python -m evaluations.quality`) and saves `evaluations/results/<name>.json`;
see README.md."""
