"""Why the folder of a SQLite database cannot hold its files, in one sentence.

SQLite writes beside the database (its ``-wal`` and ``-shm`` files, and
``db upgrade``'s ``-upgrade`` lock): a folder that is missing, on a
read-only file system, or not writable by the process's user (a root-owned
volume, a container run with another ``--user``) stops it.
"""
import errno
import os


def folder_problem(path, error):
    """What ``error`` (an ``OSError`` making a file beside the SQLite
    database at ``path``) means, and what to do, as a sentence."""
    folder = os.path.dirname(os.path.abspath(path))
    where = f"the SQLite database's folder {folder}"
    if error.errno == errno.ENOENT:
        return (f"{where} does not exist: create it, writable by this user "
                f"(uid {os.geteuid()}), or set PLANTSTORE_DATABASE_URL to a file in one")
    if error.errno == errno.EROFS:
        return (f"{where} is on a read-only file system: mount a writable volume there, "
                "or set PLANTSTORE_DATABASE_URL to a file on one")
    if error.errno in (errno.EACCES, errno.EPERM):
        return (f"{where} is not writable by this user (uid {os.geteuid()}): make it "
                f"theirs (chown {os.geteuid()} {folder}), or run as its owner")
    return f"{where} cannot hold the database's files: {error.strerror}"
