"""An epoll echo server on asyncio (one thread), the event-loop pattern of servers.

Echoes every connection's bytes until its client closes.  A connection whose first
bytes are "CANCEL" is a cancel request (16 bytes, as a query cancel is): it is counted,
nothing is answered, and it is closed.  Prints "listening" once it serves, and on
SIGTERM a summary line "cancels=N bad_cancels=B connections=C echoed=E" before leaving.
"""
import argparse
import asyncio
import os
import signal
import sys

import endpoints

CANCEL = b"CANCEL"
CANCEL_SIZE = 16

stats = {"cancels": 0, "bad_cancels": 0, "connections": 0, "echoed": 0}


async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    stats["connections"] += 1
    try:
        first = await reader.read(65536)
        if first.startswith(CANCEL):
            while len(first) < CANCEL_SIZE:
                more = await reader.read(CANCEL_SIZE - len(first))
                if not more:
                    break
                first += more
            if len(first) == CANCEL_SIZE and first[6:].isdigit():
                stats["cancels"] += 1
            else:
                stats["bad_cancels"] += 1
            return
        data = first
        while data:
            writer.write(data)
            stats["echoed"] += len(data)
            await writer.drain()
            data = await reader.read(65536)
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def main() -> None:
    p = argparse.ArgumentParser()
    endpoints.add(p)
    p.add_argument("--mode", help="octal mode of the unix socket file")
    args = p.parse_args()
    if args.unix:
        server = await asyncio.start_unix_server(serve, path=args.unix)
        if args.mode:
            os.chmod(args.unix, int(args.mode, 8))
    else:
        host, port = args.tcp.rsplit(":", 1)
        server = await asyncio.start_server(serve, host=host, port=int(port), reuse_address=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print("listening", flush=True)
    async with server:
        await stop.wait()
    print(" ".join(f"{k}={v}" for k, v in stats.items()), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
    sys.exit(0)
