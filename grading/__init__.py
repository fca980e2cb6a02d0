"""The TAs' grader: python -m grading <submission>... (see grading/__main__.py)."""
