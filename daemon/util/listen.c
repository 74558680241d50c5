#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "util/err.h"
#include "util/listen.h"

int echod_hostport_parse(const char *s, char *host, size_t hostlen, uint16_t *port)
{
    const char *colon;
    size_t hlen;
    char buf[64];

    if (s == NULL)
        return -1;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (close == NULL || close[1] != ':')
            return -1;
        hlen = (size_t)(close - (s + 1));
        colon = close + 1;
        struct in6_addr a6;
        if (hlen == 0 || hlen >= sizeof(buf))
            return -1;
        memcpy(buf, s + 1, hlen);
        buf[hlen] = '\0';
        if (inet_pton(AF_INET6, buf, &a6) != 1)
            return -1;
    } else {
        /* The last colon, so that a bare IPv6 literal fails the host check instead of splitting oddly. */
        colon = strrchr(s, ':');
        if (colon == NULL)
            return -1;
        hlen = (size_t)(colon - s);
        if (hlen >= sizeof(buf))
            return -1;
        memcpy(buf, s, hlen);
        buf[hlen] = '\0';
        struct in_addr a4;
        if (strcmp(buf, "*") == 0) {
            buf[0] = '\0';
            hlen = 0;
        } else if (hlen != 0 && strcmp(buf, "localhost") != 0 && inet_pton(AF_INET, buf, &a4) != 1) {
            return -1;
        }
    }
    const char *digits = colon + 1;
    size_t ndigits = strlen(digits);
    if (ndigits == 0 || ndigits > 5 || strspn(digits, "0123456789") != ndigits)
        return -1;
    unsigned long p = strtoul(digits, NULL, 10);
    if (p > 65535)
        return -1;
    if (host != NULL) {
        if (hlen >= hostlen)
            return -1;
        memcpy(host, buf, hlen);
        host[hlen] = '\0';
    }
    if (port != NULL)
        *port = (uint16_t)p;
    return 0;
}

int echod_listen(const char *addr, unsigned flags, int *port_out, char *err, size_t errlen)
{
    char host[64], port[8];
    uint16_t portnum;
    if (echod_hostport_parse(addr, host, sizeof(host), &portnum) != 0) {
        echod_set_err(err, errlen, "%s: expected host:port", addr);
        return -1;
    }
    snprintf(port, sizeof(port), "%u", portnum);
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV},
                    *res;
    int gai = getaddrinfo(host[0] != '\0' ? host : NULL, port, &hints, &res);
    if (gai != 0) {
        echod_set_err(err, errlen, "%s: %s", addr, gai_strerror(gai));
        return -1;
    }
    int type = SOCK_STREAM | SOCK_CLOEXEC | ((flags & ECHOD_LISTEN_NONBLOCK) ? SOCK_NONBLOCK : 0);
    int fd = -1, saved = 0, one = 1;
    for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
        if (flags & ECHOD_LISTEN_CHECK_FREE) {
            /* a plain bind says whether anyone else holds the port */
            int probe = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
            if (probe >= 0) {
                setsockopt(probe, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
                int busy = bind(probe, ai->ai_addr, ai->ai_addrlen) != 0 && errno == EADDRINUSE;
                saved = errno;
                close(probe);
                if (busy)
                    break;
                saved = 0;
            }
        }
        if ((fd = socket(ai->ai_family, type, 0)) < 0) {
            saved = errno;
            continue;
        }
        if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0 &&
            (!(flags & ECHOD_LISTEN_REUSEPORT) || setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) == 0) &&
            bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 4096) == 0)
            break;
        saved = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        echod_set_err(err, errlen, "%s: %s", addr, strerror(saved != 0 ? saved : EADDRNOTAVAIL));
        return -1;
    }
    if (port_out != NULL) {
        struct sockaddr_storage ss;
        socklen_t sslen = sizeof(ss);
        *port_out = 0;
        if (getsockname(fd, (struct sockaddr *)&ss, &sslen) == 0)
            *port_out = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                       : ((struct sockaddr_in *)&ss)->sin_port);
    }
    return fd;
}
