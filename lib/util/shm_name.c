/* shm_name.c — see shm_name.h. */
#include "lib/util/shm_name.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#define SHM_NAME_PREFIX "dtrun."

void shm_name_format(char *out, size_t n, pid_t pid, unsigned counter, unsigned long nonce)
{
    snprintf(out, n, "/" SHM_NAME_PREFIX "%d.%u.%lx", (int)pid, counter, nonce);
}

int shm_name_sweep(pid_t pid)
{
    char prefix[32];
    snprintf(prefix, sizeof prefix, SHM_NAME_PREFIX "%d.", (int)pid);
    size_t len = strlen(prefix);
    DIR *d = opendir("/dev/shm");
    if (!d) return 0;
    int gone = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, prefix, len) != 0) continue;
        char name[300];
        snprintf(name, sizeof name, "/%s", e->d_name);
        if (shm_unlink(name) == 0) gone++;
    }
    closedir(d);
    return gone;
}
