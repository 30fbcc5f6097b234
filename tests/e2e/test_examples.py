"""The client examples (examples/), each run against a fresh tallyd: its output must be the
tour's transcript exactly (examples/expected-output.txt; the browser's own
examples/browser/expected-output.txt), and the counters it leaves must be read back from
the server with another client (redis-py): the values, not "it ran".

One class per language, so that CTest runs each as its own test (e2e_example_<language>):
Python (python3-redis and urllib), Node.js (ioredis from examples/node/node_modules, and
fetch), Ruby (ruby-redis), PHP (php-redis), Go and Java (their standard libraries' HTTP
clients; Java's JSON by Debian's Jackson), and the web page (fetch, EventSource and
WebSocket in chromium, driven by examples_browser.mjs).

Environment (set by CTest): TALLY_GO_CACHE (Go's build cache; default a temporary
directory), TALLY_DASHBOARD_DIR (playwright-core's node_modules), CHROMIUM.
"""

import json
import os
import shutil
import subprocess
import tempfile
import unittest

from harness import TallyServer, free_port, tally_only

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.normpath(os.path.join(HERE, "..", "..", "examples"))
DASHBOARD_DIR = os.environ.get("TALLY_DASHBOARD_DIR",
                               os.path.normpath(os.path.join(HERE, "..", "..", "dashboard")))
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
JACKSON = ":".join("/usr/share/java/jackson-%s.jar" % name
                   for name in ("databind", "core", "annotations"))
RUN_TIMEOUT = 180  # seconds for one example, compilation included


def expected(path):
    with open(os.path.join(EXAMPLES, path)) as f:
        return f.read()


@tally_only
class ExampleCase(unittest.TestCase):
    """A fresh tallyd per example, on free ports."""

    def setUp(self):
        self.http_port = free_port()
        self.server = TallyServer(extra_args=["--http-port", str(self.http_port)])
        self.addCleanup(self.server.cleanup)
        self.server.start()

    def run_example(self, command, folder, env=None):
        """Runs `command` in examples/<folder> against the server; returns its stdout."""
        environment = dict(os.environ, TALLY_HOST="127.0.0.1", TALLY_PORT=str(self.server.port),
                           TALLY_HTTP_PORT=str(self.http_port), **(env or {}))
        tool = shutil.which(command[0])
        self.assertIsNotNone(tool, "%s is missing: make deps installs it" % command[0])
        result = subprocess.run(command, cwd=os.path.join(EXAMPLES, folder), env=environment,
                                capture_output=True, text=True, timeout=RUN_TIMEOUT)
        self.assertEqual(result.returncode, 0, "%s failed:\n%s%s%s" % (
            " ".join(command), result.stdout, result.stderr, self.server.log_tail()))
        return result.stdout

    def check_tour(self, command, folder, env=None):
        self.assertEqual(self.run_example(command, folder, env), expected("expected-output.txt"))
        # What the tour left, read back with another client.
        r = self.server.client()
        self.addCleanup(r.close)
        self.assertEqual(r.get("likes:post:7"), "102")   # 100, then two while followed live
        self.assertEqual(r.get("api:calls:alice"), "5")  # every call counted, 2 denied
        self.assertTrue(0 < r.ttl("api:calls:alice") <= 60)
        self.assertEqual(r.mget("blog_posts:7:3", "blog_posts:7:5", "blog_posts:8:5"),
                         ["1", "2", "1"])
        self.assertEqual(r.execute_command("COUNTER.GET", "blog_posts", 7, 3), 1)


class PythonExample(ExampleCase):
    def test_tour(self):
        self.check_tour(["/usr/bin/python3", "tour.py"], "python")


class NodeExample(ExampleCase):
    def test_tour(self):
        self.assertTrue(os.path.isdir(os.path.join(EXAMPLES, "node", "node_modules", "ioredis")),
                        "examples/node/node_modules is missing: make deps runs npm ci there")
        self.check_tour(["node", "tour.mjs"], "node")


class RubyExample(ExampleCase):
    def test_tour(self):
        self.check_tour(["ruby", "tour.rb"], "ruby")


class PhpExample(ExampleCase):
    def test_tour(self):
        self.check_tour(["php", "tour.php"], "php")


class GoExample(ExampleCase):
    def test_tour(self):
        cache = os.environ.get("TALLY_GO_CACHE") or tempfile.mkdtemp(prefix="tally-go-")
        # Offline and without the module cache: the example uses the standard library only.
        self.check_tour(["go", "run", "."], "go",
                        {"GOCACHE": cache, "GOPROXY": "off", "GOFLAGS": "-mod=mod",
                         "GOPATH": os.path.join(cache, "gopath")})


class JavaExample(ExampleCase):
    def test_tour(self):
        for jar in JACKSON.split(":"):
            self.assertTrue(os.path.exists(jar), jar + " is missing: make deps installs "
                            "libjackson2-databind-java")
        self.check_tour(["java", "-cp", JACKSON, "Tour.java"], "java")


class BrowserExample(ExampleCase):
    def test_tour(self):
        self.assertTrue(os.path.isdir(os.path.join(DASHBOARD_DIR, "node_modules",
                                                   "playwright-core")),
                        "playwright-core is missing: make deps runs npm ci in dashboard/")
        self.assertTrue(os.path.exists(CHROMIUM), "chromium is missing: make deps installs it")
        env = {"TALLY_HTTP": "http://127.0.0.1:%d" % self.http_port,
               "EXAMPLE_DIR": os.path.join(EXAMPLES, "browser"),
               "TALLY_DASHBOARD_DIR": DASHBOARD_DIR, "CHROMIUM": CHROMIUM}
        output = self.run_example(["node", os.path.join(HERE, "examples_browser.mjs")],
                                  "browser", env)
        result = json.loads(output.strip().splitlines()[-1])
        self.assertEqual(result["done"], "ok", result["output"])
        self.assertEqual(result["output"], expected("browser/expected-output.txt"))
        r = self.server.client()
        self.addCleanup(r.close)
        self.assertEqual(r.mget("blog_posts:7:3", "blog_posts:7:5", "blog_posts:8:5"),
                         ["1", "5", "1"])  # posts 5, 6 and 7 pushed while followed live


if __name__ == "__main__":
    unittest.main()
