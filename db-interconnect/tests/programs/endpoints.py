"""The endpoint arguments every test script takes: --tcp HOST:PORT or --unix PATH; and
the flag files by which two scripts order their steps (wait_for)."""
import argparse
import os
import socket
import time

# How long a script waits for the flag file of its other side.
FLAG_WAIT_S = 10.0


def add(parser: argparse.ArgumentParser) -> None:
    g = parser.add_mutually_exclusive_group(required=True)
    g.add_argument("--tcp", metavar="HOST:PORT")
    g.add_argument("--unix", metavar="PATH")


def family_address(args):
    if args.unix:
        return socket.AF_UNIX, args.unix
    host, port = args.tcp.rsplit(":", 1)
    return socket.AF_INET, (host, int(port))


def socket_for(args) -> socket.socket:
    return socket.socket(family_address(args)[0], socket.SOCK_STREAM)


def connect_socket(s: socket.socket, args) -> None:
    s.connect(family_address(args)[1])


def connect(args) -> socket.socket:
    s = socket_for(args)
    connect_socket(s, args)
    return s


def listen(args, backlog: int = 64) -> socket.socket:
    fam, addr = family_address(args)
    s = socket.socket(fam, socket.SOCK_STREAM)
    if fam != socket.AF_UNIX:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(addr)
    s.listen(backlog)
    return s


def wait_for(path: str) -> bool:
    """Whether PATH (a flag file the other side creates) exists within FLAG_WAIT_S."""
    deadline = time.monotonic() + FLAG_WAIT_S
    while not os.path.exists(path):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True
