/*
 * Listening addresses: the one "host:port" parser (config checks, the gRPC, REST and admin
 * listeners) and the one function that opens a listening TCP socket. Any thread.
 */
#ifndef ECHOD_LISTEN_H
#define ECHOD_LISTEN_H

#include <stddef.h>
#include <stdint.h>

/*
 * "host:port", "[v6]:port", "*:port" or ":port", port 0..65535 in decimal. The host is an IPv4
 * address, an IPv6 address in brackets, localhost, * or empty (the last two: every address,
 * written to host as ""). host (hostlen bytes) and port may be NULL. 0, or -1 if malformed or
 * the host does not fit.
 */
int echod_hostport_parse(const char *s, char *host, size_t hostlen, uint16_t *port);

typedef enum {
    ECHOD_LISTEN_NONBLOCK = 1 << 0,  /* O_NONBLOCK on the socket */
    ECHOD_LISTEN_REUSEPORT = 1 << 1, /* SO_REUSEPORT, so each loop can own a listener on the port */
    /* First check that no other process holds the port: SO_REUSEPORT would otherwise let a
     * second echod share it silently (only the first socket of a set can check) */
    ECHOD_LISTEN_CHECK_FREE = 1 << 2,
} echod_listen_flags_t;

/* A listening socket for addr (echod_hostport_parse's form), close-on-exec, SO_REUSEADDR; the
 * port it got in *port_out when not NULL (port 0 asks for any). -1 with err = "ADDR: why". */
int echod_listen(const char *addr, unsigned flags, int *port_out, char *err, size_t errlen);

#endif
