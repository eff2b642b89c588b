"""Connects, exchanges one message with an echo server, and closes, COUNT times in a
row; prints "cycles=COUNT ok=N" and leaves with status 0 when every echo was exact."""
import argparse
import hashlib
import sys

import endpoints


def main() -> int:
    p = argparse.ArgumentParser()
    endpoints.add(p)
    p.add_argument("--count", type=int, required=True)
    args = p.parse_args()
    ok = 0
    for i in range(args.count):
        msg = b"c" + hashlib.sha256(str(i).encode()).digest() * 2
        s = endpoints.connect(args)
        try:
            s.sendall(msg)
            got = b""
            while len(got) < len(msg):
                chunk = s.recv(len(msg) - len(got))
                if not chunk:
                    break
                got += chunk
            if got == msg:
                ok += 1
            else:
                print(f"cycle {i}: {len(got)} bytes back, {'equal' if got == msg else 'wrong'}",
                      flush=True)
        finally:
            s.close()
    print(f"cycles={args.count} ok={ok}", flush=True)
    return 0 if ok == args.count else 1


if __name__ == "__main__":
    sys.exit(main())
