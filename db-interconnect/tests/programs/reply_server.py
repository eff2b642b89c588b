"""Reads a request line, answers it with BYTES random bytes (one sendall), then stays busy
elsewhere for SECONDS without touching the connection (as a server does that computes,
or waits on another descriptor, before it reads the next request), then closes it.
The client speaks first, as PostgreSQL's do: a server that writes first keeps its
connection on the kernel when its write comes before the client's hello.
Writes what it sent to --sent.  Prints "listening" once it serves."""
import argparse
import os
import sys
import time

import endpoints


def main() -> int:
    p = argparse.ArgumentParser()
    endpoints.add(p)
    p.add_argument("--bytes", type=int, required=True)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--sent", required=True)
    args = p.parse_args()
    listener = endpoints.listen(args)
    print("listening", flush=True)
    conn, _ = listener.accept()
    request = b""
    while not request.endswith(b"\n"):
        chunk = conn.recv(1)
        if not chunk:
            return 1
        request += chunk
    data = os.urandom(args.bytes)
    with open(args.sent, "wb") as f:
        f.write(data)
    conn.sendall(data)
    time.sleep(args.seconds)
    conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
