/* rdzv_round.c — rank assignment and the timeout message of a round. Kept apart
 * from the libuv server so the rules are easy to read and to test. */
#include "lib/rdzv/rdzv_round.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int rdzv_round_min_for_hints(const rdzv_round_node *nodes, int n)
{
    int need = 0;
    for (int i = 0; i < n; i++)
        if (nodes[i].hint + 1 > need) need = nodes[i].hint + 1;
    return need;
}

int rdzv_round_assign(const rdzv_round_node *nodes, int n, int *rank, int *offset, int *world,
                      char *err, size_t errlen)
{
    int *owner = malloc((size_t)(n > 0 ? n : 1) * sizeof *owner); /* rank → node index */
    if (!owner) { snprintf(err, errlen, "out of memory"); return -1; }
    for (int r = 0; r < n; r++) owner[r] = -1;
    for (int i = 0; i < n; i++) {
        int h = nodes[i].hint;
        rank[i] = -1;
        if (h < 0) continue;
        if (h >= n) {
            snprintf(err, errlen, "node rank %d given by %s, but only %d node%s joined", h, nodes[i].name, n,
                     n == 1 ? "" : "s");
            free(owner);
            return -1;
        }
        if (owner[h] >= 0) {
            snprintf(err, errlen, "node rank %d given by both %s and %s", h, nodes[owner[h]].name, nodes[i].name);
            free(owner);
            return -1;
        }
        owner[h] = i;
        rank[i] = h;
    }
    int next = 0;
    for (int i = 0; i < n; i++) {
        if (rank[i] >= 0) continue;
        while (owner[next] >= 0) next++;
        owner[next] = i;
        rank[i] = next;
    }
    long sum = 0;
    for (int r = 0; r < n; r++) {
        offset[owner[r]] = (int)sum;
        sum += nodes[owner[r]].local_world;
    }
    *world = (int)sum;
    free(owner);
    return 0;
}

void rdzv_round_timeout_message(char *out, size_t outlen, double secs, const rdzv_round_node *nodes,
                                int n, int min_nodes, int needed)
{
    char names[400];
    size_t used = 0;
    names[0] = '\0';
    int shown = 0;
    for (int i = 0; i < n; i++) {
        size_t len = strlen(nodes[i].name);
        if (used + len + 2 + 20 >= sizeof names) break; /* leave room for "… and K more" */
        used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "", nodes[i].name);
        shown++;
    }
    if (shown < n)
        snprintf(names + used, sizeof names - used, "%s… and %d more", shown ? " " : "", n - shown);
    int missing = needed - n;
    if (missing < 1) missing = 1;
    if (needed > min_nodes)
        snprintf(out, outlen, "rendezvous timed out after %.1f s: %d of %d nodes joined (%s); %d missing "
                 "(--node-rank %d needs %d nodes)", secs, n, needed, n ? names : "none", missing, needed - 1, needed);
    else
        snprintf(out, outlen, "rendezvous timed out after %.1f s: %d of min %d node%s joined (%s); %d missing",
                 secs, n, min_nodes, min_nodes == 1 ? "" : "s", n ? names : "none", missing);
}
