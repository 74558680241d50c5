"""Rules of the daemon's source that no compiler checks (docs/threads.md).

- One out-of-memory policy (util/err.h): every allocation echod makes is the argument of
  echod_must, which aborts through echod_oom naming what it allocated, so no caller can read a
  failed allocation as something else (a lost grpc-message, a health watch that never answers, a
  call answered RESOURCE_EXHAUSTED). The one allocator that returns NULL is util/pool.c's, whose
  callers wrap it; protobuf-c's unpacks take echod_pb_allocator (services/pb.h), which aborts too.
- The layers meet at one seam: no file of daemon/dispatch or daemon/services includes a
  transport/ header, and the connection's internals (transport/conn_internal.h) are included by
  the transport's own .c files only.

Run on its own: /usr/bin/python3 tests/integration/test_source_rules.py
"""

import os
import re
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from echod_harness import ROOT, main  # noqa: E402

DAEMON = os.path.join(ROOT, "daemon")
ALLOCATORS = "|".join([
    "malloc", "calloc", "realloc", "reallocarray", "aligned_alloc", "posix_memalign", "memalign", "valloc",
    "strdup", "strndup", "asprintf", "vasprintf",
    "echod_pool_malloc", "echod_pool_calloc", "echod_pool_realloc", "echod_pool_thread_malloc"])
ALLOC_CALL = re.compile(r"\b(%s)\s*\(" % ALLOCATORS)
# the allocator itself: it returns NULL, and every caller wraps it
EXEMPT = {"util/pool.c"}


def sources():
    for d, _, files in os.walk(DAEMON):
        for f in sorted(files):
            if f.endswith((".c", ".h")):
                path = os.path.join(d, f)
                yield os.path.relpath(path, DAEMON), path


def code_only(text):
    """The text with comments and string and character literals blanked (lines kept)."""
    def blank(m):
        return re.sub(r"[^\n]", " ", m.group(0))
    return re.sub(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', blank, text, flags=re.S)


def call_arguments(code, start):
    """The text between the parenthesis before `start` and the one that closes it."""
    depth, i = 1, start
    while depth and i < len(code):
        depth += {"(": 1, ")": -1}.get(code[i], 0)
        i += 1
    return code[start:i - 1]


def unchecked_allocations(text):
    """(line, call) of each allocation whose result is not echod_must's argument."""
    code = code_only(text)
    found = []
    for m in ALLOC_CALL.finditer(code):
        before = code[:m.start()].rstrip()
        if before.endswith("echod_must("):
            continue
        # a definition or declaration of a function of that name (pool.h declares the pool's)
        if re.search(r"\b(void|char)\s*\*\s*$", before):
            continue
        found.append((code.count("\n", 0, m.start()) + 1, m.group(1)))
    return found


class OutOfMemoryPolicy(unittest.TestCase):
    def test_every_allocation_is_checked(self):
        bad = []
        for rel, path in sources():
            if rel in EXEMPT:
                continue
            with open(path, encoding="utf-8") as f:
                for line, call in unchecked_allocations(f.read()):
                    bad.append("daemon/%s:%d: %s() not wrapped in echod_must" % (rel, line, call))
        self.assertEqual(bad, [], "outside the out-of-memory policy (util/err.h):\n" + "\n".join(bad))

    def test_protobuf_unpacks_use_the_policy_allocator(self):
        bad = []
        for rel, path in sources():
            with open(path, encoding="utf-8") as f:
                code = code_only(f.read())
            for m in re.finditer(r"\b\w+__(unpack|free_unpacked)\s*\(", code):
                if "echod_pb_allocator" not in call_arguments(code, m.end()):
                    bad.append("daemon/%s:%d: %s without echod_pb_allocator"
                               % (rel, code.count("\n", 0, m.start()) + 1, m.group(1)))
        self.assertEqual(bad, [], "\n".join(bad))

    def test_the_checker_sees_what_it_must(self):
        """The rule itself: a bare call, a call on the next line of its use, and one in a
        condition are reported; a wrapped one (over two lines too), comments and strings not."""
        text = ('char *a = strdup(s);\n'
                'if ((b = malloc(n)) == NULL)\n'
                '    return;\n'
                'c = echod_must(calloc(1, n), "c");\n'
                'd = echod_must(\n    realloc(d, n), "d");\n'
                '/* realloc(x) in a comment */ e = f("strdup(");\n'
                'void *echod_pool_malloc(echod_pool_t *pool, size_t size);\n'
                'x =\n    echod_pool_calloc(p, 1, n);\n')
        self.assertEqual(unchecked_allocations(text),
                         [(1, "strdup"), (2, "malloc"), (10, "echod_pool_calloc")])


class Layers(unittest.TestCase):
    def includes(self, path):
        with open(path, encoding="utf-8") as f:
            return re.findall(r'^\s*#\s*include\s+"([^"]+)"', f.read(), re.M)

    def test_dispatch_and_services_include_no_transport_header(self):
        bad = ["daemon/%s includes %s" % (rel, inc) for rel, path in sources()
               if rel.startswith(("dispatch/", "services/"))
               for inc in self.includes(path) if inc.startswith("transport/")]
        self.assertEqual(bad, [])

    def test_connection_internals_stay_in_the_transport(self):
        users = [rel for rel, path in sources() if "transport/conn_internal.h" in self.includes(path)]
        self.assertEqual(sorted(users), ["transport/conn.c", "transport/stream.c"])


if __name__ == "__main__":
    main()
