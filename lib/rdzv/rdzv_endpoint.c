/* rdzv_endpoint.c — "HOST[:PORT]" as torchrun's --rdzv-endpoint takes it, with
 * IPv6 in brackets ("[fe80::1]:29400"). */
#include "lib/rdzv/rdzv.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int rdzv_endpoint_parse(const char *ep, int default_port, char *host, size_t hostlen, int *port,
                        char *err, size_t errlen)
{
    const char *h, *p = NULL;
    size_t hl;
    if (!ep || !*ep) {
        snprintf(err, errlen, "empty endpoint: expected HOST[:PORT]");
        return -1;
    }
    if (ep[0] == '[') {
        const char *close = strchr(ep, ']');
        if (!close) {
            snprintf(err, errlen, "endpoint '%s': '[' without ']' (IPv6: [ADDR]:PORT)", ep);
            return -1;
        }
        h = ep + 1;
        hl = (size_t)(close - h);
        if (close[1] == ':') p = close + 2;
        else if (close[1]) {
            snprintf(err, errlen, "endpoint '%s': unexpected '%s' after ']'", ep, close + 1);
            return -1;
        }
    } else {
        const char *colon = strchr(ep, ':');
        if (colon && strchr(colon + 1, ':')) {
            snprintf(err, errlen, "endpoint '%s': an IPv6 address needs brackets, e.g. [%s]:29400", ep, ep);
            return -1;
        }
        h = ep;
        hl = colon ? (size_t)(colon - ep) : strlen(ep);
        if (colon) p = colon + 1;
    }
    if (hl == 0) {
        snprintf(err, errlen, "endpoint '%s': empty host", ep);
        return -1;
    }
    if (hl >= hostlen) {
        snprintf(err, errlen, "endpoint '%s': host longer than %zu bytes", ep, hostlen - 1);
        return -1;
    }
    for (size_t i = 0; i < hl; i++) {
        unsigned char ch = (unsigned char)h[i];
        if (!isalnum(ch) && !strchr("-._:%", ch)) {
            snprintf(err, errlen, "endpoint '%s': character '%c' is not allowed in a host", ep, ch);
            return -1;
        }
    }
    int pv = default_port;
    if (p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (!*p || *end || !isdigit((unsigned char)*p) || v < 0 || v > 65535) {
            snprintf(err, errlen, "endpoint '%s': port '%s' is not a number 0-65535", ep, p);
            return -1;
        }
        pv = (int)v;
    }
    memcpy(host, h, hl);
    host[hl] = '\0';
    *port = pv;
    return 0;
}
