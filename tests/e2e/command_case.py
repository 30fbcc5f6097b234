"""What the Redis command tests share (test_commands, test_consistency, test_server): Redis's
error texts, INFO parsing, and RawTestCase, a byte-exact connection per test.
"""


from harness import ServerTestCase


I64_MAX = 9223372036854775807
I64_MIN = -9223372036854775808
NOT_INT = "ERR value is not an integer or out of range"
OVERFLOW = "ERR increment or decrement would overflow"
SYNTAX = "ERR syntax error"


def wrong_args(name):
    return "ERR wrong number of arguments for '%s' command" % name


def info_fields(text):
    """INFO text -> {field: value}, plus {'#sections': [names]}."""
    fields = {"#sections": []}
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith("#"):
            fields["#sections"].append(line[1:].strip().lower())
            continue
        key, _, value = line.partition(":")
        fields[key] = value
    return fields


class RawTestCase(ServerTestCase):
    """self.c: a raw connection (byte-exact replies and error texts); self.call = self.c.call."""

    def setUp(self):
        super().setUp()
        self.c = self.raw()
        self.call = self.c.call
