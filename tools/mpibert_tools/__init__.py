"""mpibert's analysis tools: run directories read and compared (run_sources, compare), the
alpha-beta scaling model (scaling_model) and two measurement folders side by side (compare_runs).
The commands are the launchers beside this package (tools/compare, tools/scaling-model,
tools/compare-runs) and, where the package is installed (tools/pyproject.toml), the console scripts
mpibert-compare, mpibert-scaling-model, mpibert-compare-runs."""
