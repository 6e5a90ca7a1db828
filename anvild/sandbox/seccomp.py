"""The seccomp program every sandboxed command runs under, as classic BPF for `bwrap --seccomp FD`.

Namespaces do not cover everything (docs/sandbox-escapes.md). Denied: `socket` for AF_VSOCK,
AF_NETLINK, AF_PACKET (EAFNOSUPPORT; the family is compared on its low 32 bits only); io_uring
setup/enter/register (ENOSYS); ioctl TIOCSTI and TIOCLINUX (EPERM); keyctl, add_key, request_key
(EPERM: keyrings are not namespaced). Everything else is allowed. Native architecture only: a
call through another ABI kills the process (no 32-bit binaries in the sandbox).
Compiled by libseccomp through `pyseccomp`; without it the sandboxed policies refuse
(`SandboxUnavailable`: no seccomp, no sandboxed mode). Built once per process and cached.
"""

from __future__ import annotations

import errno
import functools
import os
import socket
from typing import Any, Final

from anvild.sandbox import SandboxUnavailable

DENIED_SOCKET_FAMILIES: Final = {
    "AF_NETLINK": 16,
    "AF_PACKET": 17,
    "AF_VSOCK": 40,
}
"""Socket families no sandboxed command may open (numbers from linux/socket.h)."""

DENIED_SYSCALLS: Final = ("io_uring_setup", "io_uring_enter", "io_uring_register")
KEYRING_SYSCALLS: Final = ("keyctl", "add_key", "request_key")
TIOCSTI: Final = 0x5412
TIOCLINUX: Final = 0x541C

INSTALL_HINT: Final = (
    "install libseccomp (Debian/Ubuntu: `apt-get install libseccomp2`; Fedora: `dnf install "
    "libseccomp`), which the sandbox needs to build its seccomp filter"
)

# Values checked against the kernel headers, not taken from Python's socket module (which lacks
# AF_VSOCK on some builds).
assert getattr(socket, "AF_NETLINK", 16) == 16
assert getattr(socket, "AF_PACKET", 17) == 17


def _load_binding() -> Any:
    try:
        import pyseccomp  # type: ignore[import-untyped]
    except (ImportError, OSError, RuntimeError) as exc:
        # pyseccomp raises RuntimeError("Unable to find libseccomp") at import when the shared
        # library is missing.
        raise SandboxUnavailable(
            f"The sandbox's seccomp filter cannot be built ({exc}): {INSTALL_HINT}."
        ) from exc
    return pyseccomp


def _build(sc: Any) -> bytes:
    low32: Final = 0xFFFFFFFF
    program = sc.SyscallFilter(sc.ALLOW)
    for family in DENIED_SOCKET_FAMILIES.values():
        program.add_rule(
            sc.ERRNO(errno.EAFNOSUPPORT), "socket", sc.Arg(0, sc.MASKED_EQ, low32, family)
        )
    for name in DENIED_SYSCALLS:
        program.add_rule(sc.ERRNO(errno.ENOSYS), name)
    for request in (TIOCSTI, TIOCLINUX):
        program.add_rule(sc.ERRNO(errno.EPERM), "ioctl", sc.Arg(1, sc.MASKED_EQ, low32, request))
    for name in KEYRING_SYSCALLS:
        program.add_rule(sc.ERRNO(errno.EPERM), name)
    read_end, write_end = os.pipe()
    try:
        with os.fdopen(write_end, "wb", closefd=True) as sink:
            program.export_bpf(sink)
        chunks: list[bytes] = []
        while chunk := os.read(read_end, 65536):
            chunks.append(chunk)
    finally:
        os.close(read_end)
    return b"".join(chunks)


@functools.cache
def filter_bpf() -> bytes:
    """The compiled program (an array of `struct sock_filter`). Raises `SandboxUnavailable` when
    libseccomp is missing or refuses a rule."""
    sc = _load_binding()
    try:
        bpf = _build(sc)
    except OSError as exc:
        raise SandboxUnavailable(
            f"libseccomp could not compile the sandbox's seccomp filter ({exc}); {INSTALL_HINT}."
        ) from exc
    if not bpf or len(bpf) % 8:
        raise SandboxUnavailable(
            f"libseccomp produced a malformed seccomp program ({len(bpf)} bytes); {INSTALL_HINT}."
        )
    return bpf


def filter_fd() -> int:
    """A fresh descriptor positioned at the start of the program, for `bwrap --seccomp FD`. The
    caller hands it to the child (it is not close-on-exec's business: pass_fds) and closes it."""
    bpf = filter_bpf()
    fd = os.memfd_create("anvil-seccomp", os.MFD_CLOEXEC)
    try:
        view = memoryview(bpf)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


__all__ = ["DENIED_SOCKET_FAMILIES", "DENIED_SYSCALLS", "filter_bpf", "filter_fd"]
