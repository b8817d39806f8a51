#!/usr/bin/env python3
"""Reads wrk --latency output on stdin; prints one table row: LABEL ops/s mean p50 p99 errors."""
import re
import sys


def to_ms(text):
    m = re.match(r"([\d.]+)(us|ms|s)$", text)
    value = float(m.group(1))
    return {"us": value / 1000, "ms": value, "s": value * 1000}[m.group(2)]


def main():
    label = sys.argv[1]
    text = sys.stdin.read()
    if "Requests/sec" not in text or "Latency Distribution" not in text:
        sys.stderr.write(text)
        print(f"{label:<28} {'(wrk failed)':>10}")
        return
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
    mean = to_ms(re.search(r"^\s*Latency\s+(\S+)", text, re.M).group(1))
    p50 = to_ms(re.search(r"^\s*50%\s+(\S+)", text, re.M).group(1))
    p99 = to_ms(re.search(r"^\s*99%\s+(\S+)", text, re.M).group(1))
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    errors = (int(bad.group(1)) if bad else 0) + (sum(map(int, sock.groups())) if sock else 0)
    print(f"{label:<28} {rps:>10.0f} {mean:>8.2f} {p50:>8.2f} {p99:>8.2f} {errors:>7}")


main()
