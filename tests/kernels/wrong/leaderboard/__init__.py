"""Cheats that only the leaderboard can catch: each is right in every kernel test case and in
the leaderboard's gate, and wrong, or lying about its time, only in the timed runs.

Each sets FUNCTION and defines that host function; tests/grading/test_leaderboard_gpu.py
appends `from tests.kernels.wrong.leaderboard.<name> import <FUNCTION>` to a copy of the
kit's kernels and ranks it. (tests.kernels.wrong.names() leaves this package out: the
kernel tests cannot reject these.)
"""
