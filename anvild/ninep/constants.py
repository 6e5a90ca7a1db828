"""Numeric constants of 9P2000, 9P2000.u and 9P2000.L.

Values come from the Plan 9 manual (intro(5), open(5), stat(5)), the 9P2000.u additions and the
9P2000.L definitions that Linux v9fs (`include/net/9p/9p.h`) and diod (`libnpfs/9p.h`) share.
Pure data: no I/O, no imports from the project.
"""

from __future__ import annotations

import enum

# intro(5): NOTAG is the tag of Tversion; NOFID means "no fid" (Tattach afid without auth).
NOTAG = 0xFFFF
NOFID = 0xFFFFFFFF
# 9P2000.u / .L: "no numeric uid" in n_uname, n_uid, n_gid, n_muid.
NONUNAME = 0xFFFFFFFF
# walk(5): at most MAXWELEM names in one Twalk (and qids in one Rwalk).
MAXWELEM = 16
# read(5)/write(5): size[4] type[1] tag[2] fid[4] offset[8] count[4] = 23, rounded to 24 by
# plan9port (IOHDRSZ). A read or write carries at most msize - IOHDRSZ data bytes.
IOHDRSZ = 24
# 9P2000.L Treaddir/Rreaddir header allowance used by Linux (P9_READDIRHDRSZ).
READDIRHDRSZ = 24
# Smallest msize we accept in Tversion (lib9p srv.c refuses below 256 as well).
MIN_MSIZE = 256

# Version strings (version(5)).
VERSION_9P2000 = "9P2000"
VERSION_9P2000_U = "9P2000.u"
VERSION_9P2000_L = "9P2000.L"
VERSION_UNKNOWN = "unknown"


class Dialect(enum.Enum):
    """The protocol dialect negotiated by Tversion; it selects message layouts."""

    P9P2000 = VERSION_9P2000
    P9P2000_U = VERSION_9P2000_U
    P9P2000_L = VERSION_9P2000_L


# stat(5) mode bits (high bits of the permission word).
DMDIR = 0x80000000
DMAPPEND = 0x40000000
DMEXCL = 0x20000000
DMMOUNT = 0x10000000
DMAUTH = 0x08000000
DMTMP = 0x04000000
# 9P2000.u additions.
DMSYMLINK = 0x02000000
DMDEVICE = 0x00800000
DMNAMEDPIPE = 0x00200000
DMSOCKET = 0x00100000
DMSETUID = 0x00080000
DMSETGID = 0x00040000

# intro(5) qid types (high byte of the mode word, shifted).
QTDIR = 0x80
QTAPPEND = 0x40
QTEXCL = 0x20
QTMOUNT = 0x10
QTAUTH = 0x08
QTTMP = 0x04
QTSYMLINK = 0x02
QTFILE = 0x00

# open(5) modes of Topen / Tcreate.
OREAD = 0
OWRITE = 1
ORDWR = 2
OEXEC = 3
OTRUNC = 0x10
OCEXEC = 0x20
ORCLOSE = 0x40

# 9P2000.L Tlopen / Tlcreate flags (P9_DOTL_*; the Linux generic O_* values).
L_O_RDONLY = 0o0
L_O_WRONLY = 0o1
L_O_RDWR = 0o2
L_O_ACCMODE = 0o3
L_O_CREAT = 0o100
L_O_EXCL = 0o200
L_O_NOCTTY = 0o400
L_O_TRUNC = 0o1000
L_O_APPEND = 0o2000
L_O_NONBLOCK = 0o4000
L_O_DSYNC = 0o10000
L_O_FASYNC = 0o20000
L_O_DIRECT = 0o40000
L_O_LARGEFILE = 0o100000
L_O_DIRECTORY = 0o200000
L_O_NOFOLLOW = 0o400000
L_O_NOATIME = 0o1000000
L_O_CLOEXEC = 0o2000000
L_O_SYNC = 0o4000000

# 9P2000.L Tgetattr request_mask / Rgetattr valid bits (P9_GETATTR_*).
GETATTR_MODE = 0x00000001
GETATTR_NLINK = 0x00000002
GETATTR_UID = 0x00000004
GETATTR_GID = 0x00000008
GETATTR_RDEV = 0x00000010
GETATTR_ATIME = 0x00000020
GETATTR_MTIME = 0x00000040
GETATTR_CTIME = 0x00000080
GETATTR_INO = 0x00000100
GETATTR_SIZE = 0x00000200
GETATTR_BLOCKS = 0x00000400
GETATTR_BTIME = 0x00000800
GETATTR_GEN = 0x00001000
GETATTR_DATA_VERSION = 0x00002000
GETATTR_BASIC = 0x000007FF
GETATTR_ALL = 0x00003FFF

# 9P2000.L Tunlinkat flags (P9_DOTL_AT_REMOVEDIR): rmdir(2) rather than unlink(2).
AT_REMOVEDIR = 0x200

# 9P2000.L Tsetattr valid bits (P9_SETATTR_*).
SETATTR_MODE = 0x00000001
SETATTR_UID = 0x00000002
SETATTR_GID = 0x00000004
SETATTR_SIZE = 0x00000008
SETATTR_ATIME = 0x00000010
SETATTR_MTIME = 0x00000020
SETATTR_CTIME = 0x00000040
SETATTR_ATIME_SET = 0x00000080
SETATTR_MTIME_SET = 0x00000100

# Linux st_mode file type bits, used in Rgetattr mode and Tlcreate/Tmkdir mode.
S_IFMT = 0o170000
S_IFDIR = 0o040000
S_IFREG = 0o100000
S_IFLNK = 0o120000

# Linux dirent d_type values carried in Rreaddir entries.
DT_DIR = 4
DT_REG = 8
DT_LNK = 10

# 9P2000.L lock types and statuses (Tlock / Tgetlock).
LOCK_TYPE_RDLCK = 0
LOCK_TYPE_WRLCK = 1
LOCK_TYPE_UNLCK = 2
LOCK_SUCCESS = 0
LOCK_BLOCKED = 1
LOCK_ERROR = 2
LOCK_GRACE = 3
