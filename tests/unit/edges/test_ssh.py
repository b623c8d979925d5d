"""cli.edges.ssh against a real sshd on loopback (tests/sshd.py): pinned host keys, what is
sent before the key is known, stdin, both output streams, the status, timeouts, bounds."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import paramiko
import paramiko.packet
import pytest

from cli.edges import ssh
from tests.sshd import Sshd, keygen, missing_reason, running_sshd

pytestmark = pytest.mark.skipif(missing_reason() is not None, reason=str(missing_reason()))

# SSH message types of the key exchange and the transport itself (RFC 4250, 4.1.2).
KEX_ONLY = {1, 2, 3, 4, 20, 21, *range(30, 50)}


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    with running_sshd(tmp_path_factory.mktemp("sshd")) as server:
        yield server


def host_key(server: Sshd) -> paramiko.PKey:
    return paramiko.Ed25519Key(filename=str(server.directory / "host_ed25519"))


def keygen_fingerprint(public_key_file: Path) -> str:
    """What ssh-keygen -lf prints for the key: the fingerprint as an operator sees it."""
    line = subprocess.run(
        ["ssh-keygen", "-lf", str(public_key_file)], capture_output=True, text=True, check=True
    ).stdout
    return line.split()[1]


@pytest.fixture
def client(sshd: Sshd) -> Iterator[paramiko.SSHClient]:
    session = ssh.connect(sshd.address, sshd.port, "root", sshd.client_key, host_key(sshd), 5)
    yield session
    session.close()


def test_stdin_goes_in_and_both_streams_and_the_status_come_back(
    client: paramiko.SSHClient,
) -> None:
    command = 'sh -c \'read line; printf "out:%s" "$line"; printf err >&2; exit 3\''
    result = ssh.execute(client, command, b"hello\n", 10)
    assert result == ssh.Result(3, b"out:hello", b"err")


def test_large_output_on_both_streams_arrives_whole(client: paramiko.SSHClient) -> None:
    script = "head -c 3000000 /dev/zero; head -c 2500000 /dev/zero >&2; printf end\n"
    result = ssh.run(client, script, 30)
    assert (result.status, len(result.stdout), len(result.stderr)) == (0, 3000003, 2500000)
    assert result.stdout.endswith(b"\0end")


def test_a_large_stdin_reaches_the_command(client: paramiko.SSHClient) -> None:
    data = bytes(range(256)) * 4000  # over 1 MB: more than one window
    result = ssh.execute(client, "cat", data, 30)
    assert result.status == 0 and result.stdout == data


def test_a_command_that_hangs_is_cut_off_at_its_deadline(client: paramiko.SSHClient) -> None:
    started = time.monotonic()
    with pytest.raises(ssh.CommandTimeoutError):
        ssh.execute(client, "sleep 30", b"", 1)
    assert 0.9 < time.monotonic() - started < 3


def test_run_says_a_command_did_not_finish(client: paramiko.SSHClient) -> None:
    with pytest.raises(ssh.NodeError) as raised:
        ssh.run(client, "sleep 30\n", 0.5)
    assert str(raised.value) == "a command on the node did not finish within 0.5 s"


def test_output_past_the_limit_is_refused(client: paramiko.SSHClient) -> None:
    with pytest.raises(ssh.OutputLimitError) as raised:
        ssh.execute(client, "head -c 5000 /dev/zero >&2", b"", 10, limit=1000)
    assert str(raised.value) == "the command printed more than 1000 bytes on stderr"
    result = ssh.execute(client, "head -c 1000 /dev/zero", b"", 10, limit=1000)
    assert len(result.stdout) == 1000


def test_waiting_for_output_does_not_poll(
    client: paramiko.SSHClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = 0
    real = paramiko.Channel.recv_ready

    def recv_ready(self: paramiko.Channel) -> bool:
        nonlocal calls
        calls += 1
        return bool(real(self))

    monkeypatch.setattr(paramiko.Channel, "recv_ready", recv_ready)
    result = ssh.execute(client, "sleep 1; echo done", b"", 10)
    assert result.stdout == b"done\n"
    assert calls < 20  # a 5 ms poll would ask some 200 times


def test_a_closed_session_is_said_so(sshd: Sshd) -> None:
    session = ssh.connect(sshd.address, sshd.port, "root", sshd.client_key, host_key(sshd), 5)
    session.close()
    with pytest.raises(ssh.NodeError) as raised:
        ssh.run(session, "true\n", 5)
    assert str(raised.value) == "the SSH connection closed"


def test_the_offered_key_is_the_nodes_and_only_key_exchange_is_sent(
    sshd: Sshd, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[int] = []
    real = paramiko.packet.Packetizer.send_message

    def send_message(self: paramiko.packet.Packetizer, data: paramiko.Message) -> None:
        sent.append(data.asbytes()[0])
        real(self, data)

    monkeypatch.setattr(paramiko.packet.Packetizer, "send_message", send_message)
    key = ssh.offered_host_key(sshd.address, sshd.port, 5)
    assert ssh.fingerprint(key) == keygen_fingerprint(sshd.directory / "host_ed25519.pub")
    assert sent and set(sent) <= KEX_ONLY


def test_a_login_pinned_to_another_key_is_refused_naming_both(sshd: Sshd, tmp_path: Path) -> None:
    keygen(tmp_path / "other")
    other = paramiko.Ed25519Key(filename=str(tmp_path / "other"))
    with pytest.raises(ssh.NodeError) as raised:
        ssh.connect(sshd.address, sshd.port, "root", sshd.client_key, other, 5)
    offered = keygen_fingerprint(sshd.directory / "host_ed25519.pub")
    pinned = keygen_fingerprint(tmp_path / "other.pub")
    assert str(raised.value) == (
        "the node's host key changed between the check and the login: it offered"
        f" {offered} after {pinned}; refused"
    )


def test_a_login_with_no_key_pinned_refuses_and_shows_the_offered_key(sshd: Sshd) -> None:
    with pytest.raises(ssh.UnknownHostKeyError) as raised:
        ssh.login(sshd.address, sshd.port, "root", sshd.client_key, [], 5)
    fingerprint = keygen_fingerprint(sshd.directory / "host_ed25519.pub")
    assert ssh.fingerprint(raised.value.key) == fingerprint
    reason = ssh.describe_failure(
        raised.value, sshd.address, sshd.port, "root", Path("/x/known_hosts"), 5
    )
    assert reason == (
        f"host key not in /x/known_hosts: the node offered {fingerprint}; "
        "check it and add it (ctl onboard-node does)"
    )


def test_a_known_hosts_line_added_is_found_again(sshd: Sshd, tmp_path: Path) -> None:
    known_hosts = tmp_path / "known_hosts"
    kind, blob = sshd.host_key_line.split()[:2]
    known_hosts.write_text(f"# the fleet\nother.example {kind} {blob}")
    known_hosts.chmod(0o640)
    ssh.add_known_host(known_hosts, sshd.address, sshd.port, host_key(sshd))
    assert known_hosts.read_text() == (
        f"# the fleet\nother.example {kind} {blob}\n[127.0.0.1]:{sshd.port} {kind} {blob}\n"
    )
    assert known_hosts.stat().st_mode & 0o777 == 0o640
    (found,) = ssh.known_keys(known_hosts, sshd.address, sshd.port)
    assert found == host_key(sshd)
    assert ssh.known_keys(known_hosts, sshd.address, 22) == []


def test_a_node_on_port_22_is_named_without_brackets() -> None:
    assert ssh.known_hosts_name("10.0.0.5", 22) == "10.0.0.5"
    assert ssh.known_hosts_name("10.0.0.5", 2222) == "[10.0.0.5]:2222"


def test_known_hosts_finds_what_paramiko_finds_hashed_names_and_ports_included(
    tmp_path: Path,
) -> None:
    ed_a, ed_b = (keygen(tmp_path / name).split()[:2] for name in ("a", "b"))
    ecdsa = paramiko.ECDSAKey.generate()
    hashed = paramiko.HostKeys.hash_host("10.0.0.7")
    lines = [
        "# the fleet",
        f"10.0.0.5,node-5 {ed_a[0]} {ed_a[1]}",
        f"[10.0.0.5]:2222 {ed_b[0]} {ed_b[1]}",
        f"10.0.0.5 {ecdsa.get_name()} {ecdsa.get_base64()}",
        f"10.0.0.5 {ed_b[0]} {ed_b[1]}",  # a second key of a type: the first is pinned
        f"{hashed} {ed_b[0]} {ed_b[1]}",
        "",
    ]
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("\n".join(lines))
    theirs = paramiko.HostKeys(str(known_hosts))
    # A line whose key is not base64, which paramiko's load raises on, is skipped.
    known_hosts.write_text("\n".join([*lines, "10.0.0.5 ssh-ed25519 not-base64!"]))
    ours = ssh.load_known_hosts(known_hosts)

    def pins(keys: Iterable[paramiko.PKey]) -> set[tuple[str, str]]:
        return {(key.get_name(), key.get_base64()) for key in keys}

    for name in ("10.0.0.5", "node-5", "[10.0.0.5]:2222", "10.0.0.7", "10.0.0.8", hashed):
        found = theirs.lookup(name)  # paramiko repeats a type's first key for each line of it
        assert pins(ours.lookup(name)) == pins([] if found is None else found.values()), name
    assert [k.get_name() for k in ssh.keys_for(ours, "10.0.0.5", 22)] == [
        "ssh-ed25519", ecdsa.get_name(),
    ]  # fmt: skip
    assert ssh.keys_for(ours, "10.0.0.5", 2222)[0].get_base64() == ed_b[1]
