"""A connection at the highest descriptor number the limit allows.

Raises the soft RLIMIT_NOFILE to the hard one, fills every lower descriptor, and makes
the connection (the server's accepted one, the client's socket) land on hard - 1; then
frees a few low descriptors again (whatever the process does next needs some), sends
BYTES random bytes and gets them back (the server echoes), prints "fd=N sha256=...".
The client then keeps the connection until a line arrives on stdin; the server waits for
the client to close it.

The server first echoes one ordinary connection to its end, as a server that has run a
while has: what a process makes once for all its connections is made then, while
descriptors are free (accept itself takes the last one).
"""
import argparse
import hashlib
import os
import resource
import sys

import endpoints

SPARE = 64


def fill_to(target: int) -> list:
    """Occupies every free descriptor below target; returns them."""
    held = []
    base = os.open("/dev/null", os.O_RDONLY)
    held.append(base)
    while True:
        fd = os.dup(base)
        if fd >= target:
            os.close(fd)
            break
        held.append(fd)
        if fd == target - 1:
            break
    return held


def recv_exact(s, n: int) -> bytes:
    got = bytearray()
    while len(got) < n:
        chunk = s.recv(min(1 << 20, n - len(got)))
        if not chunk:
            break
        got += chunk
    return bytes(got)


def main() -> int:
    p = argparse.ArgumentParser()
    endpoints.add(p)
    p.add_argument("--role", choices=["server", "client"], required=True)
    p.add_argument("--bytes", type=int, default=1 << 20)
    args = p.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    target = hard - 1
    if args.role == "server":
        listener = endpoints.listen(args)
        print("listening", flush=True)
        first, _ = listener.accept()
        while True:
            chunk = first.recv(65536)
            if not chunk:
                break
            first.sendall(chunk)
        first.close()
        held = fill_to(target)
        conn, _ = listener.accept()
    else:
        held = fill_to(target)
        conn = endpoints.socket_for(args)
    for fd in held[-SPARE:]:
        os.close(fd)
    if conn.fileno() != target:
        print(f"fd={conn.fileno()} expected {target}", flush=True)
        return 1
    if args.role == "server":
        data = recv_exact(conn, args.bytes)
        conn.sendall(data)
    else:
        endpoints.connect_socket(conn, args)
        data = os.urandom(args.bytes)
        conn.sendall(data)
        back = recv_exact(conn, args.bytes)
        if back != data:
            print(f"fd={conn.fileno()} echo differs ({len(back)} of {len(data)} bytes)",
                  flush=True)
            return 1
    print(f"fd={conn.fileno()} sha256={hashlib.sha256(data).hexdigest()}", flush=True)
    if args.role == "server":
        rest = conn.recv(1)
        print("closed" if not rest else "unexpected bytes", flush=True)
    else:
        sys.stdin.readline()
    conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
