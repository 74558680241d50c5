"""Free loopback TCP ports."""

import socket


def free_port(avoid=()):
    """A port the kernel just handed out on 127.0.0.1 (and not one of avoid). Another process
    may take it before it is bound again: callers that start a server retry on 'in use'."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in avoid:
            return port


def free_ports(n):
    """n distinct free ports."""
    out = []
    while len(out) < n:
        out.append(free_port(avoid=out))
    return out


def port_open(port, host="127.0.0.1", timeout=1.0):
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
