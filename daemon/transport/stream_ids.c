#include "transport/stream_ids.h"

echod_stream_id_kind_t echod_stream_ids_headers(echod_stream_ids_t *ids, int32_t id)
{
    if (id > ids->last) {
        int32_t expected = ids->last == 0 ? 1 : ids->last + 2;
        if (id != expected) {
            echod_stream_ids_gap_t *g = &ids->gap[ids->gaps++ % ECHOD_STREAM_IDS_GAPS];
            g->lo = expected;
            g->hi = id - 2;
        }
        ids->last = id;
        return ECHOD_STREAM_ID_NEW;
    }
    uint32_t kept = ids->gaps < ECHOD_STREAM_IDS_GAPS ? ids->gaps : ECHOD_STREAM_IDS_GAPS;
    for (uint32_t i = 0; i < kept; i++)
        if (id >= ids->gap[i].lo && id <= ids->gap[i].hi)
            return ECHOD_STREAM_ID_SKIPPED;
    return ECHOD_STREAM_ID_USED;
}
