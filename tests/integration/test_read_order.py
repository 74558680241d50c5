"""The loop's read batch (io.read_batch, docs/dispatch-model.md section 6), as a user sees it.

While a call holds the `direct-drain` loop (`echod-sleep-us` sleeps on it), connections send one
unary call each, a few milliseconds apart, so the kernel marks them ready in that order. When the
loop wakes, one wait finds all of them ready. Each call burns a few milliseconds of CPU, and the
drain writes each answer at the end of its connection's read, so the order the answers arrive in
is the order the loop served the connections:

- netty (Netty's selector loop): the order they became ready, oldest first; and a connection of
  the last batch that is ready again keeps its place in it, however many of h2o's waits the
  batch took;
- h2o (libh2o's evloop): the reverse, newest first.

And how many one batch takes: Netty every connection ready at the wait, h2o at most 256 events,
read from echod_loop_read_batch_connections. And when a connection's bytes are read: Netty at its
turn in the batch, so what its client sent while the calls before it ran is served in the same
batch (echod_loop_turn_read_bytes_total); h2o at the wait.

Run alone: ECHOD_BIN=build/daemon/echod /usr/bin/python3 tests/integration/test_read_order.py
"""

import os
import select
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from echod_harness import (SLOW, Daemon, H2Client, StreamState, grpc_frame, main,  # noqa: E402
                           pb_encode)

ARM = os.path.join("config", "arms", "direct-drain.yaml")
HOLD_US = int(400000 * SLOW)  # the loop sleeps this long while the batch builds up
SPACING_S = 0.005             # between two connections' calls: the order the kernel sees
TURN_US = int(300000 * SLOW)  # the first call of a batch sleeps this long on the loop
CPU_US = 3000                 # each call's burn: its answer leaves 3 ms after the previous one


def send_unary_counted(c, extra=()):
    """One unary call in one write (its HEADERS and its DATA with END_STREAM): its stream, and
    the bytes the write carried."""
    c.flush()
    sid = c.conn.get_next_available_stream_id()
    c.streams[sid] = StreamState(sid)
    c.conn.send_headers(sid, c.grpc_headers(extra=list(extra)))
    c.conn.send_data(sid, grpc_frame(pb_encode("order")), end_stream=True)
    data = c.conn.data_to_send()
    c.sock.sendall(data)
    return sid, len(data)


def send_unary(c, extra=()):
    return send_unary_counted(c, extra)[0]


def connected(port, n):
    clients = [H2Client(port) for _ in range(n)]
    for c in clients:
        c.wait(lambda: c.settings_acked, what="SETTINGS ack")
    return clients


def rank_correlation(order):
    """Spearman's rho between 0..n-1 and `order` (a permutation): 1 same order, -1 reversed."""
    n = len(order)
    d2 = sum((i - r) ** 2 for i, r in enumerate(order))
    return 1 - 6.0 * d2 / (n * (n * n - 1))


def batch_buckets(m):
    """echod_loop_read_batch_connections: {le: cumulative count}."""
    return {float(labels["le"]): v for labels, v in m.series("echod_loop_read_batch_connections_bucket")}


class ReadOrder(unittest.TestCase):
    def hold_loop(self, d):
        """A call that sleeps on the loop; returns the thread waiting for its answer."""
        blocker = H2Client(d.grpc_port)
        blocker.wait(lambda: blocker.settings_acked, what="SETTINGS ack")
        sid = send_unary(blocker, [("echod-sleep-us", str(HOLD_US))])
        t = threading.Thread(target=blocker.wait_done, args=(sid, 30 * SLOW))
        t.start()
        time.sleep(0.05 * SLOW)  # the loop is now inside the sleep
        return t

    def answer_order(self, read_batch, n=24):
        with Daemon(config=ARM, sets=["io.read_batch=%s" % read_batch]) as d:
            clients = connected(d.grpc_port, n)
            held = self.hold_loop(d)
            sids = []
            for c in clients:
                sids.append(send_unary(c, [("echod-cpu-us", str(CPU_US))]))
                time.sleep(SPACING_S)
            # the first bytes of each answer, in the order they arrive: groups of the answers one
            # select found together, whose order among themselves it cannot tell (a client that
            # polls late, on a loaded machine or beside a sanitized server, sees several at once)
            groups, pending = [], {c.sock: i for i, c in enumerate(clients)}
            deadline = time.monotonic() + 30 * SLOW
            while pending and time.monotonic() < deadline:
                ready, _, _ = select.select(list(pending), [], [], 1.0)
                if ready:
                    groups.append(sorted(pending.pop(sock) for sock in ready))
            held.join()
            for c, sid in zip(clients, sids):
                st = c.wait_done(sid)
                self.assertEqual(dict(st.trailers).get("grpc-status"), "0", st)
                c.close()
            arrived = [i for g in groups for i in g]
            self.assertEqual(len(arrived), n, "answers that arrived: %r" % groups)
            m = d.metrics()
            print("read_batch %s: answers in the order %s, batches %r" % (read_batch, groups, batch_buckets(m)))
            # the 3 ms between two answers kept most of them apart
            self.assertGreaterEqual(len(groups), n // 2, groups)
            # the calls were served in one batch (above 16 connections)
            self.assertGreaterEqual(m.metric("echod_loop_read_batch_connections_sum"), n)
            buckets = batch_buckets(m)
            self.assertGreater(buckets[float("inf")] - buckets[16.0], 0, buckets)
            return groups

    def assert_order(self, groups, step):
        """Every answer of a group came after every answer of the groups before it: their
        connections' ranks move by `step` (+1 oldest first, -1 newest first) from group to group,
        and as the order inside a group is not known, that order is taken as the expected one."""
        for a, b in zip(groups, groups[1:]):
            self.assertTrue(max(a) < min(b) if step > 0 else min(a) > max(b),
                            "answers out of order between %r and %r: %r" % (a, b, groups))
        arrived = [i for g in groups for i in (g if step > 0 else reversed(g))]
        self.assertEqual(rank_correlation(arrived), float(step))

    def test_netty_answers_oldest_first(self):
        self.assert_order(self.answer_order("netty"), 1)

    def test_h2o_answers_newest_first(self):
        self.assert_order(self.answer_order("h2o"), -1)

    def batch_size(self, read_batch, n=300):
        """The largest read batch while n connections became ready during one hold."""
        with Daemon(config=ARM, sets=["io.read_batch=%s" % read_batch]) as d:
            clients = connected(d.grpc_port, n)
            before = batch_buckets(d.metrics())
            held = self.hold_loop(d)
            sids = [send_unary(c) for c in clients]
            held.join()
            for c, sid in zip(clients, sids):
                c.wait_done(sid)
                c.close()
            after = batch_buckets(d.metrics())
            grew = {le: after[le] - before.get(le, 0) for le in after}
            print("read_batch %s: %d connections ready at once: batches %r" % (read_batch, n, grew))
            return grew

    def test_netty_takes_every_ready_connection(self):
        grew = self.batch_size("netty")
        # one batch of all 300 (above 256, so in the 512 bucket and not the 256 one)
        self.assertEqual(grew[512.0] - grew[256.0], 1, grew)

    def turn_read(self, read_batch):
        """Connections A then B become ready during a hold (A with a call that sleeps TURN_US on
        the loop, B with a PING), so one batch serves A, then B; B's client sends its call
        while A's sleeps. Returns the bytes read at the connections' turns, and the call's."""
        with Daemon(config=ARM, sets=["io.read_batch=%s" % read_batch]) as d:
            a, b = connected(d.grpc_port, 2)
            before = d.metrics().metric("echod_loop_turn_read_bytes_total")
            held = self.hold_loop(d)
            sid_a = send_unary(a, [("echod-sleep-us", str(TURN_US))])
            time.sleep(SPACING_S)
            b.ping()
            held.join()  # the hold's answer left: the batch of A and B begins
            time.sleep(TURN_US / 3e6)
            sid_b, call_bytes = send_unary_counted(b)
            for c, sid in ((a, sid_a), (b, sid_b)):
                st = c.wait_done(sid)
                self.assertEqual(dict(st.trailers).get("grpc-status"), "0", st)
                c.close()
            turn = d.metrics().metric("echod_loop_turn_read_bytes_total") - before
            print("read_batch %s: %d bytes read at a turn, the late call %d" % (read_batch, turn, call_bytes))
            return turn, call_bytes

    def test_netty_reads_a_connection_at_its_turn(self):
        turn, call_bytes = self.turn_read("netty")
        self.assertGreaterEqual(turn, call_bytes)

    def test_h2o_reads_at_the_wait(self):
        turn, _ = self.turn_read("h2o")
        self.assertEqual(turn, 0)

    def test_netty_keeps_the_last_batch_order(self):
        """A batch of n > 256 connections (two of h2o's waits), each client sending its next call
        as its answer arrives, after its turn: with Netty's one select and a level-triggered
        epoll, those connections stay on epoll's ready list in the batch's order and the next
        batch serves them in it. h2o's second wait drops the first wait's drained sockets from
        that list, so without echod's ordering the second wait's connections would come first
        (Spearman's rho near 0.25 over 300)."""
        n = 300
        with Daemon(config=ARM, sets=["io.read_batch=netty", "transport.flow_control_pings=false"]) as d:
            clients = connected(d.grpc_port, n)
            held = self.hold_loop(d)
            first = [send_unary(c, [("echod-cpu-us", str(CPU_US))]) for c in clients]
            second, groups = [None] * n, []
            pending = {c.sock: i for i, c in enumerate(clients)}
            deadline = time.monotonic() + 60 * SLOW
            while pending and time.monotonic() < deadline:
                ready, _, _ = select.select(list(pending), [], [], 1.0)
                group = []
                for sock in ready:
                    i = pending[sock]
                    c = clients[i]
                    c.pump(0)
                    if second[i] is None and c.streams[first[i]].done:
                        second[i] = send_unary(c, [("echod-cpu-us", str(CPU_US))])
                    elif second[i] is not None and c.streams[second[i]].headers is not None:
                        group.append(i)
                        del pending[sock]
                if group:
                    groups.append(sorted(group))
            held.join()
            for c, sid in zip(clients, second):
                self.assertIsNotNone(sid)
                self.assertEqual(dict(c.wait_done(sid).trailers).get("grpc-status"), "0")
                c.close()
            arrived = [i for g in groups for i in g]
            self.assertEqual(sorted(arrived), list(range(n)), groups)
            rho = rank_correlation(arrived)
            print("the next batch's answers: rho %.2f against the last batch's order; first groups %r" % (rho, groups[:5]))
            self.assertGreater(rho, 0.9, groups)

    def test_h2o_takes_at_most_256(self):
        grew = self.batch_size("h2o")
        self.assertEqual(grew[float("inf")] - grew[256.0], 0, grew)
        self.assertGreaterEqual(grew[float("inf")], 2, grew)


if __name__ == "__main__":
    main()
