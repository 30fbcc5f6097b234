#!/usr/bin/env python3
"""Checks the Debian package's files against the build, without building the package (fast;
CTest runs it as packaging_files):

- debian/changelog's version is CMake's project(VERSION), and `tallyd --version` says it;
- debian/tally.conf lists every option of `tallyd --help` (but --help, --version and
  --config), each once, and names no option tallyd lacks; with every line uncommented (the
  documented defaults), tallyd starts with it and serves;
- debian/tally.tallyd.service runs tallyd with that file as its own user, with the
  hardening directives the package promises.

    check_package_files.py <source dir> <tallyd> <version>
"""

import os
import re
import socket
import subprocess
import sys
import tempfile
import time

EXCLUDED = {"help", "version", "config"}
HARDENING = ["User=tally", "Group=tally", "StateDirectory=tally", "NoNewPrivileges=yes",
             "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes", "PrivateDevices=yes",
             "CapabilityBoundingSet=", "ExecStart=/usr/bin/tallyd --config /etc/tally/tally.conf"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fail(problems, message):
    problems.append(message)


def check(source, tallyd, version):
    problems = []
    debian = os.path.join(source, "debian")

    with open(os.path.join(debian, "changelog")) as f:
        first = f.readline()
    match = re.match(r"tally \(([^)]+)\)", first)
    if not match or match.group(1) != version:
        fail(problems, "debian/changelog's first entry is %r, CMake's version %s" % (
            first.strip(), version))
    said = subprocess.run([tallyd, "--version"], capture_output=True, text=True).stdout.strip()
    if said != "tallyd " + version:
        fail(problems, "tallyd --version says %r, not 'tallyd %s'" % (said, version))

    usage = subprocess.run([tallyd, "--help"], capture_output=True, text=True).stdout
    options = set(re.findall(r"^\s+(?:-\w,)?--([a-z][a-z0-9-]*)", usage, re.M)) - EXCLUDED
    with open(os.path.join(debian, "tally.conf")) as f:
        conf = f.read()
    listed = re.findall(r"^#? ?([a-z][a-z0-9-]*) = ", conf, re.M)
    for name in sorted(options - set(listed)):
        fail(problems, "debian/tally.conf does not list --%s" % name)
    for name in sorted(set(listed) - options):
        fail(problems, "debian/tally.conf lists %s, which tallyd does not have" % name)
    for name in sorted({n for n in listed if listed.count(n) > 1}):
        fail(problems, "debian/tally.conf lists %s more than once" % name)

    # Every documented default uncommented: tallyd must take the file and serve. The store,
    # the ports and the files named go to places of this run.
    with tempfile.TemporaryDirectory(prefix="tally-conf-") as tmp:
        lines = []
        for line in conf.splitlines():
            line = re.sub(r"^# ([a-z][a-z0-9-]* = )", r"\1", line)
            if line.startswith(("data-dir = ", "source = ", "definitions = ", "port = ",
                                "http-port = ", "tls-cert-file = ", "tls-key-file = ",
                                "tls-ca-cert-file = ", "cluster-nats = ",
                                "cluster-nats-tls-")):
                continue
            lines.append(line)
        path = os.path.join(tmp, "tally.conf")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        port = free_port()
        proc = subprocess.Popen([tallyd, "--config", path, "--data-dir", os.path.join(tmp, "d"),
                                 "--port", str(port), "--http-port", "0"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.monotonic() + 20
            served = False
            while not served and time.monotonic() < deadline and proc.poll() is None:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                        s.sendall(b"AUTH change-me\r\nPING\r\n")
                        reply = b""
                        while b"+PONG" not in reply and b"-" not in reply:
                            chunk = s.recv(100)
                            if not chunk:
                                break
                            reply += chunk
                        served = b"+OK\r\n+PONG" in reply
                except OSError:
                    time.sleep(0.05)
            if not served:
                fail(problems, "tallyd did not serve with every default of debian/tally.conf")
        finally:
            proc.terminate()
            output = proc.communicate(timeout=30)[0]
        if proc.returncode != 0:
            fail(problems, "tallyd with debian/tally.conf exited %s:\n%s" % (proc.returncode,
                                                                           output))

    with open(os.path.join(debian, "tally.tallyd.service")) as f:
        unit = f.read().splitlines()
    for directive in HARDENING:
        if directive not in unit:
            fail(problems, "debian/tally.tallyd.service lacks %s" % directive)
    return problems, len(options)


def main():
    source, tallyd, version = sys.argv[1:4]
    problems, options = check(source, tallyd, version)
    for problem in problems:
        print("FAIL: " + problem)
    if problems:
        print("%d problem(s) in the package's files" % len(problems))
        return 1
    print("package files: version %s, %d options in tally.conf, unit hardened" % (
        version, options))
    return 0


if __name__ == "__main__":
    sys.exit(main())
