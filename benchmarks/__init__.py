"""Speed measurements of the kit: run each module with python -m benchmarks.<name>."""
