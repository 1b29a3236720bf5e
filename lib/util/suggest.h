/* suggest.h — "did you mean ...?" for mistyped names.
 *
 * Collects candidates and keeps the closest one to a misspelt word by
 * Damerau-Levenshtein distance (optimal string alignment: a swap of two adjacent
 * letters costs 1). Comparison ignores case and treats '-' as '_', so
 * `Global-Batch` finds `global_batch` at distance 0. A candidate may stand for
 * another name (an alias: `learning_rate` suggests `lr`). Nothing is suggested
 * when the closest candidate is too far to be a plausible typo.
 *
 * Generic on purpose: command-line flag parsing can use it as well. */
#ifndef DTRUN_UTIL_SUGGEST_H
#define DTRUN_UTIL_SUGGEST_H

#include <stddef.h>

#define SUGGEST_WORD_MAX 64 /* longer words are never matched */

typedef struct {
    char word[SUGGEST_WORD_MAX + 1]; /* normalised: lower case, '-' -> '_' */
    size_t len;
    int usable;                      /* 0 when the word is empty or too long */
    int best_distance;
    const char *best;                /* what to suggest, or NULL */
} suggest;

void suggest_init(suggest *s, const char *word, size_t len);

/* Offer `candidate`; when it is the closest so far and close enough, `meaning`
 * becomes the suggestion (pass the candidate itself unless it is an alias). */
void suggest_offer(suggest *s, const char *candidate, const char *meaning);

/* Offer every name of a comma-separated list ("a,b,c"), each meaning `meaning`. */
void suggest_offer_list(suggest *s, const char *comma_list, const char *meaning);

/* The suggestion, or NULL. */
const char *suggest_best(const suggest *s);

/* Edit distance between a and b (lengths given), case-insensitive, '-' == '_'.
 * Both must be at most SUGGEST_WORD_MAX bytes; returns a large number otherwise. */
int suggest_distance(const char *a, size_t alen, const char *b, size_t blen);

#endif
