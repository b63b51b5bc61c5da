"""The container image (Containerfile), built with `make image` and run for
real with podman: what it holds, the web service, the worker and the
`plantstore` command against PostgreSQL with a webhook receiver, and
config/compose.yaml's stack (PostgreSQL, migrations, web, worker, nginx)
under podman-compose.

No registry is needed. The bases are made from Debian 12's packages with
mmdebstrap, kept in CACHE (named by their package lists, so a rerun
imports or reuses them) and imported into podman: one with Python for the
image, one with PostgreSQL and nginx for the stack's stand-ins of the
official postgres and nginx images. The image's Python packages are wheels
made on this machine (`make image`, with Debian's python3: the base's
Python release).

It needs podman, runc and mmdebstrap (the stack also podman-compose) and
is skipped, saying which is missing, without them. It makes and drops a
database of its own on the PostgreSQL server the suite runs on, and runs
once per `make test`, in the PostgreSQL pass:

    make test-postgres PYTEST_ARGS='tests/repository/test_container.py -s'

(`-s` shows the image's size, start-up and stop times.)
"""
import hashlib
import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from urllib.parse import urljoin, urlsplit, urlunsplit

import psycopg2
import pytest
import requests
from standardwebhooks import Webhook

from helpers import POSTGRES_URL, REPO, bearer, free_port, wait_until
from plugins.local_run import code_blocks
from plugins.webhooks import Answer

CACHE = Path(os.environ.get("PLANTSTORE_CONTAINER_CACHE", "/var/tmp/plantstore-container"))
BASE = "localhost/debian-python:bookworm"
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")
SERVICES_BASE = "localhost/plantstore-test-services:bookworm"
SERVICES_PACKAGES = ("postgresql-15", "nginx", "ca-certificates")
IMAGE = "localhost/plantstore:test"
POSTGRES_IMAGE = "localhost/plantstore-test-postgres:15"
NGINX_IMAGE = "localhost/plantstore-test-nginx:bookworm"
BASE_LABEL = "org.plantstore.test.base"  # on the bases and every image built on them
# The stop bounds docs/operating.md gives (as the systemd units' TimeoutStopSec).
WEB_STOP_SECONDS = 45
WORKER_STOP_SECONDS = 180
# podman with runc and cgroupfs, and rlimits it may set: so it also runs on
# hosts where crun refuses a hybrid cgroup hierarchy and podman's default
# rlimits are refused. podman-compose's podman reads the same file.
CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1000:1000"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
"""
MISSING = [tool for tool in ("podman", "runc", "mmdebstrap") if shutil.which(tool) is None]

needs_podman = pytest.mark.skipif(
    bool(MISSING), reason=f"needs {', '.join(MISSING)} (apt-get install podman runc mmdebstrap)")
# Once per `make test`: in the PostgreSQL pass, where a server is sure to answer.
once = pytest.mark.skipif(not POSTGRES_URL, reason="the container tests run once, in the "
                                                   "PostgreSQL pass (make test-postgres)")
pytestmark = pytest.mark.timeout(900)  # a first run makes the bases (about a minute)


def test_the_two_ignore_files_agree():
    """docker reads .dockerignore, podman .containerignore: one allow-list."""
    assert (REPO / ".dockerignore").read_text() == (REPO / ".containerignore").read_text()


# --- podman -------------------------------------------------------------------

def podman_env():
    CACHE.mkdir(parents=True, exist_ok=True)
    conf = CACHE / "containers.conf"
    if not conf.exists() or conf.read_text() != CONTAINERS_CONF:
        conf.write_text(CONTAINERS_CONF)
    return {**os.environ, "CONTAINERS_CONF": str(conf)}


def run(command, env, timeout=120, check=True, cwd=REPO):
    """Run ``command``; its output as text, checked for exit status 0."""
    result = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True,
                            timeout=timeout)
    if check:
        assert result.returncode == 0, (
            f"{' '.join(map(str, command))} exited {result.returncode}:\n"
            f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


class Podman:
    def __init__(self):
        self.env = podman_env()

    def __call__(self, *args, timeout=120, check=True):
        return run(["podman", *args], self.env, timeout, check)

    def state(self, container):
        """The container's state: {"Status": "running"|"exited"|..., "ExitCode": N, ...}."""
        return json.loads(self("inspect", "--format", "{{json .State}}", container).stdout)

    def logs(self, container):
        found = self("logs", container, check=False)
        return (found.stdout + found.stderr)[-4000:]

    def prune(self):
        """Remove the untagged images the builds on this test's bases left
        (build stages, images a rebuild replaced): only the tagged stay."""
        self("image", "prune", "--force", "--filter", f"label={BASE_LABEL}")

    def stop(self, container, bound):
        """Stop with SIGTERM (SIGKILL after ``bound`` seconds); how long it
        took, and the container's exit code."""
        started = time.monotonic()
        self("stop", "--time", str(bound), container, timeout=bound + 60)
        took = time.monotonic() - started
        return took, self.state(container)["ExitCode"]


def debian_image(podman, tag, packages):
    """Make the podman image ``tag``: Debian 12 with ``packages``, by
    mmdebstrap. The tarball is cached by its command line; the image is
    labelled with the same key and reused while it carries it."""
    command = ["mmdebstrap", "--variant=apt", "--include=" + ",".join(packages), "bookworm"]
    key = hashlib.sha256(" ".join(command).encode()).hexdigest()[:16]
    found = podman("image", "inspect", "--format",
                   f'{{{{index .Config.Labels "{BASE_LABEL}"}}}}', tag, check=False)
    if found.returncode == 0 and found.stdout.strip() == key:
        return
    name = tag.rpartition("/")[2].replace(":", "-")
    tarball = CACHE / f"{name}-{key}.tar"
    if not tarball.exists():
        for stale in CACHE.glob(f"{name}-*.tar"):  # another package list's, or a partial one
            stale.unlink()
        partial = tarball.with_name(f"{tarball.stem}.partial.tar")
        run([*command, str(partial)], podman.env, timeout=600)
        partial.rename(tarball)
    podman("import", "--change", f"LABEL {BASE_LABEL}={key}",
           str(tarball), tag, timeout=300)


@pytest.fixture(scope="module")
def podman():
    return Podman()


@pytest.fixture(scope="module")
def image(podman):
    """`make image` on the local base, as localhost/plantstore:test."""
    debian_image(podman, BASE, BASE_PACKAGES)
    version = "import platform; print(platform.python_version())"
    base_python = podman("run", "--rm", BASE, "python3", "-c", version).stdout.strip()
    host_python = run(["/usr/bin/python3", "-c", version], podman.env).stdout.strip()
    assert base_python == host_python, (
        f"the wheels need the base's Python release: the base has {base_python}, "
        f"/usr/bin/python3 is {host_python}")
    run(["make", "image", f"IMAGE={IMAGE}", f"IMAGE_BASE={BASE}",
         "IMAGE_PYTHON=/usr/bin/python3", "CONTAINER_ENGINE=podman"], podman.env, timeout=900)
    podman.prune()
    return IMAGE


@pytest.fixture(scope="module")
def database():
    """A database of this test's own on the suite's PostgreSQL server (the
    suite's own database is emptied by other tests); dropped afterwards."""
    name = f"plantstore_container_{os.getpid()}"
    admin = psycopg2.connect(POSTGRES_URL)
    admin.autocommit = True
    with admin.cursor() as cursor:
        cursor.execute(f'DROP DATABASE IF EXISTS "{name}"')
        cursor.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit(urlsplit(POSTGRES_URL)._replace(path="/" + name))
    finally:
        with admin.cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


@pytest.fixture
def containers(podman):
    """Names for this test's containers; each is removed afterwards."""
    made = []

    def name(role):
        made.append(f"plantstore-test-{role}-{os.getpid()}")
        return made[-1]
    yield name
    if made:
        podman("rm", "--force", "--time", "0", *made, check=False)


# --- the README's curl session -------------------------------------------------

def readme_session(base_url, token):
    """The README's curl session against ``base_url``; what went otherwise
    than the README says, one line per request (empty: 0 failed requests)."""
    failed = []

    def expect(response, status, body=None, **headers):
        got = response.json() if response.content else None
        if response.status_code != status or (body is not None and got != body) or any(
                response.headers.get(name.replace("_", "-")) != value
                for name, value in headers.items()):
            failed.append(f"{response.request.method} {response.request.url}: "
                          f"{response.status_code} {response.text[:300]!r} "
                          f"{dict(response.headers)}")

    with requests.Session() as session:
        auth = bearer(token)
        expect(session.post(base_url + "/plants", headers=auth, timeout=30,
                            json={"id": 1, "name": "Fern", "tag": "green"}),
               200, {"name": "Fern", "tag": "green"})
        expect(session.post(base_url + "/plants", headers=auth, timeout=30,
                            json={"id": 2, "name": "Moss"}),
               200, {"name": "Moss"})
        expect(session.get(base_url + "/plants?limit=1", headers=auth, timeout=30),
               200, [{"name": "Fern", "tag": "green"}],
               Link='</plants?limit=1&after=1>; rel="next"')
        expect(session.delete(base_url + "/plants/1", headers=auth, timeout=30), 204)
        expect(session.get(base_url + "/plants", timeout=30),
               401, {"error": 401, "message": "A bearer token is required."})
    return failed


def wait_ready(base_url, podman, container, seconds=90):
    """Wait until ``base_url``/readyz answers 200; fail at once if the
    container exits."""
    def ready():
        if podman.state(container)["Status"] == "exited":
            raise AssertionError(f"{container} exited: {podman.logs(container)}")
        try:
            return requests.get(base_url + "/readyz", timeout=2).status_code == 200
        except requests.RequestException:
            return False
    wait_until(ready, timeout=seconds, interval=0.05,
               message=lambda: f"{base_url}/readyz to answer 200: {podman.logs(container)}")


# --- the image -----------------------------------------------------------------

@pytest.mark.slow
@needs_podman
@once
def test_the_image_holds_the_service_and_nothing_else(podman, image):
    inspected = json.loads(podman("image", "inspect", image).stdout)[0]
    config = inspected["Config"]
    assert config["User"] == "10001:10001"
    assert config["Entrypoint"] == ["/opt/plantstore/entrypoint"] and config["Cmd"] == ["web"]
    assert "8000/tcp" in config["ExposedPorts"]
    healthcheck = config.get("Healthcheck") or inspected["Healthcheck"]  # podman: beside Config
    assert healthcheck["Test"] == ["CMD", "/opt/plantstore/healthcheck"]
    assert config["StopSignal"] in ("SIGTERM", "15")

    listing = podman("run", "--rm", "--no-healthcheck", "--entrypoint", "/bin/sh", image, "-c", """
        id -u
        ls -A /opt/plantstore /opt/plantstore/config
        for tool in gcc cc c++ make pip pip3; do command -v $tool || true; done
        ls -d /src /opt/plantstore/tests /opt/plantstore/.git /root/.cache/pip 2>/dev/null || true
        cd /opt/plantstore/venv/lib/python3.11/site-packages
        find plantstore -name '*.sql' | sort
        ls flask_swagger_ui/dist/swagger-ui-bundle.js
    """).stdout.split()
    sql_files = sorted(str(path.relative_to(REPO)) for path in (REPO / "plantstore").rglob("*.sql"))
    assert listing == ["10001", "/opt/plantstore:", "config", "entrypoint", "healthcheck", "venv",
                       "wsgi.py", "/opt/plantstore/config:", "gunicorn.conf.py",
                       *sql_files, "flask_swagger_ui/dist/swagger-ui-bundle.js"]
    assert sql_files

    size = int(podman("image", "inspect", "--format", "{{.Size}}", image).stdout)
    base = int(podman("image", "inspect", "--format", "{{.Size}}", BASE).stdout)
    print(f"\nimage {image}: {size / 1e6:.0f} MB, of which {(size - base) / 1e6:.0f} MB "
          f"on top of its base ({base / 1e6:.0f} MB)")
    version = podman("run", "--rm", "--no-healthcheck", image, "--version").stdout
    assert version.startswith("plantstore, version ")


# --- web, worker and the command against PostgreSQL -------------------------

@pytest.mark.slow
@needs_podman
@once
def test_web_worker_and_commands_serve_the_readme_session_and_a_signed_webhook(
        podman, image, database, containers, make_receiver):
    """One image, three roles, each chosen by its command, on the host's
    network (PostgreSQL and the receiver are on loopback): the web service
    answers the README's session and sends each new plant's webhook; the
    receiver refuses the first attempt, which the worker then retries; both
    stop on SIGTERM within their bounds with exit code 0."""
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    settings = ["-e", f"PLANTSTORE_DATABASE_URL={database}",
                "-e", "PLANTSTORE_WEBHOOK_ALLOWED_NETWORKS=127.0.0.0/8",
                "-e", "PLANTSTORE_WEBHOOK_RETRY_SCHEDULE=0",
                "-e", "PLANTSTORE_WEBHOOK_CONNECT_TIMEOUT=5",
                "-e", "PLANTSTORE_WEBHOOK_READ_TIMEOUT=10"]

    def command(*args):
        return podman("run", "--rm", "--no-healthcheck", "--network", "host", *settings,
                      image, *args).stdout.strip()

    assert "applied" in command("db", "upgrade")
    web, worker = containers("web"), containers("worker")
    started = time.monotonic()
    podman("run", "--detach", "--name", web, "--network", "host", *settings,
           "-e", "HOST=127.0.0.1", "-e", f"PORT={port}", "-e", "WEB_CONCURRENCY=2", image)
    wait_ready(base_url, podman, web)
    print(f"\nweb: /readyz answered 200 {time.monotonic() - started:.1f} s after podman run")

    command("users", "create", "alice")
    token = command("tokens", "create", "alice")
    first_attempt = threading.Lock()  # the first attempt to arrive is refused

    def answer(received):
        return Answer() if not first_attempt.acquire(blocking=False) else Answer(status=503)
    receiver = make_receiver(answer=answer)
    subscribed = requests.post(base_url + "/webhooks", headers=bearer(token), timeout=30,
                               json={"url": receiver.url})
    assert subscribed.status_code == 201, subscribed.text
    secret = subscribed.json()["secret"]

    assert readme_session(base_url, token) == []
    docs = requests.get(base_url + "/docs/", timeout=30)
    assert docs.status_code == 200
    assets = [part.split('"')[1] for part in docs.text.split("src=")[1:]
              if part.startswith('"') and part.split('"')[1].endswith(".js")]
    assert assets and all(requests.get(urljoin(docs.url, asset), timeout=30).status_code == 200
                          for asset in assets)

    # The web process made each create's first attempt; one was refused and
    # waits for a worker.
    receiver.wait_for(2, timeout=60)
    wait_until(lambda: {"pending\t1", "delivered\t1"} <= set(
                   command("deliveries", "summary").splitlines()),
               timeout=30, interval=0.2, message="one delivery pending, one delivered")
    podman("run", "--detach", "--name", worker, "--network", "host", *settings, image, "worker")
    got = receiver.wait_for(3, timeout=60)
    events = {request.headers["webhook-id"]: Webhook(secret).verify(request.body, request.headers)
              for request in got}
    assert sorted(events.values(), key=lambda event: event["id"]) == [
        {"id": 1, "name": "Fern", "tag": "green"}, {"id": 2, "name": "Moss"}]
    wait_until(lambda: {"pending\t0", "delivered\t2"} <= set(
                   command("deliveries", "summary").splitlines()),
               timeout=30, interval=0.2, message="both deliveries to be recorded delivered")

    assert podman("healthcheck", "run", web, check=False).returncode == 0
    assert podman("healthcheck", "run", worker, check=False).returncode == 0
    # The check asks where gunicorn listens, whatever the variables say; each
    # bind form, and a gunicorn that does not answer: tests/server/test_healthcheck.py.

    took, code = podman.stop(web, WEB_STOP_SECONDS)
    assert code == 0, podman.logs(web)
    print(f"web stopped in {took:.1f} s (bound {WEB_STOP_SECONDS} s)")
    took, code = podman.stop(worker, WORKER_STOP_SECONDS)
    assert code == 0, podman.logs(worker)
    print(f"worker stopped in {took:.1f} s (bound {WORKER_STOP_SECONDS} s)")


# --- config/compose.yaml ------------------------------------------------------

# Stand-ins for the official postgres and nginx images, which no registry
# here serves: the same contract (POSTGRES_USER, POSTGRES_PASSWORD,
# POSTGRES_DB and the data directory; conf.d/*.conf inside http {}, stop by
# SIGQUIT), Debian 12's packages inside.
POSTGRES_CONTAINERFILE = f"""\
FROM {SERVICES_BASE}
COPY entrypoint /usr/local/bin/postgres-entrypoint
ENV PATH=/usr/lib/postgresql/15/bin:$PATH PGDATA=/var/lib/postgresql/data
STOPSIGNAL SIGINT
ENTRYPOINT ["/usr/local/bin/postgres-entrypoint"]
"""
POSTGRES_ENTRYPOINT = """\
#!/bin/sh
set -eu
as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }
mkdir -p "$PGDATA" /run/postgresql
chown postgres:postgres "$PGDATA" /run/postgresql
chmod 0700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    printf '%s\\n' "$POSTGRES_PASSWORD" > /run/postgresql/password
    as_postgres initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile=/run/postgresql/password \\
        --auth-local=trust --auth-host=scram-sha-256 > /dev/null
    rm /run/postgresql/password
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    as_postgres pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start > /dev/null
    as_postgres psql -q -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d postgres \\
        -c "CREATE DATABASE \\"$POSTGRES_DB\\""
    as_postgres pg_ctl -D "$PGDATA" -m fast -w stop > /dev/null
fi
exec setpriv --reuid=postgres --regid=postgres --init-groups \\
    postgres -D "$PGDATA" -c listen_addresses='*'
"""
NGINX_CONTAINERFILE = f"""\
FROM {SERVICES_BASE}
RUN rm -f /etc/nginx/sites-enabled/default \\
    && ln -sf /dev/stdout /var/log/nginx/access.log && ln -sf /dev/stderr /var/log/nginx/error.log
STOPSIGNAL SIGQUIT
CMD ["nginx", "-g", "daemon off;"]
"""


def documented_podman_compose_session(project, port):
    """docs/operating.md's podman-compose session, its lines after `make image`,
    with this test's project name and nginx's address in place of
    `plantstore` and localhost:8080."""
    [block] = [block for block in code_blocks("operating.md", "## Run it as a container", "sh")
               if "podman-compose" in block]
    lines = [line for line in block.splitlines() if line.strip()]
    assert lines[0] == "make image", lines
    return [line.replace("-p plantstore ", f"-p {project} ")
            .replace("plantstore_web_1", f"{project}_web_1")
            .replace("localhost:8080", f"127.0.0.1:{port}") for line in lines[1:]]


@pytest.fixture(scope="module")
def stand_ins(podman, tmp_path_factory):
    """The postgres and nginx stand-in images (podman's cache makes a rerun quick)."""
    debian_image(podman, SERVICES_BASE, SERVICES_PACKAGES)
    for tag, containerfile, files in ((POSTGRES_IMAGE, POSTGRES_CONTAINERFILE,
                                       {"entrypoint": POSTGRES_ENTRYPOINT}),
                                      (NGINX_IMAGE, NGINX_CONTAINERFILE, {})):
        context = tmp_path_factory.mktemp("stand-in")
        (context / "Containerfile").write_text(containerfile)
        for name, text in files.items():
            (context / name).write_text(text)
            (context / name).chmod(0o755)
        podman("build", "--format", "docker", "-t", tag, str(context), timeout=300)
    podman.prune()


@pytest.mark.slow
@needs_podman
@once
@pytest.mark.skipif(shutil.which("podman-compose") is None,
                    reason="needs podman-compose (apt-get install podman-compose)")
def test_the_compose_stack_serves_the_readme_session_through_nginx(podman, image, stand_ins):
    """config/compose.yaml as it is, its images and published address set by
    its variables: PostgreSQL, the migrations, web, worker and nginx start;
    docs/operating.md's podman-compose session runs as written (its project
    and address this test's own); the README's session goes through nginx's
    published port; everything stops with exit code 0."""
    project = f"plantstore_test_{os.getpid()}"
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    env = {**podman.env, "PLANTSTORE_IMAGE": image, "POSTGRES_IMAGE": POSTGRES_IMAGE,
           "NGINX_IMAGE": NGINX_IMAGE, "PLANTSTORE_HTTP_ADDRESS": f"127.0.0.1:{port}",
           # For stop and down: the session exports its own for `up`.
           "POSTGRES_PASSWORD": "set-by-the-session"}
    compose = ["podman-compose", "-f", str(REPO / "config" / "compose.yaml"), "-p", project]
    *commands, down = documented_podman_compose_session(project, port)

    def container(service):
        return f"{project}_{service}_1"
    try:
        # `make image` ran (the image fixture); the rest up to `down`, in one shell.
        session = run(["bash", "-euc", "\n".join(commands)], env, timeout=600)
        # The session's last line lists alice's plants: none, in the contract's JSON.
        assert session.stdout.splitlines()[-1] == "[]", session.stdout[-3000:]
        assert podman.state(container("migrate"))["ExitCode"] == 0

        def command(*args):
            return podman("exec", container("web"), "plantstore", *args).stdout.strip()
        token = command("tokens", "create", "alice")
        assert readme_session(base_url, token) == []

        # nginx in front: its own JSON answers, /metrics kept from other hosts.
        metrics = requests.get(base_url + "/metrics", timeout=30)
        assert (metrics.status_code, metrics.json()["error"]) == (403, 403)
        traced = requests.get(base_url + "/healthz", headers={"X-Request-ID": "compose.1"},
                              timeout=30)
        assert traced.headers["X-Request-ID"] == "compose.1"
        assert podman.state(container("worker"))["Status"] == "running"

        run([*compose, "stop", "--timeout", str(WEB_STOP_SECONDS)], env,
            timeout=5 * WEB_STOP_SECONDS)
        codes = {service: podman.state(container(service))["ExitCode"]
                 for service in ("nginx", "worker", "web", "migrate", "db")}
        assert codes == dict.fromkeys(codes, 0), {
            service: podman.logs(container(service)) for service, code in codes.items() if code}
        run(["bash", "-euc", down], env, timeout=300)
    finally:
        run([*compose, "down", "--volumes"], env, timeout=300, check=False)
        podman("network", "rm", "--force", f"{project}_default", check=False)
