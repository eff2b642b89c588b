"""One end of a bulk transfer that the other end may abandon (killed mid-transfer).

--listen accepts CONNECTIONS connections one after the other, --connect makes them; on
each, --send writes random data (the first connection only --first bytes, then closes;
later ones until the connection fails) and --recv reads until the end.  It prints
  "flowing K"          once 1 MiB of connection K went through
  "end K HOW NS"       when connection K ended: HOW is eof, done, or the errno name;
                       NS the CLOCK_MONOTONIC time of that moment in nanoseconds
  "closed K NS"        once its socket is closed (NS as above)
With --hold, the first connection's sender prints "held 1" once its bytes are sent and
waits for a line on stdin before it closes, watching the connection meanwhile (a wait
on the socket is where the interposer moves a connection to its stream).  With --step, it waits for a line on stdin
before each connection after the first; at the end it prints "finished" and waits for
stdin to close.
"""
import argparse
import errno
import os
import select
import sys
import time

import endpoints

FLOWING = 1 << 20


def say(text: str) -> None:
    print(text, flush=True)


def ended(k: int, how: str) -> None:
    say(f"end {k} {how} {time.monotonic_ns()}")


def error_name(e: OSError) -> str:
    return errno.errorcode.get(e.errno, str(e.errno))


def transfer(s, k: int, send: bool, limit) -> None:
    moved = 0
    flowing = False
    chunk = os.urandom(64 * 1024)
    try:
        while limit is None or moved < limit:
            if send:
                n = s.send(chunk if limit is None else chunk[: limit - moved])
            else:
                n = len(s.recv(256 * 1024))
                if n == 0:
                    ended(k, "eof")
                    return
            moved += n
            if not flowing and moved >= FLOWING:
                flowing = True
                say(f"flowing {k}")
        ended(k, "done")
    except OSError as e:
        ended(k, error_name(e))


def main() -> int:
    p = argparse.ArgumentParser()
    endpoints.add(p)
    side = p.add_mutually_exclusive_group(required=True)
    side.add_argument("--listen", action="store_true")
    side.add_argument("--connect", action="store_true")
    way = p.add_mutually_exclusive_group(required=True)
    way.add_argument("--send", action="store_true")
    way.add_argument("--recv", action="store_true")
    p.add_argument("--connections", type=int, default=1)
    p.add_argument("--first", type=int, help="bytes the first connection carries")
    p.add_argument("--step", action="store_true")
    p.add_argument("--hold", action="store_true")
    args = p.parse_args()
    listener = None
    if args.listen:
        listener = endpoints.listen(args)
        say("listening")
    for k in range(1, args.connections + 1):
        if args.step and k > 1:
            sys.stdin.readline()
        s = listener.accept()[0] if listener else endpoints.connect(args)
        limit = args.first if k == 1 and args.send else None
        transfer(s, k, args.send, limit)
        if args.hold and k == 1 and args.send:
            say("held 1")
            while sys.stdin not in select.select([sys.stdin, s], [], [], 30)[0]:
                pass
            sys.stdin.readline()
        s.close()
        say(f"closed {k} {time.monotonic_ns()}")
    say("finished")
    sys.stdin.read()
    if listener:
        listener.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
