/* The TLS context of the gRPC listener: certificate, key, ALPN h2. Main thread, at start-up. */
#ifndef ECHOD_TLS_H
#define ECHOD_TLS_H

#include <stddef.h>
#include <openssl/ssl.h>

/* Returns NULL and fills err (naming the file and OpenSSL's reason) on failure. */
SSL_CTX *echod_tls_create(const char *cert_path, const char *key_path, char *err, size_t errlen);

#endif
