"""Loopback ports for broker processes that must be told their ports before they start.

`python3 ports.py N` prints N ports; the cluster scripts import `free_ports`. The same rule as
crates/raft/tests/ports/mod.rs: a port found by binding port 0 and letting go can be handed out
twice, and lies in the ephemeral range, where any outgoing connection (a client's, a test's
beside this one) may take it before a node binds it or while a killed node is down. So the
ports come from below the ephemeral range, each bound (all at once) to prove it free.
"""
import os, random, socket, sys, time


def ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_ports(n):
    low, high = 10000, max(ephemeral_low(), 10001)
    candidates = list(range(low, high))
    random.Random(os.getpid() ^ time.time_ns()).shuffle(candidates)
    held = []
    try:
        for port in candidates:
            if len(held) == n:
                break
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.close()
                continue
            held.append(s)
        if len(held) < n:
            raise SystemExit(f"ports.py: {n} free loopback ports below {high} not found")
        return [s.getsockname()[1] for s in held]
    finally:
        for s in held:
            s.close()


if __name__ == "__main__":
    print(" ".join(str(p) for p in free_ports(int(sys.argv[1]))))
