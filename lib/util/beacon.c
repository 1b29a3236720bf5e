/* beacon.c — see beacon.h. A sequence number brackets each note (odd while it
 * is written), so the reader never takes half of one note for another. */
#include "lib/util/beacon.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct {
    _Atomic uint64_t seq;
    char text[BEACON_TEXT_MAX];
} beacon_page;

#define BEACON_MAP_SIZE 4096

int beacon_create(void **map)
{
    *map = NULL;
    int fd = memfd_create("dtrun-beacon", MFD_CLOEXEC);
    if (fd < 0) return -1;
    void *m = MAP_FAILED;
    if (ftruncate(fd, BEACON_MAP_SIZE) == 0)
        m = mmap(NULL, BEACON_MAP_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        close(fd);
        return -1;
    }
    *map = m;
    return fd;
}

void beacon_read(const void *map, char *buf, size_t len)
{
    buf[0] = 0;
    if (!map || len == 0) return;
    const beacon_page *p = map;
    for (int tries = 0; tries < 100; tries++) {
        uint64_t s1 = atomic_load_explicit(&p->seq, memory_order_acquire);
        if (s1 & 1) continue;
        char tmp[BEACON_TEXT_MAX];
        memcpy(tmp, p->text, sizeof tmp);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&p->seq, memory_order_relaxed) != s1) continue;
        tmp[sizeof tmp - 1] = 0;
        size_t n = strlen(tmp);
        if (n >= len) n = len - 1;
        memcpy(buf, tmp, n);
        buf[n] = 0;
        return;
    }
}

void beacon_unmap(void *map)
{
    if (map) munmap(map, BEACON_MAP_SIZE);
}

static beacon_page *mine;
static pthread_mutex_t writers = PTHREAD_MUTEX_INITIALIZER;

void beacon_attach(int fd)
{
    if (fd < 0 || mine) return;
    void *m = mmap(NULL, BEACON_MAP_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd); /* the mapping keeps the page; a program we exec needs no descriptor */
    if (m != MAP_FAILED) mine = m;
}

void beacon_note(const char *text)
{
    if (!mine) return;
    /* several communicators may issue from their own threads */
    pthread_mutex_lock(&writers);
    uint64_t s = atomic_load_explicit(&mine->seq, memory_order_relaxed);
    atomic_store_explicit(&mine->seq, s + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    size_t n = strlen(text);
    if (n >= BEACON_TEXT_MAX) n = BEACON_TEXT_MAX - 1;
    memcpy(mine->text, text, n);
    mine->text[n] = 0;
    atomic_store_explicit(&mine->seq, s + 2, memory_order_release);
    pthread_mutex_unlock(&writers);
}
