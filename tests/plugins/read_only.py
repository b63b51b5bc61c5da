"""A process that meets a folder it cannot write, for real (run as root):
bound read-only in a mount namespace of its own (``read_only``), or made
unwritable to it as to another user, by running it without the
capabilities that let root write anywhere (``as_another_user``)."""
import os
import shutil

from helpers import system_program_missing

_BIND_READ_ONLY = ('while [ "$1" != -- ]; do mount --bind -o ro "$1" "$1" || exit 97; '
                   'shift; done; shift; exec "$@"')


def _needs(program):
    if os.geteuid() != 0:
        system_program_missing("needs root (a mount namespace of its own, or capabilities "
                               "to drop)")
    if shutil.which(program) is None:
        system_program_missing(f"needs {program} (Debian package util-linux)")


def read_only(folders, argv):
    """``argv`` run with each of ``folders`` bound read-only over itself, in a
    private mount namespace (``unshare -m``): the rest of the system sees no change."""
    _needs("unshare")
    return ["unshare", "-m", "sh", "-c", _BIND_READ_ONLY, "sh", *map(str, folders), "--",
            *map(str, argv)]


def as_another_user(argv):
    """``argv`` run as root without ``CAP_DAC_OVERRIDE`` and
    ``CAP_DAC_READ_SEARCH``: a folder of another user (mode 755) is then
    unwritable to it, as to any other user."""
    _needs("setpriv")
    dropped = "-dac_override,-dac_read_search"
    return ["setpriv", f"--bounding-set={dropped}", f"--inh-caps={dropped}",
            *map(str, argv)]
