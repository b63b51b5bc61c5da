"""A real nginx in front of a benchmarked server, with the project's site
(config/nginx/plantstore.conf) pointed at it, as ``make smoke-nginx`` runs it.

The site's per-address request limit is lifted for loopback (the whole
load comes from one address). ``Fronted`` is the server as the load sees
it: nginx's URL, the app server's CPU (nginx's own is reported apart), so
set-ups compare the same thing with and without nginx.
"""
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import cpu
import servers

SITE = servers.REPO / "config" / "nginx" / "plantstore.conf"


class NginxFront:
    """nginx on a free loopback port proxying to ``upstream_port``."""

    def __init__(self, upstream_port, workdir, name):
        self.port = servers.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.dir = Path(workdir) / f"nginx-{name}"
        self.dir.mkdir(parents=True, exist_ok=True)
        site = (SITE.read_text()
                .replace("server 127.0.0.1:8000", f"server 127.0.0.1:{upstream_port}")
                .replace("listen 80;", f"listen 127.0.0.1:{self.port};")
                .replace("/var/log/nginx/plantstore.access.log", str(self.dir / "access.log"))
                .replace("    default 0;\n", "    default 0;\n    127.0.0.1 1;\n", 1))
        (self.dir / "plantstore.conf").write_text(site)
        temp_paths = "\n".join(f"    {kind}_temp_path {self.dir / kind};" for kind in
                               ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        (self.dir / "nginx.conf").write_text(
            f"worker_processes 1;\npid {self.dir / 'nginx.pid'};\n"
            f"error_log {self.dir / 'error.log'} warn;\n"
            "events { worker_connections 1024; }\n"
            f"http {{\n    default_type application/octet-stream;\n{temp_paths}\n"
            f"    include {self.dir / 'plantstore.conf'};\n}}\n")
        self.process = None

    def start(self, seconds=30):
        binary = shutil.which("nginx") or "/usr/sbin/nginx"
        if not Path(binary).exists():
            raise SystemExit("AB_NGINX=1: nginx is not installed (apt-get install nginx)")
        argv = [binary, "-p", str(self.dir), "-e", str(self.dir / "error.log"),
                "-c", str(self.dir / "nginx.conf"), "-g", "daemon off;"]
        self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"nginx exited; see {self.dir / 'error.log'}")
            try:
                urllib.request.urlopen(self.url + "/healthz", timeout=2)
                return self
            except urllib.error.HTTPError:
                return self
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"nginx did not come up in {seconds}s")

    def cpu_seconds(self):
        return cpu.tree_cpu_seconds(self.process.pid)

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


class Fronted:
    """``server`` behind ``front``: the front's URL, the server's CPU."""

    def __init__(self, server, front):
        self.server, self.front = server, front
        self.name, self.url, self.log_path = server.name, front.url, server.log_path

    def cpu_seconds(self):
        return self.server.cpu_seconds()

    def worker_cpu_seconds(self):
        return self.server.worker_cpu_seconds()

    def stop(self):
        self.front.stop()
        self.server.stop()
