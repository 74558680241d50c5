#include "transport/stream_ids.h"

static const echod_stream_id_range_t empty = {1, 0};

void echod_stream_ids_init(echod_stream_ids_t *ids)
{
    *ids = (echod_stream_ids_t){
        .last = -1, .reset_pinged = empty, .reset_new = empty, .goaway_last = INT32_MAX, .chunk_end = empty};
}

void echod_stream_ids__gap(echod_stream_ids_t *ids, int32_t id)
{
    echod_stream_id_range_t *g = &ids->gap[ids->gaps++ % ECHOD_STREAM_IDS_GAPS];
    g->lo = ids->last + 2;
    g->hi = id - 2;
    ids->chunk_gap = 1;
}

void echod_stream_ids_restart(echod_stream_ids_t *ids, uint8_t flags, int32_t id)
{
    echod_stream_ids_fed(ids);
    if (flags & NGHTTP2_FLAG_END_STREAM) /* the stopped frame is DATA or HEADERS */
        echod_stream_ids__widen(&ids->chunk_end, id);
}

echod_closed_frame_t echod_stream_ids_closed(const echod_stream_ids_t *ids, uint8_t type, int32_t id)
{
    if (id > ids->goaway_last)
        return ECHOD_CLOSED_FRAME_DISCARDED;
    if (type == NGHTTP2_HEADERS) {
        uint32_t kept = ids->gaps < ECHOD_STREAM_IDS_GAPS ? ids->gaps : ECHOD_STREAM_IDS_GAPS;
        for (uint32_t i = 0; i < kept; i++)
            if (echod_stream_ids__in(ids->gap[i], id))
                return ECHOD_CLOSED_FRAME_PROTOCOL_ERROR;
    }
    if (echod_stream_ids__in(ids->reset_pinged, id) || echod_stream_ids__in(ids->reset_new, id))
        return ECHOD_CLOSED_FRAME_DISCARDED;
    return ECHOD_CLOSED_FRAME_STREAM_CLOSED;
}

int echod_stream_ids_reset_sent(echod_stream_ids_t *ids, int32_t id)
{
    if (ids->ping_out) {
        echod_stream_ids__widen(&ids->reset_new, id); /* the PING in flight may have left before this reset */
        return 0;
    }
    ids->reset_pinged = empty;
    echod_stream_ids__widen(&ids->reset_pinged, id);
    ids->ping_out = 1;
    return 1;
}

int echod_stream_ids_ping_acked(echod_stream_ids_t *ids)
{
    if (!ids->ping_out)
        return 0;
    ids->reset_pinged = ids->reset_new;
    ids->reset_new = empty;
    ids->ping_out = ids->reset_pinged.lo <= ids->reset_pinged.hi;
    return ids->ping_out;
}

void echod_stream_ids_goaway_sent(echod_stream_ids_t *ids, int32_t last_stream_id)
{
    if (last_stream_id < ids->goaway_last)
        ids->goaway_last = last_stream_id;
}
