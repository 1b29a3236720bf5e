/* test_hostlist.c — Slurm host lists: ranges, zero padding, lists, several
 * groups per name, and bad input with its position. */
#include <string.h>

#include "lib/launch/hostlist.h"
#include "test/unit/check.h"

/* Expands spec and compares with the space-separated expected hosts. */
static void expect(const char *spec, const char *want)
{
    char err[512] = "", got[4096] = "";
    hostlist *hl = hostlist_parse(spec, err, sizeof err);
    if (!hl) { CHECK(0, "'%s' parses: %s", spec, err); return; }
    for (int i = 0; i < hostlist_count(hl); i++) {
        if (i) strcat(got, " ");
        strncat(got, hostlist_get(hl, i), sizeof got - strlen(got) - 1);
    }
    CHECK(!strcmp(got, want), "'%s' -> '%s' (got '%s')", spec, want, got);
    char first[256];
    int rc = hostlist_first(spec, first, sizeof first, err, sizeof err);
    CHECK(rc == 0 && !strcmp(first, hostlist_get(hl, 0)), "first of '%s' is %s", spec, first);
    CHECK(hostlist_size(spec, err, sizeof err) == hostlist_count(hl), "size of '%s' is %d", spec, hostlist_count(hl));
    hostlist_free(hl);
}

static void expect_error(const char *spec, const char *what, int column)
{
    char err[512] = "", colstr[32];
    hostlist *hl = hostlist_parse(spec, err, sizeof err);
    snprintf(colstr, sizeof colstr, "column %d:", column);
    CHECK(!hl && strstr(err, what) && strstr(err, colstr), "'%s' refused with '%s' at column %d: %s", spec, what,
          column, err);
    hostlist_free(hl);
    char first[256], err2[512] = "";
    CHECK(hostlist_first(spec, first, sizeof first, err2, sizeof err2) == -1 && !strcmp(err, err2),
          "hostlist_first refuses '%s' the same way", spec);
    CHECK(hostlist_size(spec, err2, sizeof err2) == -1 && !strcmp(err, err2), "hostlist_size too");
}

int main(void)
{
    expect("x", "x");
    expect("n[1-3,5]", "n1 n2 n3 n5");
    expect("n[1-3,5],gpu[001-002]-ib,x", "n1 n2 n3 n5 gpu001-ib gpu002-ib x");
    expect("r[1-2]n[1-2]", "r1n1 r1n2 r2n1 r2n2");
    expect("n[08-10]", "n08 n09 n10");
    expect("n[8-10]", "n8 n9 n10");
    expect("node[7]", "node7");
    expect("a.b_c-d,e[0-1].cluster", "a.b_c-d e0.cluster e1.cluster");
    expect("[1-2]x", "1x 2x");
    expect("n[3,1]", "n3 n1");

    expect_error("n[3-1]", "reversed range 3-1", 3);
    expect_error("n[1-3", "unclosed '['", 2);
    expect_error("n1-3]", "unbalanced ']'", 5);
    expect_error("n[1-[2]]", "expected a number", 5);
    expect_error("a,,b", "empty host name", 3);
    expect_error("a,", "empty host name", 3);
    expect_error("", "empty host list", 1);
    expect_error("n[]", "expected a number, found ']'", 3);
    expect_error("n[a-b]", "expected a number", 3);
    expect_error("n 1", "not allowed", 2);
    expect_error("n[1-2]x[", "unclosed '['", 8);
    expect_error("n[0-99999]", "more than 65536 hosts", 2);
    expect_error("a[0-999]b[0-999]", "more than 65536 hosts", 1);
    expect_error("n[1234567890]", "longer than 9 digits", 3);
    expect_error("n[1:2]", "unexpected ':'", 4);

    /* A count just at the limit is fine for hostlist_first without expanding. */
    char first[64], err[256];
    CHECK(hostlist_first("n[00001-65536]", first, sizeof first, err, sizeof err) == 0 && !strcmp(first, "n00001"),
          "first of 65536 hosts: %s", first);
    CHECK(hostlist_size("n[00001-65536]", err, sizeof err) == 65536, "size of 65536 hosts without expanding");
    CHECK(hostlist_size("n[00001-65536],x", err, sizeof err) == -1 && strstr(err, "more than 65536"),
          "one more is refused: %s", err);
    CHECK(hostlist_first("n[1-2]", first, 2, err, sizeof err) == -1 && strstr(err, "does not fit"),
          "a too-small buffer is an error: %s", err);
    hostlist *hl = hostlist_parse("n[1-2]", err, sizeof err);
    CHECK(hl && hostlist_get(hl, 2) == NULL && hostlist_get(hl, -1) == NULL, "out-of-range index gives NULL");
    hostlist_free(hl);
    CHECK_DONE();
}
