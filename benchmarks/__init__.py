"""Speed and memory: each `bench_*.py` runs as a module from the repository root (`python -m benchmarks.run_all`,
`python -m benchmarks.bench_allocator`) and saves `benchmarks/results/<name>.json`; see README.md."""
