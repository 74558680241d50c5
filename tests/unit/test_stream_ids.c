/* Client stream ids a connection used (RFC 9113 5.1.1): a skipped id below the highest is the
 * error, a used one is not, and only the last ECHOD_STREAM_IDS_GAPS gaps are remembered. */
#include "check.h"
#include "transport/stream_ids.h"

static void test_consecutive_ids_have_no_gap(void)
{
    echod_stream_ids_t ids = {0};
    for (int32_t id = 1; id <= 99; id += 2)
        CHECK(echod_stream_ids_headers(&ids, id) == ECHOD_STREAM_ID_NEW);
    CHECK(ids.gaps == 0);
    CHECK(echod_stream_ids_headers(&ids, 1) == ECHOD_STREAM_ID_USED);  /* e.g. trailers */
    CHECK(echod_stream_ids_headers(&ids, 99) == ECHOD_STREAM_ID_USED); /* the highest itself */
    CHECK(echod_stream_ids_headers(&ids, 101) == ECHOD_STREAM_ID_NEW);
}

static void test_lower_skipped_id(void)
{
    /* h2spec http2/5.1.1/2: HEADERS on 5, then on 3 */
    echod_stream_ids_t ids = {0};
    CHECK(echod_stream_ids_headers(&ids, 5) == ECHOD_STREAM_ID_NEW);
    CHECK(echod_stream_ids_headers(&ids, 3) == ECHOD_STREAM_ID_SKIPPED);
    CHECK(echod_stream_ids_headers(&ids, 1) == ECHOD_STREAM_ID_SKIPPED);
    CHECK(echod_stream_ids_headers(&ids, 5) == ECHOD_STREAM_ID_USED);
    CHECK(echod_stream_ids_headers(&ids, 7) == ECHOD_STREAM_ID_NEW);
    CHECK(echod_stream_ids_headers(&ids, 13) == ECHOD_STREAM_ID_NEW); /* skips 9, 11 */
    CHECK(echod_stream_ids_headers(&ids, 9) == ECHOD_STREAM_ID_SKIPPED);
    CHECK(echod_stream_ids_headers(&ids, 11) == ECHOD_STREAM_ID_SKIPPED);
    CHECK(echod_stream_ids_headers(&ids, 7) == ECHOD_STREAM_ID_USED);
    CHECK(echod_stream_ids_headers(&ids, 13) == ECHOD_STREAM_ID_USED);
}

static void test_old_gaps_are_forgotten_not_errors(void)
{
    echod_stream_ids_t ids = {0};
    int32_t id = 1;
    CHECK(echod_stream_ids_headers(&ids, id) == ECHOD_STREAM_ID_NEW);
    for (int i = 0; i < ECHOD_STREAM_IDS_GAPS + 2; i++) { /* gaps at 3, 7, 11, ... */
        id += 4;
        CHECK(echod_stream_ids_headers(&ids, id) == ECHOD_STREAM_ID_NEW);
    }
    CHECK(ids.gaps == ECHOD_STREAM_IDS_GAPS + 2);
    CHECK(echod_stream_ids_headers(&ids, 3) == ECHOD_STREAM_ID_USED);     /* first gap: forgotten */
    CHECK(echod_stream_ids_headers(&ids, 7) == ECHOD_STREAM_ID_USED);     /* second: forgotten */
    CHECK(echod_stream_ids_headers(&ids, 11) == ECHOD_STREAM_ID_SKIPPED); /* third: still kept */
    CHECK(echod_stream_ids_headers(&ids, id - 2) == ECHOD_STREAM_ID_SKIPPED);
    CHECK(echod_stream_ids_headers(&ids, id - 4) == ECHOD_STREAM_ID_USED);
}

int main(void)
{
    test_consecutive_ids_have_no_gap();
    test_lower_skipped_id();
    test_old_gaps_are_forgotten_not_errors();
    return check_done();
}
