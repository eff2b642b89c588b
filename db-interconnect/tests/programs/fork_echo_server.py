"""An accept-then-fork echo server, PostgreSQL's postmaster pattern: the parent accepts
and forks, closes its copy of the connection at once, and the child reads it first.

Echoes every connection's bytes until its client closes.  A connection whose first
bytes are "CANCEL" is a cancel request (16 bytes): the child records it, answers
nothing and closes.  Each child appends one line to the --log file when its connection
ends: "cancel ok", "cancel bad", or "echo BYTES" (or "error ...").  Prints "listening"
once it serves; leaves on SIGTERM.

For a test that must order the negotiation against its client (late_client.py):
--read-after PATH makes a child read its connection only once PATH exists (the client
has written its request, so the server's REPLY cannot come before it), and --answered
PATH makes a child create PATH once its first answer is written.
"""
import argparse
import os
import signal
import sys

import endpoints

CANCEL = b"CANCEL"
CANCEL_SIZE = 16


def serve(conn, args) -> str:
    if args.read_after and not endpoints.wait_for(args.read_after):
        return f"error {args.read_after} did not appear"
    first = conn.recv(65536)
    if first.startswith(CANCEL):
        while len(first) < CANCEL_SIZE:
            more = conn.recv(CANCEL_SIZE - len(first))
            if not more:
                break
            first += more
        return "cancel ok" if len(first) == CANCEL_SIZE and first[6:].isdigit() else "cancel bad"
    echoed = 0
    data = first
    while data:
        conn.sendall(data)
        if args.answered and echoed == 0:
            os.close(os.open(args.answered, os.O_WRONLY | os.O_CREAT, 0o644))
        echoed += len(data)
        data = conn.recv(65536)
    return f"echo {echoed}"


def main() -> int:
    p = argparse.ArgumentParser()
    endpoints.add(p)
    p.add_argument("--log", required=True)
    p.add_argument("--read-after", metavar="PATH")
    p.add_argument("--answered", metavar="PATH")
    args = p.parse_args()
    listener = endpoints.listen(args)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    print("listening", flush=True)
    while True:
        conn, _ = listener.accept()
        if os.fork() == 0:
            listener.close()
            try:
                line = serve(conn, args)
            except OSError as e:
                line = f"error {e}"
            conn.close()
            fd = os.open(args.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            os.write(fd, (line + "\n").encode())
            os.close(fd)
            os._exit(0)
        conn.close()


if __name__ == "__main__":
    sys.exit(main())
