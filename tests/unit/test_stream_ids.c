/* Client stream ids (transport/stream_ids.h) and the frame scanner in front of them
 * (transport/frame_scan.h): which frames may be on a closed stream, and how each is answered. */
#include <stdlib.h>
#include <string.h>
#include <nghttp2/nghttp2.h>
#include "check.h"
#include "transport/frame_scan.h"
#include "transport/stream_ids.h"

#define ES NGHTTP2_FLAG_END_STREAM

static echod_frame_need_t scan(echod_stream_ids_t *ids, uint8_t type, uint8_t flags, int32_t id)
{
    return echod_stream_ids_scan(ids, type, flags, id);
}

static void test_new_streams_need_nothing(void)
{
    /* a batch of unary calls in one read: HEADERS, DATA with END_STREAM, for 1, 3, 5, ... */
    echod_stream_ids_t ids;
    echod_stream_ids_init(&ids);
    echod_stream_ids_fed(&ids);
    for (int32_t id = 1; id <= 99; id += 2) {
        CHECK(scan(&ids, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS, id) == ECHOD_FRAME_PASS);
        CHECK(scan(&ids, NGHTTP2_DATA, ES, id) == ECHOD_FRAME_PASS);
        CHECK(scan(&ids, NGHTTP2_WINDOW_UPDATE, 0, 0) == ECHOD_FRAME_PASS);
    }
    CHECK(ids.last == 99 && ids.gaps == 0);
    /* the next read: those streams were open before it, so nghttp2 is asked */
    echod_stream_ids_fed(&ids);
    CHECK(scan(&ids, NGHTTP2_DATA, 0, 99) == ECHOD_FRAME_LOOKUP);
    CHECK(scan(&ids, NGHTTP2_HEADERS, ES, 97) == ECHOD_FRAME_LOOKUP); /* trailers */
    /* after a frame that may have ended 97, a frame on it needs nghttp2 to have read that one */
    CHECK(scan(&ids, NGHTTP2_DATA, 0, 97) == ECHOD_FRAME_STOP);
    CHECK(scan(&ids, NGHTTP2_DATA, 0, 99) == ECHOD_FRAME_LOOKUP);
    /* idle ids, server ids and the connection are nghttp2's alone */
    CHECK(scan(&ids, NGHTTP2_DATA, 0, 101) == ECHOD_FRAME_PASS);
    CHECK(scan(&ids, NGHTTP2_DATA, 0, 2) == ECHOD_FRAME_PASS);
    CHECK(scan(&ids, NGHTTP2_HEADERS, 0, 4) == ECHOD_FRAME_PASS);
    CHECK(scan(&ids, NGHTTP2_DATA, 0, 0) == ECHOD_FRAME_PASS);
    CHECK(scan(&ids, NGHTTP2_PRIORITY, 0, 1) == ECHOD_FRAME_PASS);
    CHECK(scan(&ids, NGHTTP2_WINDOW_UPDATE, 0, 1) == ECHOD_FRAME_PASS);
}

static void test_frames_after_an_end_in_the_same_read(void)
{
    /* h2spec http2/5.1/8: HEADERS, RST_STREAM, DATA, written together */
    echod_stream_ids_t ids;
    echod_stream_ids_init(&ids);
    echod_stream_ids_fed(&ids);
    CHECK(scan(&ids, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS, 1) == ECHOD_FRAME_PASS);
    CHECK(scan(&ids, NGHTTP2_RST_STREAM, 0, 1) == ECHOD_FRAME_PASS);
    CHECK(scan(&ids, NGHTTP2_DATA, ES, 1) == ECHOD_FRAME_STOP);
    /* the chunk restarts at the stopped frame: its own END_STREAM counts in the new one */
    echod_stream_ids_restart(&ids, ES, 1);
    CHECK(scan(&ids, NGHTTP2_HEADERS, 0, 1) == ECHOD_FRAME_STOP);
    /* http2/5.1/5: HEADERS with END_STREAM then DATA: nghttp2 must read the HEADERS first */
    CHECK(scan(&ids, NGHTTP2_HEADERS, ES | NGHTTP2_FLAG_END_HEADERS, 3) == ECHOD_FRAME_PASS);
    CHECK(scan(&ids, NGHTTP2_DATA, 0, 3) == ECHOD_FRAME_STOP);
    /* an end on another stream does not stop frames outside the ids it covers */
    echod_stream_ids_fed(&ids);
    CHECK(scan(&ids, NGHTTP2_HEADERS, 0, 5) == ECHOD_FRAME_PASS);
    CHECK(scan(&ids, NGHTTP2_DATA, ES, 5) == ECHOD_FRAME_PASS);
    CHECK(scan(&ids, NGHTTP2_HEADERS, 0, 7) == ECHOD_FRAME_PASS);
    CHECK(scan(&ids, NGHTTP2_DATA, 0, 7) == ECHOD_FRAME_PASS);
}

static void test_gaps(void)
{
    /* h2spec http2/5.1.1/2: HEADERS on 5, then on 3 */
    echod_stream_ids_t ids;
    echod_stream_ids_init(&ids);
    echod_stream_ids_fed(&ids);
    CHECK(scan(&ids, NGHTTP2_HEADERS, 0, 5) == ECHOD_FRAME_PASS);
    CHECK(scan(&ids, NGHTTP2_HEADERS, 0, 3) == ECHOD_FRAME_STOP); /* 3 was never opened in this chunk */
    CHECK(scan(&ids, NGHTTP2_DATA, 0, 1) == ECHOD_FRAME_STOP);
    CHECK(echod_stream_ids_closed(&ids, NGHTTP2_HEADERS, 3) == ECHOD_CLOSED_FRAME_PROTOCOL_ERROR);
    CHECK(echod_stream_ids_closed(&ids, NGHTTP2_HEADERS, 1) == ECHOD_CLOSED_FRAME_PROTOCOL_ERROR);
    /* a skipped id is closed (RFC 9113 5.1.1): DATA on it is STREAM_CLOSED, as on a used one */
    CHECK(echod_stream_ids_closed(&ids, NGHTTP2_DATA, 3) == ECHOD_CLOSED_FRAME_STREAM_CLOSED);
    CHECK(echod_stream_ids_closed(&ids, NGHTTP2_HEADERS, 5) == ECHOD_CLOSED_FRAME_STREAM_CLOSED);
    /* only the last ECHOD_STREAM_IDS_GAPS gaps are kept: an older one is a closed stream */
    int32_t id = 5;
    for (int i = 0; i < ECHOD_STREAM_IDS_GAPS; i++) { /* gaps at 7, 11, 15, ... */
        id += 4;
        CHECK(scan(&ids, NGHTTP2_HEADERS, 0, id) == ECHOD_FRAME_PASS);
    }
    CHECK(ids.gaps == ECHOD_STREAM_IDS_GAPS + 1);
    CHECK(echod_stream_ids_closed(&ids, NGHTTP2_HEADERS, 3) == ECHOD_CLOSED_FRAME_STREAM_CLOSED);
    CHECK(echod_stream_ids_closed(&ids, NGHTTP2_HEADERS, 7) == ECHOD_CLOSED_FRAME_PROTOCOL_ERROR);
    CHECK(echod_stream_ids_closed(&ids, NGHTTP2_HEADERS, id - 2) == ECHOD_CLOSED_FRAME_PROTOCOL_ERROR);
    CHECK(echod_stream_ids_closed(&ids, NGHTTP2_HEADERS, id) == ECHOD_CLOSED_FRAME_STREAM_CLOSED);
}

static void test_resets_until_the_ping_comes_back(void)
{
    echod_stream_ids_t ids;
    echod_stream_ids_init(&ids);
    echod_stream_ids_fed(&ids);
    for (int32_t id = 1; id <= 21; id += 2)
        scan(&ids, NGHTTP2_HEADERS, 0, id);
    CHECK(echod_stream_ids_closed(&ids, NGHTTP2_DATA, 5) == ECHOD_CLOSED_FRAME_STREAM_CLOSED);
    CHECK(echod_stream_ids_reset_sent(&ids, 5) == 1); /* the first: send the PING */
    CHECK(echod_stream_ids_reset_sent(&ids, 9) == 0); /* one in flight already */
    CHECK(echod_stream_ids_reset_sent(&ids, 13) == 0);
    CHECK(echod_stream_ids_closed(&ids, NGHTTP2_DATA, 5) == ECHOD_CLOSED_FRAME_DISCARDED);
    CHECK(echod_stream_ids_closed(&ids, NGHTTP2_HEADERS, 9) == ECHOD_CLOSED_FRAME_DISCARDED);
    CHECK(echod_stream_ids_closed(&ids, NGHTTP2_DATA, 11) == ECHOD_CLOSED_FRAME_DISCARDED); /* inside a range */
    CHECK(echod_stream_ids_closed(&ids, NGHTTP2_DATA, 3) == ECHOD_CLOSED_FRAME_STREAM_CLOSED);
    CHECK(echod_stream_ids_closed(&ids, NGHTTP2_DATA, 15) == ECHOD_CLOSED_FRAME_STREAM_CLOSED);
    /* the ack covers 5; 9 and 13 may have left after that PING: one more for them */
    CHECK(echod_stream_ids_ping_acked(&ids) == 1);
    CHECK(echod_stream_ids_closed(&ids, NGHTTP2_DATA, 5) == ECHOD_CLOSED_FRAME_STREAM_CLOSED);
    CHECK(echod_stream_ids_closed(&ids, NGHTTP2_DATA, 9) == ECHOD_CLOSED_FRAME_DISCARDED);
    CHECK(echod_stream_ids_reset_sent(&ids, 17) == 0);
    CHECK(echod_stream_ids_ping_acked(&ids) == 1); /* for 17 */
    CHECK(echod_stream_ids_closed(&ids, NGHTTP2_DATA, 13) == ECHOD_CLOSED_FRAME_STREAM_CLOSED);
    CHECK(echod_stream_ids_closed(&ids, NGHTTP2_DATA, 17) == ECHOD_CLOSED_FRAME_DISCARDED);
    CHECK(echod_stream_ids_ping_acked(&ids) == 0); /* nothing left: no PING */
    CHECK(echod_stream_ids_closed(&ids, NGHTTP2_DATA, 17) == ECHOD_CLOSED_FRAME_STREAM_CLOSED);
    CHECK(echod_stream_ids_ping_acked(&ids) == 0); /* an ack nobody asked for changes nothing */
    CHECK(echod_stream_ids_reset_sent(&ids, 19) == 1);
    CHECK(echod_stream_ids_closed(&ids, NGHTTP2_DATA, 19) == ECHOD_CLOSED_FRAME_DISCARDED);
}

static void test_goaway(void)
{
    echod_stream_ids_t ids;
    echod_stream_ids_init(&ids);
    echod_stream_ids_fed(&ids);
    for (int32_t id = 1; id <= 9; id += 2)
        scan(&ids, NGHTTP2_HEADERS, 0, id);
    echod_stream_ids_goaway_sent(&ids, INT32_MAX); /* the notice: nothing is refused yet */
    CHECK(echod_stream_ids_closed(&ids, NGHTTP2_DATA, 9) == ECHOD_CLOSED_FRAME_STREAM_CLOSED);
    echod_stream_ids_goaway_sent(&ids, 5);
    scan(&ids, NGHTTP2_HEADERS, 0, 13); /* sent before the client read the GOAWAY: nghttp2 ignored it */
    CHECK(echod_stream_ids_closed(&ids, NGHTTP2_DATA, 7) == ECHOD_CLOSED_FRAME_DISCARDED);
    CHECK(echod_stream_ids_closed(&ids, NGHTTP2_HEADERS, 11) == ECHOD_CLOSED_FRAME_DISCARDED); /* skipped */
    CHECK(echod_stream_ids_closed(&ids, NGHTTP2_DATA, 13) == ECHOD_CLOSED_FRAME_DISCARDED);
    CHECK(echod_stream_ids_closed(&ids, NGHTTP2_DATA, 5) == ECHOD_CLOSED_FRAME_STREAM_CLOSED);
}

/* --- the frame scanner --- */

static size_t frame(uint8_t *p, uint32_t len, uint8_t type, uint8_t flags, uint32_t id)
{
    p[0] = (uint8_t)(len >> 16), p[1] = (uint8_t)(len >> 8), p[2] = (uint8_t)len;
    p[3] = type, p[4] = flags;
    p[5] = (uint8_t)(id >> 24), p[6] = (uint8_t)(id >> 16), p[7] = (uint8_t)(id >> 8), p[8] = (uint8_t)id;
    memset(p + 9, 0xab, len);
    return 9 + len;
}

typedef struct {
    uint8_t type, flags;
    int32_t id;
    uint32_t len;
    int in_block;
    size_t end; /* offset just past the header */
} seen_t;

/* Scans buf in pieces of `step` bytes (the reads); returns the headers found, with offsets. */
static size_t scan_all(const uint8_t *buf, size_t n, size_t step, seen_t *out, size_t max)
{
    echod_frame_scan_t fs;
    echod_frame_scan_init(&fs);
    size_t count = 0;
    for (size_t off = 0; off < n;) {
        size_t piece = n - off < step ? n - off : step;
        const uint8_t *p = buf + off, *end = p + piece;
        echod_frame_hd_t hd;
        while (p < end)
            if (echod_frame_scan(&fs, &p, end, &hd) && count < max)
                out[count++] = (seen_t){hd.type, hd.flags, hd.stream_id, hd.length, hd.in_block, (size_t)(p - buf)};
        off += piece;
    }
    return count;
}

static void test_scanner_finds_every_header_whatever_the_reads(void)
{
    static uint8_t buf[4096];
    size_t n = 0;
    memcpy(buf, NGHTTP2_CLIENT_MAGIC, NGHTTP2_CLIENT_MAGIC_LEN);
    n += NGHTTP2_CLIENT_MAGIC_LEN;
    size_t ends[7];
    n += frame(buf + n, 6, NGHTTP2_SETTINGS, 0, 0), ends[0] = n - 6;
    n += frame(buf + n, 20, NGHTTP2_HEADERS, 0, 1), ends[1] = n - 20; /* no END_HEADERS: a block */
    n += frame(buf + n, 5, NGHTTP2_CONTINUATION, 0, 1), ends[2] = n - 5;
    n += frame(buf + n, 7, NGHTTP2_CONTINUATION, NGHTTP2_FLAG_END_HEADERS, 1), ends[3] = n - 7;
    n += frame(buf + n, 0, NGHTTP2_DATA, ES, 1), ends[4] = n;
    n += frame(buf + n, 1000, NGHTTP2_DATA, 0, 0x80000003u), ends[5] = n - 1000; /* the R bit is not the id */
    n += frame(buf + n, 4, NGHTTP2_RST_STREAM, 0, 3), ends[6] = n - 4;
    static const size_t steps[] = {1, 2, 8, 9, 10, 33, 4096};
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        seen_t seen[16];
        size_t count = scan_all(buf, n, steps[i], seen, 16);
        CHECK(count == 7);
        if (count != 7)
            continue;
        for (size_t k = 0; k < 7; k++)
            CHECK(seen[k].end == ends[k]);
        CHECK(seen[0].type == NGHTTP2_SETTINGS && seen[0].id == 0 && seen[0].len == 6 && !seen[0].in_block);
        CHECK(seen[1].type == NGHTTP2_HEADERS && seen[1].id == 1 && !seen[1].in_block);
        CHECK(seen[2].type == NGHTTP2_CONTINUATION && seen[2].in_block);
        CHECK(seen[3].type == NGHTTP2_CONTINUATION && seen[3].in_block);
        CHECK(seen[4].type == NGHTTP2_DATA && seen[4].flags == ES && seen[4].len == 0 && !seen[4].in_block);
        CHECK(seen[5].id == 3 && seen[5].len == 1000);
        CHECK(seen[6].type == NGHTTP2_RST_STREAM && seen[6].id == 3);
    }
}

static void test_scanner_random_splits(void)
{
    /* random frames cut at random points: the same headers at the same offsets as in one read */
    static uint8_t buf[1 << 16];
    srand(25);
    for (int round = 0; round < 200; round++) {
        size_t n = NGHTTP2_CLIENT_MAGIC_LEN;
        memcpy(buf, NGHTTP2_CLIENT_MAGIC, n);
        while (n < sizeof(buf) - 2000)
            n += frame(buf + n, (uint32_t)(rand() % 1000), (uint8_t)(rand() % 10), (uint8_t)rand(),
                       (uint32_t)(rand() % 64));
        seen_t whole[8192], cut[8192];
        size_t a = scan_all(buf, n, n, whole, 8192);
        echod_frame_scan_t fs;
        echod_frame_scan_init(&fs);
        size_t b = 0;
        for (size_t off = 0; off < n;) {
            size_t piece = 1 + (size_t)(rand() % 3000);
            if (piece > n - off)
                piece = n - off;
            const uint8_t *p = buf + off, *end = p + piece;
            echod_frame_hd_t hd;
            while (p < end)
                if (echod_frame_scan(&fs, &p, end, &hd) && b < 8192)
                    cut[b++] = (seen_t){hd.type, hd.flags, hd.stream_id, hd.length, hd.in_block, (size_t)(p - buf)};
            off += piece;
        }
        int same = a == b && a > 0;
        for (size_t k = 0; same && k < a; k++)
            same = whole[k].type == cut[k].type && whole[k].flags == cut[k].flags && whole[k].id == cut[k].id &&
                   whole[k].len == cut[k].len && whole[k].in_block == cut[k].in_block && whole[k].end == cut[k].end;
        CHECK(same);
    }
}

int main(void)
{
    test_new_streams_need_nothing();
    test_frames_after_an_end_in_the_same_read();
    test_gaps();
    test_resets_until_the_ping_comes_back();
    test_goaway();
    test_scanner_finds_every_header_whatever_the_reads();
    test_scanner_random_splits();
    return check_done();
}
