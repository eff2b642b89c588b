"""A multi-threaded client: one connection per input file, each with a writer thread and
a reader thread (an echo must be read while it is written).

Connection i sends the bytes of IN_DIR/in<i> and writes what comes back to
OUT_DIR/out<i>.  When every echo is complete it prints "holding" and keeps the
connections open until a line arrives on stdin; then it closes them, prints "done" and
leaves with status 0 (1 if any connection failed).
"""
import argparse
import os
import socket
import sys
import threading

import endpoints


def run(args, i: int, failures: list, conns: list) -> None:
    data = open(os.path.join(args.in_dir, f"in{i}"), "rb").read()
    try:
        s = endpoints.connect(args)
    except OSError as e:
        failures.append(f"connection {i}: connect: {e}")
        return
    conns[i] = s

    def write() -> None:
        try:
            s.sendall(data)
        except OSError as e:
            failures.append(f"connection {i}: send: {e}")

    w = threading.Thread(target=write)
    w.start()
    got = 0
    with open(os.path.join(args.out_dir, f"out{i}"), "wb") as out:
        while got < len(data):
            try:
                chunk = s.recv(min(1 << 20, len(data) - got))
            except OSError as e:
                failures.append(f"connection {i}: recv: {e}")
                break
            if not chunk:
                failures.append(f"connection {i}: EOF after {got} of {len(data)} bytes")
                break
            out.write(chunk)
            got += len(chunk)
    w.join()


def main() -> int:
    p = argparse.ArgumentParser()
    endpoints.add(p)
    p.add_argument("--connections", type=int, required=True)
    p.add_argument("--in-dir", required=True)
    p.add_argument("--out-dir", required=True)
    args = p.parse_args()
    failures: list = []
    conns: list = [None] * args.connections
    threads = [threading.Thread(target=run, args=(args, i, failures, conns))
               for i in range(args.connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("holding", flush=True)
    sys.stdin.readline()
    for s in conns:
        if s is not None:
            s.close()
    for f in failures:
        print(f, flush=True)
    print("done", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
