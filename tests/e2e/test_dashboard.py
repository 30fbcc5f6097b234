"""The web dashboard (dashboard/, embedded in tallyd): its files over HTTP (content types,
ETags, 304s, caching, no password needed for them while the data routes want it), and the
page in a real browser: dashboard_browser.mjs drives Debian's chromium with playwright-core
(from dashboard/node_modules, installed by `make deps`) against a tallyd started with
--requirepass, and saves a screenshot. Two scenarios: the main one (the hottest counters
watched at first, then the user's choice, kept across a reload, and back to automatic), and
a first view after a restart, when nothing is hot: the one group of the first derived
counter, which has no GROUP BY.

Environment (set by CTest): TALLY_DASHBOARD_DIR (default ../../dashboard),
TALLY_TEST_ARTIFACTS (where the screenshot goes; default ../../build/test-artifacts),
CHROMIUM (default /usr/bin/chromium).
"""

import http.client
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import unittest

from harness import TallyServer, blog_posts_schema, free_port, tally_only
from tls_certs import Certificates

HOST = "127.0.0.1"
HERE = os.path.dirname(os.path.abspath(__file__))
DASHBOARD_DIR = os.environ.get("TALLY_DASHBOARD_DIR",
                               os.path.normpath(os.path.join(HERE, "..", "..", "dashboard")))
ARTIFACTS = os.environ.get("TALLY_TEST_ARTIFACTS",
                           os.path.normpath(os.path.join(HERE, "..", "..", "build",
                                                         "test-artifacts")))
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
PASSWORD = "dashboard-secret"
BROWSER_TIMEOUT = 180  # seconds for the whole browser scenario

SCHEMA = blog_posts_schema()


def request(port, method, path, headers=None, body=None):
    """One request on a fresh connection: (status, headers as a lower-case dict, body bytes)."""
    conn = http.client.HTTPConnection(HOST, port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return (response.status, {k.lower(): v for k, v in response.getheaders()},
                response.read())
    finally:
        conn.close()


class DashboardServer:
    """A tallyd with --requirepass and a known HTTP port, the schema above defined (and
    `extra_counters`)."""

    def __init__(self, add_cleanup, extra_counters="", extra_args=()):
        self.http_port = free_port()
        self.server = TallyServer(options={"requirepass": PASSWORD},
                                  extra_args=["--http-port", str(self.http_port), *extra_args])
        add_cleanup(self.server.cleanup)
        self.server.start()
        self.auth = {"Authorization": "Bearer " + PASSWORD}
        self.call("POST", "/v1/definitions", SCHEMA + extra_counters)

    def call(self, method, path, body=""):
        """A data call with the password; its JSON answer, which must be a 200."""
        status, _, reply = request(self.http_port, method, path, self.auth, body.encode())
        if status != 200:
            raise AssertionError("%s %s: %d %r" % (method, path, status, reply))
        return json.loads(reply)

    def restart(self):
        self.server.restart()
        deadline = time.monotonic() + 30
        while True:
            try:
                if request(self.http_port, "GET", "/healthz")[0] == 200:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError("HTTP did not come back after a restart")
            time.sleep(0.05)


@tally_only
class DashboardFilesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tally = DashboardServer(cls.addClassCleanup)

    def get(self, path, headers=None):
        return request(self.tally.http_port, "GET", path, headers)

    def page_assets(self):
        _, _, body = self.get("/")
        paths = re.findall(r'(?:src|href)="(/assets/[^"]+)"', body.decode())
        self.assertEqual(len(paths), 2, body)
        return paths

    def test_page_without_password(self):
        status, headers, body = self.get("/")
        self.assertEqual(status, 200)
        self.assertEqual(headers["content-type"], "text/html; charset=utf-8")
        self.assertEqual(headers["cache-control"], "no-cache")
        self.assertRegex(headers["etag"], r'^"[0-9a-f]{32}"$')
        self.assertEqual(int(headers["content-length"]), len(body))
        self.assertIn(b"<title>tally", body)

    def test_assets_types_and_caching(self):
        types = {}
        for path in self.page_assets():
            status, headers, body = self.get(path)
            self.assertEqual(status, 200, path)
            self.assertEqual(headers["cache-control"], "public, max-age=31536000, immutable")
            self.assertRegex(headers["etag"], r'^"[0-9a-f]{32}"$')
            self.assertGreater(len(body), 1000, path)
            types[path.rsplit(".", 1)[1]] = headers["content-type"]
        self.assertEqual(types, {"js": "text/javascript; charset=utf-8",
                                 "css": "text/css; charset=utf-8"})

    def test_not_modified(self):
        for path in ["/"] + self.page_assets():
            _, headers, _ = self.get(path)
            etag = headers["etag"]
            for sent in (etag, "W/" + etag, '"other", ' + etag, "*"):
                status, again, body = self.get(path, {"If-None-Match": sent})
                self.assertEqual(status, 304, (path, sent))
                self.assertEqual(body, b"")
                self.assertEqual(again["etag"], etag)
                self.assertNotIn("content-length", again)
            status, _, body = self.get(path, {"If-None-Match": '"other"'})
            self.assertEqual(status, 200)
            self.assertGreater(len(body), 0)

    def test_unknown_file_and_methods(self):
        status, headers, body = self.get("/assets/app-nothing.js")
        self.assertEqual(status, 404)
        self.assertEqual(json.loads(body), {"error": "no such dashboard file"})
        status, headers, _ = request(self.tally.http_port, "POST", "/", body=b"")
        self.assertEqual(status, 405)
        self.assertEqual(headers["allow"], "GET")

    def test_data_routes_still_want_the_password(self):
        self.assertEqual(self.get("/v1/status")[0], 401)
        self.assertEqual(self.get("/v1/definitions")[0], 401)
        self.assertEqual(self.get("/v1/status", self.tally.auth)[0], 200)


@tally_only
class DashboardBrowserTest(unittest.TestCase):
    def run_browser(self, tally, scenario, screenshot="", page_token=PASSWORD, url=None,
                    ca_file=None):
        """Runs dashboard_browser.mjs's `scenario` against `tally` (at `url`, by default its
        plain HTTP port), the page signed in with `page_token`; returns its summary. With
        `ca_file`, the CA of an HTTPS `url`: node trusts it, chromium takes the page's
        certificate as it is."""
        for path, what in ((CHROMIUM, "chromium (make deps installs it)"),
                           (os.path.join(DASHBOARD_DIR, "node_modules", "playwright-core"),
                            "playwright-core (make deps runs npm ci in dashboard/)")):
            if not os.path.exists(path):
                self.fail("%s is missing: %s" % (path, what))
        node = shutil.which("node") or shutil.which("nodejs")
        self.assertIsNotNone(node, "node is missing (make deps installs nodejs)")
        env = dict(os.environ,
                   DASHBOARD_URL=url or "http://%s:%d/" % (HOST, tally.http_port),
                   TALLY_PORT=str(tally.server.port), TALLY_PASSWORD=PASSWORD,
                   TALLY_PAGE_TOKEN=page_token,
                   SCREENSHOT=screenshot, SCENARIO=scenario, TALLY_DASHBOARD_DIR=DASHBOARD_DIR,
                   CHROMIUM=CHROMIUM)
        if ca_file:
            env.update(NODE_EXTRA_CA_CERTS=ca_file, DASHBOARD_SELF_SIGNED="1")
        # Its own process group, so that a timeout stops chromium with it.
        proc = subprocess.Popen([node, os.path.join(HERE, "dashboard_browser.mjs")], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        try:
            output, _ = proc.communicate(timeout=BROWSER_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            output, _ = proc.communicate()
            self.fail("the browser scenario did not finish in %d s:\n%s" % (
                BROWSER_TIMEOUT, output))
        print(output, end="")
        self.assertEqual(proc.returncode, 0, output + tally.server.log_tail())
        return json.loads(output.strip().splitlines()[-1])

    def test_page_in_chromium(self):
        tally = DashboardServer(self.addCleanup)
        os.makedirs(ARTIFACTS, exist_ok=True)
        screenshot = os.path.join(ARTIFACTS, "dashboard.png")
        if os.path.exists(screenshot):
            os.remove(screenshot)
        summary = self.run_browser(tally, "main", screenshot)

        # What the page showed equals the counters, read here with another client.
        r = tally.server.client()
        self.addCleanup(r.close)
        self.assertEqual(summary["first_view"], {
            "visits:home": int(r.get("visits:home")),
            "visits:about": int(r.get("visits:about")),
        })
        self.assertEqual(summary["displayed"], {
            "likes:post:7": int(r.get("likes:post:7")),
            "blog_posts:7:3": int(r.get("blog_posts:7:3")),
        })
        self.assertEqual(summary["reloaded"], ["likes:post:7", "blog_posts:7:3"])
        self.assertIn("page:views", summary["automatic"])
        self.assertEqual(summary["live"], "live")  # values came over GET /v1/events
        self.assertTrue(os.path.getsize(screenshot) > 10000, screenshot)
        print("dashboard screenshot: %s" % screenshot)

    def test_page_over_https(self):
        # The same scenario over tallyd's --http-tls-port, with a certificate of a CA made
        # here: the page, its data calls and its live stream (SSE over TLS) all work.
        certs = Certificates()
        self.addCleanup(certs.cleanup)
        https_port = free_port()
        tally = DashboardServer(self.addCleanup, extra_args=[
            "--http-tls-port", str(https_port), "--tls-cert-file", certs.path("server.crt"),
            "--tls-key-file", certs.path("server.key")])
        os.makedirs(ARTIFACTS, exist_ok=True)
        summary = self.run_browser(tally, "main", os.path.join(ARTIFACTS, "dashboard-https.png"),
                                   url="https://%s:%d/" % (HOST, https_port),
                                   ca_file=certs.path("ca.crt"))
        self.assertEqual(summary["protocol"], "https:")
        r = tally.server.client()
        self.addCleanup(r.close)
        self.assertEqual(summary["displayed"], {
            "likes:post:7": int(r.get("likes:post:7")),
            "blog_posts:7:3": int(r.get("blog_posts:7:3")),
        })
        self.assertEqual(summary["live"], "live")

    def first_view_after_a_restart(self, extra_args=(), before_restart=None,
                                   page_token=PASSWORD):
        # Counted, then restarted: nothing is hot, and the first derived counter by name has
        # no GROUP BY; its one group must be found again in the index rebuilt at start.
        tally = DashboardServer(self.addCleanup, extra_counters="""
CREATE COUNTER all_posts AS SELECT count(*) FROM posts WHERE is_published;""",
                                extra_args=extra_args)
        changes = [{"source": "posts", "new": {
            "id": i, "user_id": i % 3, "blog_id": 1 + i % 2, "rating": i % 5,
            "is_published": i % 4 != 0, "is_deleted": False}} for i in range(1, 21)]
        tally.call("POST", "/v1/changes", json.dumps(changes))
        if before_restart is not None:
            before_restart(tally)
        tally.restart()
        listing = {c["name"]: c["groups"] for c in tally.call("GET", "/v1/definitions")["counters"]}
        self.assertEqual(listing["all_posts"], 1)
        self.assertEqual(tally.call("GET", "/v1/hot")["counters"], [])

        summary = self.run_browser(tally, "restart", page_token=page_token)
        self.assertEqual(summary["all_posts"], 15)
        self.assertEqual(summary["mode"], "automatic: the largest groups of all_posts")

    def test_first_view_after_a_restart(self):
        self.first_view_after_a_restart()

    def test_page_with_a_read_only_user(self):
        # Signed in as a user that may only read and follow counters (the scenario's writes
        # use the default user's password), kept in an aclfile across the restart: every
        # panel of the page still works.
        def add_viewer(tally):
            r = tally.server.client()
            self.addCleanup(r.close)
            self.assertTrue(r.execute_command("ACL", "SETUSER", "viewer", "on", ">view-pw",
                                              "~*", "+@read", "+@pubsub"))
            self.assertTrue(r.execute_command("ACL", "SAVE"))
            status, _, _ = request(tally.http_port, "POST", "/v1/changes",
                                   {"Authorization": "Bearer viewer:view-pw"}, b"[]")
            self.assertEqual(status, 403)  # read-only indeed

        directory = tempfile.mkdtemp(prefix="tally-dashboard-users-")
        self.addCleanup(shutil.rmtree, directory, True)
        self.first_view_after_a_restart(["--aclfile", os.path.join(directory, "users.acl")],
                                        add_viewer, "viewer:view-pw")


if __name__ == "__main__":
    unittest.main()
