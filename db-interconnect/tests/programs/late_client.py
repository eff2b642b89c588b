"""A client that writes its request at once and reads the answer only once its server
has answered: that server answered before this client could come to its rendezvous.

Events, not pauses, order it (a loaded host delays either side by any amount): the
client creates --sent PATH once its request is written (a server with --read-after PATH
reads, and so sends its REPLY, only after that: the request cannot find the REPLY and
come to the rendezvous with it), and reads only once --read-after PATH exists (the
server creates it when its answer is written, i.e. after it gave the rendezvous up).
Prints what it read; exits 1 when that is not the echo of what it wrote, 2 when
--read-after PATH did not appear in time."""
import argparse
import os
import sys

import endpoints


def main() -> int:
    p = argparse.ArgumentParser()
    endpoints.add(p)
    p.add_argument("--sent", metavar="PATH", required=True)
    p.add_argument("--read-after", metavar="PATH", required=True)
    p.add_argument("--bytes", type=int, default=3000)
    args = p.parse_args()
    data = bytes((7 * i + 1) % 251 for i in range(args.bytes))
    s = endpoints.connect(args)
    s.sendall(data)
    os.close(os.open(args.sent, os.O_WRONLY | os.O_CREAT, 0o644))
    if not endpoints.wait_for(args.read_after):
        print(f"{args.read_after} did not appear", file=sys.stderr, flush=True)
        return 2
    got = b""
    s.settimeout(10)
    while len(got) < len(data):
        more = s.recv(65536)
        if not more:
            break
        got += more
    s.close()
    print(f"read {len(got)} bytes", flush=True)
    return 0 if got == data else 1


if __name__ == "__main__":
    sys.exit(main())
