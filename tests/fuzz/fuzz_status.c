/*
 * libFuzzer: grpc-message percent-encoding (daemon/grpc/status.c). Encoding writes only what a
 * header value may carry and decodes back to the text (or the whole escapes that fitted);
 * decoding never overruns and never grows; any status code has a name.
 */
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "grpc/status.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t cap = data[0] == 0 ? 1 : data[0]; /* 1 .. 255: the truncation paths */
    data++, size--;

    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    size_t tlen = strlen(text);

    char *enc = malloc(cap);
    size_t elen = echod_status_encode_message(enc, cap, text);
    if (elen >= cap || enc[elen] != '\0' || strlen(enc) != elen)
        abort();
    for (size_t i = 0; i < elen; i++) {
        uint8_t c = (uint8_t)enc[i];
        if (c < 0x20 || c > 0x7E)
            abort(); /* not a valid header value byte */
        if (c == '%' && (i + 2 >= elen || !isxdigit((uint8_t)enc[i + 1]) || !isxdigit((uint8_t)enc[i + 2])))
            abort(); /* a cut or malformed escape */
    }
    char *dec = malloc(tlen + 1);
    size_t dlen = echod_status_decode_message(dec, tlen + 1, enc, elen);
    if (dlen > tlen || memcmp(dec, text, dlen) != 0)
        abort(); /* must be a prefix of the text */
    if (dlen != tlen && cap - 1 - elen >= 3)
        abort(); /* room was left for any escape, yet the text was not all encoded */

    /* arbitrary bytes as a received grpc-message, into a buffer of any size */
    char *out = malloc(cap);
    size_t olen = echod_status_decode_message(out, cap, (const char *)data, size);
    if (olen >= cap || olen > size || out[olen] != '\0')
        abort();
    int code = size >= 4 ? (int)((uint32_t)data[0] << 24 | (uint32_t)data[1] << 16 | data[2] << 8 | data[3]) : -1;
    if (echod_status_name(code) == NULL || echod_status_name(size) == NULL)
        abort();

    free(out);
    free(dec);
    free(enc);
    free(text);
    return 0;
}
