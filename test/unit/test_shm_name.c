/* test_shm_name.c — lib/util/shm_name.h: the shm transport's segment names
 * are what the agent sweeps for a dead worker's pid, and the sweep removes
 * that pid's segments only (not another pid's whose number starts alike). */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "lib/util/shm_name.h"
#include "test/unit/check.h"

static int make(const char *name)
{
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) return -1;
    int rc = ftruncate(fd, 4096);
    close(fd);
    return rc;
}

static int exists(const char *name)
{
    int fd = shm_open(name, O_RDWR, 0600);
    if (fd >= 0) close(fd);
    return fd >= 0;
}

int main(void)
{
    /* pids no live process here has: above the usual pid_max range */
    pid_t dead = 4190001, other = 41900011;
    char a[128], b[128], c[128];
    shm_name_format(a, sizeof a, dead, 0, 0xabcUL);
    shm_name_format(b, sizeof b, dead, 7, 0x1UL);
    shm_name_format(c, sizeof c, other, 0, 0xabcUL);
    CHECK(!strcmp(a, "/dtrun.4190001.0.abc"), "the name is /dtrun.<pid>.<counter>.<nonce> (%s)", a);
    CHECK(make(a) == 0 && make(b) == 0 && make(c) == 0, "three segments made");
    int gone = shm_name_sweep(dead);
    CHECK(gone == 2 && !exists(a) && !exists(b), "the sweep removes the pid's two segments (%d)", gone);
    CHECK(exists(c), "and leaves pid %d's, whose number begins with %d", (int)other, (int)dead);
    CHECK(shm_name_sweep(dead) == 0, "a second sweep finds nothing");
    shm_unlink(c);
    CHECK_DONE();
}
