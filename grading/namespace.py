"""What the grader runs inside a worker's new mount and pid namespaces (grading.sandbox, unshare, as
root) before the worker itself:

    python -I -S grading/namespace.py PLAN

PLAN is JSON: "mounts", a list of (kind, path), shallowest first: "hide" lays an empty tmpfs
over the path, "read" and "write" bind it back (read-only or not) over what was hidden;
"drop": become nobody (NOBODY) with no supplementary group; "cwd" and "command", the worker
to exec. Whatever fails ends this process with CANNOT_ISOLATE and one line on stderr. It
imports only the standard library: it runs with nothing of the kit on its path.
"""

import ctypes
import json
import os
import sys

NOBODY = 65534  # the overflow uid and gid: owns none of the grader's files
CANNOT_ISOLATE = 125
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
PR_SET_NO_NEW_PRIVS = 38


def enter(plan: dict) -> None:
    """Hide and bind back `plan["mounts"]`, become nobody if `plan["drop"]`, and exec `plan["command"]` in
    `plan["cwd"]`. What is bound back is opened before anything is hidden and bound from that handle, since its
    path may lie under a tmpfs by then."""
    libc = ctypes.CDLL(None, use_errno=True)
    os.umask(0o022)  # the directories made inside a tmpfs are ones nobody must be able to enter

    def mount(source, target, kind, flags, data=None):
        if libc.mount(source and source.encode(), target.encode(), kind and kind.encode(), flags,
                      data and data.encode()) != 0:
            number = ctypes.get_errno()
            raise OSError(number, f"mount {kind or 'bind'} on {target}: {os.strerror(number)}")

    mount(None, "/", None, MS_REC | MS_PRIVATE)
    handles = {path: os.open(path, os.O_PATH) for kind, path in plan["mounts"] if kind != "hide"}
    for kind, path in plan["mounts"]:
        if kind == "hide":
            mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755,size=1m")
            continue
        os.makedirs(path, exist_ok=True)  # inside a tmpfs laid over it, the path is made anew
        mount(f"/proc/self/fd/{handles[path]}", path, None, MS_BIND | MS_REC)
        if kind == "read":
            mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY)
    for handle in handles.values():
        os.close(handle)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:  # no setuid program gives root back
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    if plan["drop"]:
        os.setgroups([])
        os.setresgid(NOBODY, NOBODY, NOBODY)
        os.setresuid(NOBODY, NOBODY, NOBODY)
    os.chdir(plan["cwd"])
    os.execv(plan["command"][0], plan["command"])


if __name__ == "__main__":
    try:
        enter(json.loads(sys.argv[1]))
    except OSError as err:
        print(f"cannot isolate the worker: {err.strerror or err}", file=sys.stderr)
        sys.exit(CANNOT_ISOLATE)
