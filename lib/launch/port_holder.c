/* port_holder.c — the process that listens on a TCP port (port_holder.h).
 *
 * /proc/net/tcp and tcp6 list every socket with its state, local port and
 * inode; a listening one (state 0A) on the port is looked up among the
 * descriptors of every process this user may read ("socket:[INODE]"). Only
 * called on a failure path: the scan costs a few milliseconds. */
#include "lib/launch/port_holder.h"

#include <ctype.h>
#include <dirent.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TCP_LISTEN 0x0A

/* The inode and owner of a socket listening on port in one /proc/net file. */
static int find_listener(const char *table, int port, unsigned long *inode, long *uid)
{
    FILE *f = fopen(table, "r");
    if (!f) return 0;
    char line[512];
    int found = 0;
    if (!fgets(line, sizeof line, f)) { fclose(f); return 0; } /* the header */
    while (!found && fgets(line, sizeof line, f)) {
        /* sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode */
        char local[64], remote[64];
        unsigned st, lport;
        long u;
        unsigned long ino;
        if (sscanf(line, " %*d: %63s %63s %x %*s %*s %*s %ld %*d %lu", local, remote, &st, &u, &ino) != 5) continue;
        const char *colon = strrchr(local, ':');
        if (!colon || sscanf(colon + 1, "%x", &lport) != 1) continue;
        if ((int)lport == port && st == TCP_LISTEN) {
            *inode = ino;
            *uid = u;
            found = 1;
        }
    }
    fclose(f);
    return found;
}

/* The process holding socket inode ino, or 0 when none is visible. */
static pid_t find_owner(unsigned long ino)
{
    char want[64];
    snprintf(want, sizeof want, "socket:[%lu]", ino);
    DIR *proc = opendir("/proc");
    if (!proc) return 0;
    pid_t owner = 0;
    struct dirent *p;
    while (!owner && (p = readdir(proc))) {
        if (!isdigit((unsigned char)p->d_name[0])) continue;
        char dir[300];
        snprintf(dir, sizeof dir, "/proc/%s/fd", p->d_name);
        DIR *fds = opendir(dir);
        if (!fds) continue; /* another user's, or gone */
        struct dirent *d;
        while ((d = readdir(fds))) {
            if (d->d_name[0] == '.') continue;
            char path[600], target[80];
            snprintf(path, sizeof path, "%s/%s", dir, d->d_name);
            ssize_t n = readlink(path, target, sizeof target - 1);
            if (n <= 0) continue;
            target[n] = 0;
            if (!strcmp(target, want)) {
                owner = (pid_t)atol(p->d_name);
                break;
            }
        }
        closedir(fds);
    }
    closedir(proc);
    return owner;
}

int port_holder_find(int port, port_holder *h)
{
    memset(h, 0, sizeof *h);
    h->uid = -1;
    unsigned long ino = 0;
    if (!find_listener("/proc/net/tcp", port, &ino, &h->uid) && !find_listener("/proc/net/tcp6", port, &ino, &h->uid))
        return 0;
    h->listening = 1;
    h->pid = ino ? find_owner(ino) : 0;
    if (h->pid > 0) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%ld/comm", (long)h->pid);
        FILE *f = fopen(path, "r");
        if (f) {
            if (fgets(h->comm, sizeof h->comm, f)) h->comm[strcspn(h->comm, "\n")] = 0;
            fclose(f);
        }
    }
    return 1;
}

void port_holder_describe(const port_holder *h, char *buf, size_t n)
{
    if (h->pid > 0) {
        snprintf(buf, n, "%s (pid %ld)", h->comm[0] ? h->comm : "a process", (long)h->pid);
        return;
    }
    if (h->uid >= 0) {
        struct passwd *pw = getpwuid((uid_t)h->uid);
        if (pw) snprintf(buf, n, "a process of user %s (uid %ld)", pw->pw_name, h->uid);
        else snprintf(buf, n, "a process of uid %ld", h->uid);
        return;
    }
    snprintf(buf, n, "a program");
}

int port_holder_is_dtrun(const port_holder *h)
{
    return h->pid > 0 && !strncmp(h->comm, "dtrun", 5);
}
