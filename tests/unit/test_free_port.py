"""``drl.process.free_port`` picks rendezvous and server ports below the kernel's ephemeral range, where no
outgoing connection can take them between the choice and the bind (a learner group's restart once found its
port so taken)."""

import socket

from drl.process import _ephemeral_low, free_port


def test_free_ports_lie_below_the_ephemeral_range_and_can_be_bound():
    low = _ephemeral_low()
    ports = {free_port() for _ in range(50)}
    assert all(p < low for p in ports), sorted(p for p in ports if p >= low)
    assert len(ports) > 40
    for port in list(ports)[:5]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_port_held_by_a_listener_is_not_chosen():
    held = []
    try:
        for _ in range(200):
            s = socket.socket()
            s.bind(("127.0.0.1", free_port()))
            s.listen()
            held.append(s)
        taken = {s.getsockname()[1] for s in held}
        assert not taken & {free_port() for _ in range(100)}
    finally:
        for s in held:
            s.close()
