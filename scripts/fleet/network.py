"""The fleet's network: one namespace per host on a private /24, joined by a
bridge that lives in a namespace of its own, so the machine's own network
is never touched.

Every namespace is named ``psfleet-<host>``. ``sweep`` removes those a
killed run left behind (and ends the processes still inside them: the
fleet started them all), which is why a run holds ``LOCK_PATH`` from its
start to its end: two runs never share the names.
"""
import contextlib
import ctypes
import fcntl
import os
import signal
import subprocess
import threading

PREFIX = "psfleet-"
SWITCH = PREFIX + "switch"
LOCK_PATH = "/run/lock/plantstore-fleet.lock"

_CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL("libc.so.6", use_errno=True)


def ip(*args, check=True):
    """Run ``ip ARGS``; its stdout."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def namespaces():
    """Names of the fleet's namespaces that exist now."""
    return [line.split()[0] for line in ip("netns", "list").splitlines()
            if line.startswith(PREFIX)]


def kill_inside(namespace):
    """SIGKILL every process left inside ``namespace`` (all started by a fleet run)."""
    for pid in ip("netns", "pids", namespace, check=False).split():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)


def sweep():
    """Remove every fleet namespace, ending the processes inside first."""
    for namespace in namespaces():
        kill_inside(namespace)
        ip("netns", "del", namespace, check=False)


@contextlib.contextmanager
def exclusive_run():
    """Hold the fleet lock for a run; refuse at once if another run holds it."""
    with open(LOCK_PATH, "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RuntimeError(f"another fleet run holds {LOCK_PATH}") from None
        yield


class Network:
    """Hosts ``name -> address`` on ``subnet`` (``a.b.c``, a private /24)."""

    def __init__(self, subnet, hosts):
        self.subnet = subnet
        self.hosts = dict(hosts)

    def address(self, host):
        return f"{self.subnet}.{self.hosts[host]}"

    @staticmethod
    def namespace(host):
        return PREFIX + host

    def create(self):
        """The switch with its bridge, then each host with an ``eth0`` on it."""
        ip("netns", "add", SWITCH)
        ip("-n", SWITCH, "link", "add", "br0", "type", "bridge")
        ip("-n", SWITCH, "link", "set", "br0", "up")
        for host in self.hosts:
            namespace = self.namespace(host)
            ip("netns", "add", namespace)
            ip("-n", SWITCH, "link", "add", host, "type", "veth",
               "peer", "name", "eth0", "netns", namespace)
            ip("-n", SWITCH, "link", "set", host, "master", "br0", "up")
            ip("-n", namespace, "link", "set", "lo", "up")
            ip("-n", namespace, "addr", "add", f"{self.address(host)}/24", "dev", "eth0")
            ip("-n", namespace, "link", "set", "eth0", "up")

    def destroy(self):
        """End what runs inside the hosts and remove every namespace."""
        for host in self.hosts:
            kill_inside(self.namespace(host))
        for host in self.hosts:
            ip("netns", "del", self.namespace(host), check=False)
        ip("netns", "del", SWITCH, check=False)

    def command(self, host, argv):
        """``argv`` run inside ``host``'s namespace."""
        return ["ip", "netns", "exec", self.namespace(host), *argv]

    def enter(self, host):
        """Move the calling thread (only it) into ``host``'s namespace:
        sockets it opens from now on belong to that host."""
        fd = os.open(f"/run/netns/{self.namespace(host)}", os.O_RDONLY)
        try:
            if _libc.setns(fd, _CLONE_NEWNET) != 0:
                errno = ctypes.get_errno()
                raise OSError(errno, f"setns into {host}: {os.strerror(errno)}")
        finally:
            os.close(fd)

    def run_on(self, host, function, *args, timeout=60):
        """``function(*args)`` called on a thread inside ``host``; its result."""
        result = {}

        def call():
            try:
                self.enter(host)
                result["value"] = function(*args)
            except BaseException as error:  # handed to the caller
                result["error"] = error
        thread = threading.Thread(target=call, name=f"on-{host}", daemon=True)
        thread.start()
        thread.join(timeout)
        if thread.is_alive():
            raise TimeoutError(f"{function.__name__} on {host} took over {timeout} s")
        if "error" in result:
            raise result["error"]
        return result["value"]
