"""`kubegan operator` on a taken port: one line naming the port and the flag that changes it."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest
from kubegan_trainer.launch.ports import reserve_ports


@pytest.mark.parametrize("flag", ["--health-port", "--metrics-port"])
def test_a_taken_port_is_named_with_its_flag(flag: str) -> None:
    taken, other = reserve_ports(2)
    other_flag = "--metrics-port" if flag == "--health-port" else "--health-port"
    with socket.socket() as holder:
        # Bound to one address only, like CoreDNS's health endpoint on the bridge address:
        # the operator's wildcard bind still fails.
        holder.bind(("127.0.0.1", taken))
        holder.listen()
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "kubegan_operator.entry.cli",
                "operator",
                flag,
                str(taken),
                other_flag,
                str(other),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"kubegan operator: port {taken} ({flag}) is already in use by another process; "
        f"choose another with {flag} PORT"
    )
