"""Certificates for the TLS tests, made at test time with the openssl command (no key is ever
committed): a CA, a server certificate for 127.0.0.1 and localhost signed by it, client
certificates signed by it, and a second CA whose certificates tally must refuse."""

import os
import subprocess
import tempfile


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE)


class Certificates:
    """Files in a temporary directory: ca.crt, server.crt/.key, client.crt/.key,
    stranger.crt/.key (signed by another CA). cleanup() removes them."""

    def __init__(self):
        self._dir = tempfile.TemporaryDirectory(prefix="tally-tls-")
        self.dir = self._dir.name
        self.ca("ca")
        self.ca("other-ca")
        self.sign("server", "ca", "localhost", server=True)
        self.sign("client", "ca", "tally-client")
        self.sign("stranger", "other-ca", "stranger")

    def path(self, name):
        return os.path.join(self.dir, name)

    def ca(self, name):
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                 "-nodes", "-days", "2", "-subj", "/CN=%s" % name, "-keyout", name + ".key",
                 "-out", name + ".crt", cwd=self.dir)

    def sign(self, name, ca, common_name, server=False):
        """<name>.crt and <name>.key, signed by <ca>; a server one is valid for 127.0.0.1 and
        localhost."""
        _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-subj", "/CN=%s" % common_name, "-keyout", name + ".key", "-out",
                 name + ".csr", cwd=self.dir)
        extensions = os.path.join(self.dir, name + ".ext")
        with open(extensions, "w") as f:
            if server:
                f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                        "extendedKeyUsage=serverAuth\n")
            else:
                f.write("extendedKeyUsage=clientAuth\n")
        _openssl("x509", "-req", "-in", name + ".csr", "-CA", ca + ".crt", "-CAkey", ca + ".key",
                 "-CAcreateserial", "-days", "2", "-extfile", extensions, "-out", name + ".crt",
                 cwd=self.dir)

    def cleanup(self):
        self._dir.cleanup()
