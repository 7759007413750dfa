"""Run one `kvviz events` child and report its own peak RSS (tests/fuzz/hostile_zmq.run_events
runs this file as a script: `python -I -S kvevents_launch.py JOB.json`).

Why a launcher: wait4's ru_maxrss of a child is not the child's own peak. When a process
execs, Linux folds the high-water RSS of the address space it leaves (a fork's copy of its
parent, or the parent's own one after a vfork) into the ru_maxrss it reports, so a child
started by a 1 GB pytest worker reads 1 GB whatever it does itself. This script is that
parent instead: a bare interpreter (about 10 MB, standard library only, nothing of the test
process), so the child's ru_maxrss is its own peak (or this script's 10 MB). It also owns
the child's timing: SIGTERM once the recording exists, optional SIGSTOP / SIGCONT bursts that
starve the child while its publisher floods, SIGKILL (by its PID) past the limit. It prints
one JSON object: exit code, wall time, peak RSS in KiB.
"""
import json
import os
import signal
import sys
import time


def main(job: dict) -> dict:
    if job.get("nofile") is not None:
        import resource

        resource.setrlimit(resource.RLIMIT_NOFILE, (job["nofile"], job["nofile"]))
    null = os.open(os.devnull, os.O_RDWR)
    err = os.open(job["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    pid = os.posix_spawn(job["argv"][0], job["argv"], os.environ, file_actions=[
        (os.POSIX_SPAWN_DUP2, null, 0), (os.POSIX_SPAWN_DUP2, null, 1),
        (os.POSIX_SPAWN_DUP2, err, 2)])
    os.close(err)
    with open(job["pidfile"], "w") as f:  # for the caller, should this script be killed
        f.write(str(pid))
    ready, after, limit = job.get("ready"), job.get("signal_after_s"), job["limit_s"]
    stop_s, run_s = job.get("pause") or (0.0, 0.0)
    start = t0 = next_pause = time.monotonic()
    signalled = False
    while True:
        got, status, ru = os.wait4(pid, os.WNOHANG)
        if got:
            break
        now = time.monotonic()
        if ready is not None and not os.path.exists(ready) and not signalled:
            t0 = next_pause = now  # the timed part starts once the recording exists
        elif after is not None and not signalled and now - t0 >= after:
            os.kill(pid, signal.SIGTERM)
            signalled, t0 = True, now
        elif stop_s and not signalled and now >= next_pause:
            os.kill(pid, signal.SIGSTOP)  # starved: the publisher races ahead meanwhile
            time.sleep(stop_s)
            os.kill(pid, signal.SIGCONT)
            next_pause = time.monotonic() + run_s
        if now - start > limit:
            os.kill(pid, signal.SIGCONT)
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)
    return {"code": os.waitstatus_to_exitcode(status), "wall_s": time.monotonic() - t0,
            "peak_rss_kb": ru.ru_maxrss}


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        print(json.dumps(main(json.load(f))), flush=True)
