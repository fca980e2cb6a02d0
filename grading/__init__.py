"""The TAs' grader: python -m gpt2kit.grading <submission>... (see grading/__main__.py)."""
