"""The fault campaign's "hosts": one network namespace per node, each with a veth to a
bridge in the root namespace (where the clients run), on a private /24 that the run picks
and removes. Link cuts are tc filters on a node's own veth egress (htb with a class whose
leaf is a 0-packet pfifo: this kernel has no netem or prio qdisc and the machine has no
iptables), so cutting A->B alone is an asymmetric partition and both directions a
symmetric one; the clients' traffic is never cut.

Names carry a per-run token (interface names are at most 15 characters) and every run
writes a state file under STATE_DIR with its pid, so a later run removes what a crashed
run left behind (sweep_leftovers) and parallel runs never collide.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

STATE_DIR = Path("/tmp/kraft-chaos-net")
_CUT_CLASS = "1:2"


class NetError(RuntimeError):
    pass


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(args), capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise NetError(f"{' '.join(args)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def unsupported_reason() -> str | None:
    """Why namespaces cannot be used here (not root, no `ip netns`), or None."""
    if os.geteuid() != 0:
        return "the fault campaign needs root (network namespaces, loop mounts)"
    for tool in ("ip", "tc", "mkfs.ext4", "losetup", "mount"):
        if subprocess.run(["which", tool], capture_output=True).returncode != 0:
            return f"{tool} is not installed"
    probe = f"kcprobe{os.getpid() % 100000}"
    if sh("ip", "netns", "add", probe, check=False).returncode != 0:
        return "cannot create a network namespace (ip netns add failed)"
    sh("ip", "netns", "del", probe, check=False)
    return None


@dataclass
class Net:
    """A bridge, and one namespace + veth + IP per node id."""

    token: str
    subnet: str  # "10.a.b" (a /24)
    namespaces: dict[int, str] = field(default_factory=dict)
    loops: list[tuple[str, Path]] = field(default_factory=list)  # (loop device, mountpoint)

    @property
    def bridge(self) -> str:
        return f"kc{self.token}br"

    def ip(self, node_id: int) -> str:
        return f"{self.subnet}.{10 + node_id}"

    def ns(self, node_id: int) -> str:
        return self.namespaces[node_id]

    # -- set-up and tear-down ---------------------------------------------------------------

    @classmethod
    def create(cls, node_ids: list[int]) -> Net:
        sweep_leftovers()
        token = os.urandom(3).hex()
        used = sh("ip", "-o", "-4", "addr").stdout
        # A /24 nobody on this machine uses: 10.[200-249].x, chosen from the token.
        n = int(token, 16)
        subnet = ""
        for k in range(256):
            cand = f"10.{200 + (n + k) % 50}.{(n >> 8) % 256}"
            if f" {cand}." not in used:
                subnet = cand
                break
        net = cls(token, subnet)
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        net._save(os.getpid())
        try:
            sh("ip", "link", "add", net.bridge, "type", "bridge")
            sh("ip", "addr", "add", f"{subnet}.1/24", "dev", net.bridge)
            sh("ip", "link", "set", net.bridge, "up")
            for node in node_ids:
                net._add_host(node)
        except BaseException:
            net.destroy()
            raise
        return net

    def _add_host(self, node: int) -> None:
        ns = f"kc{self.token}n{node}"
        host_if, peer = f"kc{self.token}v{node}", f"kc{self.token}p{node}"
        sh("ip", "netns", "add", ns)
        self.namespaces[node] = ns
        self._save(os.getpid())
        sh("ip", "link", "add", host_if, "type", "veth", "peer", "name", peer)
        sh("ip", "link", "set", host_if, "master", self.bridge)
        sh("ip", "link", "set", host_if, "up")
        sh("ip", "link", "set", peer, "netns", ns)
        run = ("ip", "netns", "exec", ns)
        sh(*run, "ip", "link", "set", peer, "name", "eth0")
        sh(*run, "ip", "addr", "add", f"{self.ip(node)}/24", "dev", "eth0")
        sh(*run, "ip", "link", "set", "eth0", "up")
        sh(*run, "ip", "link", "set", "lo", "up")
        # htb: class 1:1 passes everything (the default), 1:2 drops everything; a cut is a
        # u32 filter steering one destination to 1:2.
        sh(*run, "tc", "qdisc", "add", "dev", "eth0", "root", "handle", "1:", "htb",
           "default", "1", "r2q", "100000")  # fmt: skip
        for cls_id in ("1:1", _CUT_CLASS):
            sh(*run, "tc", "class", "add", "dev", "eth0", "parent", "1:", "classid", cls_id,
               "htb", "rate", "10gbit")  # fmt: skip
        sh(*run, "tc", "qdisc", "add", "dev", "eth0", "parent", _CUT_CLASS, "handle", "20:",
           "pfifo", "limit", "0")  # fmt: skip

    def destroy(self) -> None:
        """Remove everything of this run; safe to call twice and after a partial set-up."""
        for node, ns in list(self.namespaces.items()):
            for pid in sh("ip", "netns", "pids", ns, check=False).stdout.split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), 9)  # our own node processes, left running
            sh("ip", "netns", "del", ns, check=False)
            sh("ip", "link", "del", f"kc{self.token}v{node}", check=False)
        self.namespaces.clear()
        for loop, mnt in self.loops:
            if sh("umount", str(mnt), check=False).returncode != 0:
                sh("umount", "-l", str(mnt), check=False)
            # On a device still busy (a lazy unmount) the kernel sets autoclear instead: it
            # detaches once the last user lets go.
            sh("losetup", "-d", loop, check=False)
        self.loops.clear()
        sh("ip", "link", "del", self.bridge, check=False)
        with contextlib.suppress(OSError):
            (STATE_DIR / f"{self.token}.json").unlink()

    def _save(self, pid: int) -> None:
        state = {
            "pid": pid, "token": self.token, "bridge": self.bridge,
            "namespaces": self.namespaces,
            "loops": [[loop, str(m)] for loop, m in self.loops],
        }  # fmt: skip
        path = STATE_DIR / f"{self.token}.json"
        path.write_text(json.dumps(state), encoding="utf-8")

    # -- link cuts --------------------------------------------------------------------------

    def cut(self, src: int, dst: int) -> None:
        """Drop every IP packet from `src` to `dst` (one direction)."""
        sh("ip", "netns", "exec", self.ns(src), "tc", "filter", "add", "dev", "eth0",
           "parent", "1:", "protocol", "ip", "prio", "1", "u32", "match", "ip", "dst",
           f"{self.ip(dst)}/32", "flowid", _CUT_CLASS)  # fmt: skip

    def heal_all(self) -> None:
        for ns in self.namespaces.values():
            sh("ip", "netns", "exec", ns, "tc", "filter", "del", "dev", "eth0", "parent", "1:",
               check=False)  # fmt: skip

    # -- a small filesystem for one node's data ---------------------------------------------

    def small_disk(self, image: Path, mountpoint: Path, size_mb: int) -> None:
        """An ext4 image of `size_mb` (no root reserve: the nodes run as root) mounted at
        `mountpoint`, before the node starts so its namespace sees it."""
        with open(image, "wb") as f:
            f.truncate(size_mb << 20)
        sh("mkfs.ext4", "-q", "-F", "-m", "0", str(image))
        loop = sh("losetup", "--find", "--show", str(image)).stdout.strip()
        mountpoint.mkdir(parents=True, exist_ok=True)
        self.loops.append((loop, mountpoint))
        self._save(os.getpid())
        sh("mount", loop, str(mountpoint))


def fill_disk(mountpoint: Path) -> Path:
    """Take every free block of the filesystem at `mountpoint` (one file); returns it."""
    ballast = mountpoint / "chaos-ballast"
    st = os.statvfs(mountpoint)
    free = st.f_bavail * st.f_frsize
    fd = os.open(ballast, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with contextlib.suppress(OSError):
            os.posix_fallocate(fd, 0, max(free, 4096))
        # fallocate stops short of the last blocks: top up until ENOSPC.
        chunk = b"\0" * (1 << 16)
        with contextlib.suppress(OSError):
            os.lseek(fd, 0, os.SEEK_END)
            while True:
                os.write(fd, chunk)
    finally:
        os.close(fd)
    return ballast


def free_disk(mountpoint: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        (mountpoint / "chaos-ballast").unlink()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_leftovers() -> None:
    """Remove the namespaces, bridges and loop mounts of runs whose process is gone."""
    if not STATE_DIR.is_dir():
        return
    for path in STATE_DIR.glob("*.json"):
        try:
            state = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if _pid_alive(int(state.get("pid", 0))):
            continue
        net = Net(state["token"], "")
        net.namespaces = {int(k): v for k, v in state.get("namespaces", {}).items()}
        net.loops = [(loop, Path(m)) for loop, m in state.get("loops", [])]
        net.destroy()
