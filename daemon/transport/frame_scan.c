#include "transport/frame_scan.h"

void echod_frame_scan_init(echod_frame_scan_t *fs)
{
    *fs = (echod_frame_scan_t){.skip = NGHTTP2_CLIENT_MAGIC_LEN};
}

int echod_frame_scan__slow(echod_frame_scan_t *fs, const uint8_t **p, const uint8_t *end, echod_frame_hd_t *hd)
{
    const uint8_t *in = *p;
    if (fs->have == 0) { /* a header begins after the payload and ends in a later read */
        in += fs->skip;
        fs->skip = 0;
    }
    size_t n = ECHOD_FRAME_HEADER - fs->have;
    if (n > (size_t)(end - in))
        n = (size_t)(end - in);
    memcpy(fs->hd + fs->have, in, n);
    fs->have = (uint8_t)(fs->have + n);
    *p = in + n;
    if (fs->have < ECHOD_FRAME_HEADER)
        return 0;
    fs->have = 0;
    echod_frame_scan__header(fs, fs->hd, hd);
    return 1;
}
