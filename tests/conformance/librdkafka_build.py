"""Build librdkafka's integration test runner from the vendored release tarball.

    build = ensure_built()          # unpack, configure, make; only what is missing
    build.runner                    # <cache>/librdkafka-2.15.0/tests/test-runner

The tarball lives outside the repository, in `../shared/vendor/` beside the repo root
(`LIBRDKAFKA_VENDOR` overrides the folder). A git worktree's root is not beside `shared/`,
so the main checkout's root (git's common dir) is tried too. The build goes to
`.cache/librdkafka-<version>/` (gitignored) and is rebuilt only when its outputs are
missing; a lock lets `make test` and `make conformance` share it. Steps as
`../shared/vendor/README.md` gives them: `./configure --no-download --disable-curl
--disable-gssapi`, `make -j2 libs`, `make -C tests build`.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VERSION = "2.15.0"
TARBALL = f"librdkafka-{VERSION}.tar.gz"
# From ../shared/vendor/README.md: the archive we built against.
SHA256 = "3d8bae7411d6d8f5f9fb2969fff872eec4b63b759253ed4f473e5afbd153c7f1"
CACHE = ROOT / ".cache"
# Debian packages the build needs (the vendor README's list), and RapidJSON (headers):
# without it the runner skips the tests that read the client's statistics JSON (0053,
# 0101, 0110, 0098).
APT_DEPS = (
    "build-essential", "python3", "zlib1g-dev", "libzstd-dev", "liblz4-dev", "libssl-dev",
    "libsasl2-dev", "rapidjson-dev",
)  # fmt: skip
CONFIGURE = ("./configure", "--no-download", "--disable-curl", "--disable-gssapi")


class BuildError(Exception):
    """The runner cannot be built; the message says why and what to do."""


class VendorMissing(BuildError):
    """The vendored tarball is not there (a checkout without ../shared)."""


@dataclass(frozen=True)
class Build:
    src: Path  # the unpacked source tree, built in place

    @property
    def tests_dir(self) -> Path:
        return self.src / "tests"

    @property
    def runner(self) -> Path:
        return self.tests_dir / "test-runner"

    @property
    def test_c(self) -> Path:
        return self.tests_dir / "test.c"

    @property
    def library_path(self) -> str:
        """LD_LIBRARY_PATH for the runner (it links the freshly built shared libs)."""
        return f"{self.src / 'src'}:{self.src / 'src-cpp'}"

    def complete(self) -> bool:
        return self.runner.exists() and (self.src / "src" / "librdkafka.so.1").exists()


def vendor_candidates() -> list[Path]:
    """Where the tarball may be: LIBRDKAFKA_VENDOR (default ../shared/vendor), a relative
    path taken from the repo root and, in a git worktree, from the main checkout's root."""
    setting = Path(os.environ.get("LIBRDKAFKA_VENDOR") or "../shared/vendor").expanduser()
    if setting.is_absolute():
        return [setting]
    roots = [ROOT]
    try:
        common = subprocess.run(
            ["git", "rev-parse", "--path-format=absolute", "--git-common-dir"],
            cwd=ROOT, capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
        if Path(common).parent != ROOT:
            roots.append(Path(common).parent)
    except (OSError, subprocess.SubprocessError):
        pass  # not a git checkout: only the repo root
    return [(root / setting).resolve() for root in roots]


def find_tarball() -> Path:
    candidates = vendor_candidates()
    for folder in candidates:
        if (folder / TARBALL).is_file():
            return folder / TARBALL
    raise VendorMissing(
        f"{TARBALL} not found in {', '.join(map(str, candidates))}; set LIBRDKAFKA_VENDOR "
        "(make conformance LIBRDKAFKA_VENDOR=...) to the folder holding it"
    )


def missing_apt_packages() -> list[str]:
    missing = []
    for pkg in APT_DEPS:
        out = subprocess.run(
            ["dpkg-query", "-W", "-f=${Status}", pkg], capture_output=True, text=True
        )
        if "install ok installed" not in out.stdout:
            missing.append(pkg)
    return missing


def install_apt_deps(log: Path) -> None:
    if not shutil.which("dpkg-query"):
        if shutil.which("cc") and shutil.which("make"):
            return  # not Debian: trust the compiler that is there
        raise BuildError("no C compiler (cc) or make found, and no apt to install them")
    missing = missing_apt_packages()
    if not missing:
        return
    if os.geteuid() != 0:
        raise BuildError(
            f"missing build packages {' '.join(missing)}: apt-get install them (needs root)"
        )
    print(f"conformance: installing {' '.join(missing)} (Debian packages)", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *missing]):
        _run(cmd, ROOT, log, env=env)


def _run(cmd: list[str], cwd: Path, log: Path, env: dict[str, str] | None = None) -> None:
    with open(log, "ab") as out:
        out.write(f"\n$ {' '.join(cmd)}  (in {cwd})\n".encode())
        out.flush()
        try:
            rc = subprocess.run(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=env)
        except OSError as exc:
            raise BuildError(f"{cmd[0]}: {exc}") from None
    if rc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
        raise BuildError(f"`{' '.join(cmd)}` failed ({rc.returncode}); log {log}:\n{tail}")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _unpack(tarball: Path, dest: Path) -> None:
    """Into a temporary folder first: a half-unpacked tree is never taken for a build."""
    if _sha256(tarball) != SHA256:
        raise BuildError(f"{tarball}: sha256 differs from the vendor README's {SHA256}")
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        with tarfile.open(tarball) as tar:
            tar.extractall(tmp, filter="tar")
        (top,) = Path(tmp).iterdir()
        os.replace(top, dest)


def ensure_built(quiet: bool = False) -> Build:
    """The built runner; builds what is missing (a few minutes on 2 cores)."""
    build = Build(CACHE / f"librdkafka-{VERSION}")
    if build.complete():
        return build
    tarball = find_tarball()
    CACHE.mkdir(exist_ok=True)
    log = CACHE / f"librdkafka-{VERSION}.build.log"
    with open(CACHE / "librdkafka.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building it right now
        if build.complete():
            return build
        if not quiet:
            print(f"conformance: building librdkafka {VERSION} in {build.src} (log {log})",
                  flush=True)  # fmt: skip
        install_apt_deps(log)
        if not (build.src / "configure").exists():
            shutil.rmtree(build.src, ignore_errors=True)
            _unpack(tarball, build.src)
        if not (build.src / "Makefile.config").exists():
            _run(list(CONFIGURE), build.src, log)
        _run(["make", "-j2", "libs"], build.src, log)
        _run(["make", "-C", "tests", "build"], build.src, log)
        if not build.complete():
            raise BuildError(f"the build finished but {build.runner} is missing; log {log}")
    return build
