"""A client that writes its request at once and reads the answer only after a pause: a
server that answers meanwhile does so before this client could come to its rendezvous.
Prints what it read; exits 1 when that is not the echo of what it wrote."""
import argparse
import sys
import time

import endpoints


def main() -> int:
    p = argparse.ArgumentParser()
    endpoints.add(p)
    p.add_argument("--pause", type=float, default=0.5)
    p.add_argument("--bytes", type=int, default=3000)
    args = p.parse_args()
    data = bytes((7 * i + 1) % 251 for i in range(args.bytes))
    s = endpoints.connect(args)
    s.sendall(data)
    time.sleep(args.pause)
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
