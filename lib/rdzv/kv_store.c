/* kv_store.c — chained hash table keyed by XXH64 (libxxhash). A job stores a
 * few thousand small entries at most, so a plain table that doubles at load 1
 * is all it needs. */
#include "lib/rdzv/kv_store.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

typedef struct kv_entry {
    struct kv_entry *next;
    uint64_t hash;
    char *key;
    uint8_t *val;
    size_t len;
} kv_entry;

struct kv_store {
    kv_entry **buckets;
    size_t nbuckets; /* a power of two */
    size_t count;
};

static uint64_t key_hash(const char *key)
{
    return XXH64(key, strlen(key), 0);
}

kv_store *kv_store_new(void)
{
    kv_store *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    st->nbuckets = 64;
    st->buckets = calloc(st->nbuckets, sizeof *st->buckets);
    if (!st->buckets) { free(st); return NULL; }
    return st;
}

static void entry_free(kv_entry *e)
{
    free(e->key);
    free(e->val);
    free(e);
}

void kv_store_free(kv_store *st)
{
    if (!st) return;
    for (size_t b = 0; b < st->nbuckets; b++) {
        kv_entry *e = st->buckets[b];
        while (e) { kv_entry *n = e->next; entry_free(e); e = n; }
    }
    free(st->buckets);
    free(st);
}

static kv_entry **find_slot(const kv_store *st, const char *key, uint64_t h)
{
    kv_entry **pp = &st->buckets[h & (st->nbuckets - 1)];
    while (*pp && ((*pp)->hash != h || strcmp((*pp)->key, key) != 0)) pp = &(*pp)->next;
    return pp;
}

int kv_store_get(const kv_store *st, const char *key, const uint8_t **val, size_t *len)
{
    kv_entry *e = *find_slot(st, key, key_hash(key));
    if (!e) return 0;
    *val = e->val;
    *len = e->len;
    return 1;
}

static void grow(kv_store *st)
{
    size_t nb = st->nbuckets * 2;
    kv_entry **b = calloc(nb, sizeof *b);
    if (!b) return; /* keep the old table: slower, still correct */
    for (size_t i = 0; i < st->nbuckets; i++) {
        kv_entry *e = st->buckets[i];
        while (e) {
            kv_entry *n = e->next;
            e->next = b[e->hash & (nb - 1)];
            b[e->hash & (nb - 1)] = e;
            e = n;
        }
    }
    free(st->buckets);
    st->buckets = b;
    st->nbuckets = nb;
}

int kv_store_set(kv_store *st, const char *key, const void *val, size_t len)
{
    uint64_t h = key_hash(key);
    kv_entry **pp = find_slot(st, key, h);
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy) return -1;
    if (len) memcpy(copy, val, len);
    if (*pp) {
        free((*pp)->val);
        (*pp)->val = copy;
        (*pp)->len = len;
        return 0;
    }
    kv_entry *e = calloc(1, sizeof *e);
    if (!e || !(e->key = strdup(key))) { free(e); free(copy); return -1; }
    e->hash = h;
    e->val = copy;
    e->len = len;
    *pp = e;
    if (++st->count > st->nbuckets) grow(st);
    return 0;
}

int kv_store_delete(kv_store *st, const char *key)
{
    kv_entry **pp = find_slot(st, key, key_hash(key));
    if (!*pp) return 0;
    kv_entry *e = *pp;
    *pp = e->next;
    entry_free(e);
    st->count--;
    return 1;
}

size_t kv_store_delete_prefix(kv_store *st, const char *prefix)
{
    size_t n = 0, plen = strlen(prefix);
    for (size_t b = 0; b < st->nbuckets; b++) {
        kv_entry **pp = &st->buckets[b];
        while (*pp) {
            if (strncmp((*pp)->key, prefix, plen) == 0) {
                kv_entry *e = *pp;
                *pp = e->next;
                entry_free(e);
                n++;
            } else {
                pp = &(*pp)->next;
            }
        }
    }
    st->count -= n;
    return n;
}

size_t kv_store_count(const kv_store *st) { return st->count; }
