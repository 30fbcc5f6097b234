"""The Debian package (`make deb`), installed on this machine: run by `make deb-test` as root.

It installs the .deb from TALLY_DEB_DIR with apt-get, checks what it put where (programs,
man pages, the unit, /etc/tally/tally.conf readable by the tally group only, the tally
system user, /var/lib/tally), starts tallyd the way tallyd.service does — with systemd when
it runs this machine, else the unit's own ExecStart, User, Group and WorkingDirectory (CI
machines are containers without systemd) —, checks that it serves both protocols with the
packaged config (ports set in /etc/tally/tally.conf, as an administrator would), restarts it
and finds the counters kept in /var/lib/tally, then removes the package (the config and the
counters stay) and purges it (both go).

A machine where the package is already installed is refused rather than touched.
"""

import configparser
import glob
import grp
import json
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import time
import unittest
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
DEB_DIR = os.environ.get("TALLY_DEB_DIR", os.path.join(ROOT, "build", "deb"))
UNIT = "/lib/systemd/system/tallyd.service"
CONF = "/etc/tally/tally.conf"
STATE = "/var/lib/tally"


def project_version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        return re.search(r"project\(tally VERSION ([0-9.]+)", f.read()).group(1)


def installed():
    result = subprocess.run(["dpkg-query", "-W", "-f=${Status}", "tally"],
                            capture_output=True, text=True)
    return result.returncode == 0 and "installed" in result.stdout.split()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(*argv):
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    if result.returncode != 0:
        raise AssertionError("%s exited %d:\n%s%s" % (" ".join(argv), result.returncode,
                                                      result.stdout, result.stderr))
    return result.stdout


def redis_call(port, *args):
    """One command with redis-cli; its output (raw: what a script would read)."""
    result = subprocess.run(["redis-cli", "-p", str(port)] + [str(a) for a in args],
                            capture_output=True, text=True, timeout=10)
    if result.returncode != 0:
        raise OSError(result.stderr.strip())
    return result.stdout.strip()


class Service:
    """tallyd as tallyd.service runs it: systemctl when systemd is PID 1, else the unit's
    ExecStart as its User and Group in its WorkingDirectory."""

    def __init__(self):
        self.systemd = os.path.isdir("/run/systemd/system")
        self.proc = None
        self.log = os.path.join(DEB_DIR, "tallyd-service.log")

    def unit(self):
        parser = configparser.ConfigParser(strict=False, interpolation=None)
        parser.optionxform = str
        parser.read(UNIT)
        return parser["Service"]

    def start(self):
        if self.systemd:
            run("systemctl", "start", "tallyd")
            return
        service = self.unit()
        command = ["setpriv", "--reuid", service["User"], "--regid", service["Group"],
                   "--init-groups", "--no-new-privs", "--"] + shlex.split(service["ExecStart"])
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(command, cwd=service["WorkingDirectory"], stdout=log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)

    def stop(self):
        """As systemd stops it: SIGTERM, and tallyd exits 0 once everything is committed."""
        if self.systemd:
            run("systemctl", "stop", "tallyd")
            return 0
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None

    def pid(self):
        if self.systemd:
            return int(run("systemctl", "show", "-p", "MainPID", "--value", "tallyd"))
        return self.proc.pid

    def log_tail(self):
        if self.systemd:
            return subprocess.run(["journalctl", "-u", "tallyd", "-n", "40", "--no-pager"],
                                  capture_output=True, text=True).stdout
        try:
            with open(self.log, errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return ""


@unittest.skipUnless(hasattr(os, "geteuid") and os.geteuid() == 0,
                     "installs a package: run as root (make deb-test)")
class DebianPackageTest(unittest.TestCase):

    def setUp(self):
        debs = sorted(glob.glob(os.path.join(DEB_DIR, "tally_*.deb")))
        self.assertTrue(debs, "no tally_*.deb in %s: run make deb" % DEB_DIR)
        self.deb = debs[-1]
        self.assertFalse(installed(), "the tally package is installed on this machine already; "
                                      "this test installs and purges it: remove it first")
        self.service = Service()
        self.addCleanup(self.cleanup)

    def cleanup(self):
        self.service.stop()
        if installed() or os.path.exists(CONF):
            subprocess.run(["dpkg", "--purge", "tally"], capture_output=True)

    def wait_serving(self, redis_port, http_port):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if redis_call(redis_port, "PING") == "PONG":
                    with urllib.request.urlopen("http://127.0.0.1:%d/healthz" % http_port,
                                                timeout=5) as r:
                        if json.load(r) == {"status": "ok"}:
                            return
            except OSError:
                pass
            if not self.service.systemd and self.service.proc.poll() is not None:
                break
            time.sleep(0.1)
        self.fail("tallyd does not serve on %d/%d:\n%s" % (redis_port, http_port,
                                                            self.service.log_tail()))

    def test_install_run_restart_remove(self):
        version = project_version()
        run("apt-get", "install", "-y", "-q", "--no-install-recommends", self.deb)
        self.assertTrue(installed())

        # What went where.
        for path in ("/usr/bin/tallyd", "/usr/bin/tally"):
            self.assertTrue(os.access(path, os.X_OK), path)
        self.assertEqual(run("/usr/bin/tallyd", "--version").strip(), "tallyd " + version)
        self.assertEqual(run("/usr/bin/tally", "--version").strip(), "tally " + version)
        for page in ("/usr/share/man/man8/tallyd.8.gz", "/usr/share/man/man1/tally.1.gz"):
            self.assertTrue(os.path.exists(page), page)
        self.assertIn(r"\fB\-\-data\-dir\fR", run("zcat", "/usr/share/man/man8/tallyd.8.gz"))
        self.assertTrue(os.path.exists(UNIT), UNIT)
        user = pwd.getpwnam("tally")
        self.assertLess(user.pw_uid, 1000)  # a system user
        self.assertIn(user.pw_shell, ("/usr/sbin/nologin", "/bin/false"))
        conf = os.stat(CONF)
        self.assertEqual((conf.st_uid, grp.getgrgid(conf.st_gid).gr_name,
                          stat.S_IMODE(conf.st_mode)), (0, "tally", 0o640))
        state = os.stat(STATE)
        self.assertEqual((pwd.getpwuid(state.st_uid).pw_name, stat.S_IMODE(state.st_mode)),
                         ("tally", 0o750))
        self.assertIn(CONF, run("dpkg-query", "-W", "-f=${Conffiles}", "tally"))
        if shutil.which("systemd-analyze"):
            run("systemd-analyze", "verify", UNIT)

        # The administrator's ports, in the packaged config file.
        redis_port, http_port = free_port(), free_port()
        with open(CONF, "a") as f:
            f.write("port = %d\nhttp-port = %d\n" % (redis_port, http_port))

        self.service.start()
        self.wait_serving(redis_port, http_port)
        self.assertEqual(pwd.getpwuid(os.stat("/proc/%d" % self.service.pid()).st_uid).pw_name,
                         "tally")
        self.assertEqual(redis_call(redis_port, "INCRBY", "likes:post:7", 42), "42")
        with urllib.request.urlopen("http://127.0.0.1:%d/v1/status" % http_port, timeout=5) as r:
            status = json.load(r)
        self.assertEqual((status["version"], status["durability"]), (version, "sync"))
        self.assertIn("tally_version:%s\n" % version, redis_call(redis_port, "INFO", "server"))
        self.assertIn("data_dir:%s\n" % STATE, redis_call(redis_port, "INFO", "persistence"))

        # Restarted: the counter is still there, in /var/lib/tally, owned by tally.
        self.assertEqual(self.service.stop(), 0, self.service.log_tail())
        self.assertTrue(os.listdir(STATE))
        for dirpath, _, names in os.walk(STATE):
            for name in names:
                self.assertEqual(pwd.getpwuid(os.stat(os.path.join(dirpath, name)).st_uid)
                                 .pw_name, "tally", os.path.join(dirpath, name))
        self.service.start()
        self.wait_serving(redis_port, http_port)
        self.assertEqual(redis_call(redis_port, "GET", "likes:post:7"), "42")
        self.assertEqual(self.service.stop(), 0, self.service.log_tail())

        # Removed: the programs go, the config and the counters stay; purged: all go.
        run("dpkg", "--remove", "tally")
        self.assertFalse(os.path.exists("/usr/bin/tallyd"))
        self.assertTrue(os.path.exists(CONF))
        self.assertTrue(os.listdir(STATE))
        run("dpkg", "--purge", "tally")
        self.assertFalse(os.path.exists(CONF))
        self.assertFalse(os.path.exists(STATE))


if __name__ == "__main__":
    unittest.main()
