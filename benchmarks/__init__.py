"""Speed measurements of the kit: run each module with python -m gpt2kit.benchmarks.<name>."""
