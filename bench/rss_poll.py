"""``python3 bench/rss_poll.py CMD ...``: runs CMD, polling its ``/proc/PID/status`` every 20 ms, and prints to stderr
``RSSPEAK {"VmRSS": MB, "RssAnon": MB, "RssFile": MB, "RssShmem": MB}`` at the peak VmRSS: what the peak is made of
(``getrusage``'s ru_maxrss gives the peak alone). Exits with CMD's status."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

KEYS = ("VmRSS", "RssAnon", "RssFile", "RssShmem")


def main(argv: list[str]) -> int:
    proc = subprocess.Popen(argv)
    best: dict[str, int] = {"VmRSS": 0}
    while proc.poll() is None:
        try:
            with open(f"/proc/{proc.pid}/status") as f:
                now = {line.split(":")[0]: int(line.split()[1]) for line in f if line.startswith(KEYS)}
        except (OSError, ValueError, IndexError):
            now = {}
        if now.get("VmRSS", 0) > best["VmRSS"]:
            best = now
        time.sleep(0.02)
    print("RSSPEAK", json.dumps({k: v // 1024 for k, v in best.items()}), file=sys.stderr)
    return proc.returncode


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cmd", nargs=argparse.REMAINDER, help="the command and its arguments")
    args = ap.parse_args()
    if not args.cmd:
        ap.error("no command to run")
    sys.exit(main(args.cmd))
