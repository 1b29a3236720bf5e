/* jobspec_yaml.c — the job file through libyaml's document API: syntax errors
 * with their line and column, one document only, YAML core tags only, and the
 * two levels (section -> key -> scalar) collected into the loader with the
 * positions of each key and value, so later messages can point at them. */
#include <stdio.h>
#include <string.h>
#include <yaml.h>

#include "lib/job/jobspec_loader.h"

/* ----------------------------------------------------------- collecting */

static pos pos_of(const yaml_node_t *n)
{
    return (pos){(int)n->start_mark.line + 1, (int)n->start_mark.column + 1};
}

static const char *shape_of(const yaml_node_t *n)
{
    if (n->type == YAML_MAPPING_NODE) return "a mapping";
    if (n->type == YAML_SEQUENCE_NODE) return "a sequence";
    return NULL;
}

/* What stood where a mapping was expected: "a sequence", or the scalar quoted. */
static const char *node_got(const yaml_node_t *n, char *buf, size_t len)
{
    entry e = {.shape = shape_of(n)};
    if (!e.shape) {
        e.text = (const char *)n->data.scalar.value;
        e.len = n->data.scalar.length;
    }
    return job_entry_got(&e, buf, len);
}

static int is_null_node(const yaml_node_t *n)
{
    return n->type == YAML_SCALAR_NODE && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
           job_text_is_null((const char *)n->data.scalar.value, n->data.scalar.length);
}

/* Only YAML's core tags (!!str, !!int ... and the defaults libyaml assigns);
 * others (!!python/object, !custom) ask for types dtrun does not have. */
static int check_tag(loader *L, const yaml_node_t *n)
{
    static const char *const core[] = {"str", "int", "float", "bool", "null", "map", "seq"};
    const char *tag = (const char *)n->tag;
    if (!tag) return 0;
    if (!strncmp(tag, "tag:yaml.org,2002:", 18))
        for (size_t i = 0; i < sizeof core / sizeof core[0]; i++)
            if (!strcmp(tag + 18, core[i])) return 0;
    char shown[256];
    return loader_fail_at(L, pos_of(n), "unsupported YAML tag '%s'", job_text_show(shown, sizeof shown, tag, strlen(tag)));
}

/* A sequence of names for a bit-set key (train.offload: [optimizer]): its
 * items joined by ',' into e->joined, as the comma form would give them. */
static int join_sequence(loader *L, yaml_document_t *doc, int fid, entry *e, const yaml_node_t *v)
{
    size_t used = 0;
    for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
        yaml_node_t *x = yaml_document_get_node(doc, *it);
        if (!x || x->type != YAML_SCALAR_NODE || check_tag(L, x))
            return x && x->type != YAML_SCALAR_NODE
                       ? loader_fail_at(L, x ? pos_of(x) : pos_of(v), "%s.%s: a list of names, got %s in it",
                                        job_section_names[job_fields[fid].section], job_fields[fid].key, shape_of(x))
                       : -1;
        size_t n = x->data.scalar.length;
        if (used + n + 2 > sizeof e->joined)
            return loader_fail_at(L, pos_of(v), "%s.%s: the list is too long", job_section_names[job_fields[fid].section],
                                  job_fields[fid].key);
        if (used) e->joined[used++] = ',';
        memcpy(e->joined + used, x->data.scalar.value, n);
        used += n;
    }
    e->joined[used] = 0;
    e->text = e->joined;
    e->len = used;
    e->shape = NULL;
    return 0;
}

static int record(loader *L, yaml_document_t *doc, int fid, pos key_at, const yaml_node_t *v)
{
    entry *e = &L->e[fid];
    e->given = 1;
    e->key_at = key_at;
    e->val_at = pos_of(v);
    e->shape = shape_of(v);
    if (v->type == YAML_SEQUENCE_NODE && (job_fields[fid].type == FT_FLAGS || job_fields[fid].type == FT_KEYS)) {
        L->order[L->n_order++] = fid;
        return join_sequence(L, doc, fid, e, v);
    }
    if (!e->shape) {
        e->text = (const char *)v->data.scalar.value;
        e->len = v->data.scalar.length;
        e->is_null = is_null_node(v);
    }
    L->order[L->n_order++] = fid;
    return 0;
}

/* The nested section that `key` opens inside section `sec` (model: moe), or -1. */
static int nested_section(job_section sec, const char *key, size_t len)
{
    for (int s = 0; s < SEC_COUNT; s++)
        if (job_section_parent(s) == (int)sec && strlen(job_section_key(s)) == len &&
            !memcmp(job_section_key(s), key, len))
            return s;
    return -1;
}

static int collect_section(loader *L, yaml_document_t *doc, job_section sec, const yaml_node_t *map);

/* A section given as a key of its parent (model: {moe: {experts: 8}}); null
 * ("moe:" with every key commented out) is as if absent. */
static int collect_nested(loader *L, yaml_document_t *doc, int sec, const yaml_node_t *k, const yaml_node_t *v)
{
    if (L->section_given[sec])
        return loader_fail_at(L, pos_of(k), "duplicate key '%s' in section '%s' (first at line %d)", job_section_key(sec),
                              job_section_names[job_section_parent(sec)], L->section_at[sec].line);
    if (is_null_node(v)) return 0;
    L->section_given[sec] = 1;
    L->section_at[sec] = pos_of(k);
    if (v->type != YAML_MAPPING_NODE) {
        char got[300];
        return loader_fail_at(L, pos_of(v), "%s must be a mapping of keys, got %s", job_section_names[sec],
                              node_got(v, got, sizeof got));
    }
    return collect_section(L, doc, (job_section)sec, v);
}

static int collect_section(loader *L, yaml_document_t *doc, job_section sec, const yaml_node_t *map)
{
    const char *sname = job_section_names[sec];
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        yaml_node_t *v = yaml_document_get_node(doc, p->value);
        if (!k || !v) return loader_fail_at(L, pos_of(map), "malformed mapping in section '%s'", sname);
        if (check_tag(L, k) || check_tag(L, v)) return -1;
        if (k->type != YAML_SCALAR_NODE)
            return loader_fail_at(L, pos_of(k), "a key in section '%s' must be a name, got %s", sname, shape_of(k));
        const char *key = (const char *)k->data.scalar.value;
        size_t len = k->data.scalar.length;
        int sub = nested_section(sec, key, len);
        if (sub >= 0) {
            if (collect_nested(L, doc, sub, k, v)) return -1;
            continue;
        }
        int fid = job_field_find(sec, key, len);
        if (fid < 0) return loader_unknown_key(L, pos_of(k), NULL, sec, key, len);
        if (L->e[fid].given)
            return loader_fail_at(L, pos_of(k), "duplicate key '%s' in section '%s' (first at line %d)", job_fields[fid].key,
                                  sname, L->e[fid].key_at.line);
        if (record(L, doc, fid, pos_of(k), v)) return -1;
    }
    return 0;
}

static int collect(loader *L, yaml_document_t *doc)
{
    yaml_node_t *root = yaml_document_get_root_node(doc);
    if (!root || is_null_node(root))
        return loader_fail_at(L, (pos){1, 1},
                              "empty job file (expected a mapping of sections: model, data, train, parallel, "
                              "checkpoint, log, launch)");
    if (check_tag(L, root)) return -1;
    if (root->type != YAML_MAPPING_NODE) {
        char got[300];
        return loader_fail_at(L, pos_of(root),
                              "the job file must be a mapping of sections (model, data, train, ...), got %s",
                              node_got(root, got, sizeof got));
    }
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        yaml_node_t *v = yaml_document_get_node(doc, p->value);
        if (!k || !v) return loader_fail_at(L, pos_of(root), "malformed mapping at the top level");
        if (check_tag(L, k) || check_tag(L, v)) return -1;
        if (k->type != YAML_SCALAR_NODE)
            return loader_fail_at(L, pos_of(k), "a section name must be a name, got %s", shape_of(k));
        const char *name = (const char *)k->data.scalar.value;
        size_t len = k->data.scalar.length;
        int sec = job_section_find(name, len);
        if (sec < 0 || job_section_parent(sec) >= 0) return loader_unknown_section(L, pos_of(k), NULL, name, len);
        if (L->section_given[sec])
            return loader_fail_at(L, pos_of(k), "duplicate section '%s' (first at line %d)", job_section_names[sec],
                                  L->section_at[sec].line);
        L->section_given[sec] = 1;
        L->section_at[sec] = pos_of(k);
        if (is_null_node(v)) continue; /* "train:" with every key commented out */
        if (v->type != YAML_MAPPING_NODE) {
            char got[300];
            return loader_fail_at(L, pos_of(v), "section '%s' must be a mapping of keys, got %s", job_section_names[sec],
                                  node_got(v, got, sizeof got));
        }
        if (collect_section(L, doc, (job_section)sec, v)) return -1;
    }
    return 0;
}

/* ------------------------------------------------------------- parsing */

/* libyaml's reader reports a byte offset, not a mark: count lines ourselves
 * (columns in characters, as libyaml's marks count them). */
static pos pos_of_offset(const char *text, size_t len, size_t offset)
{
    pos p = {1, 1};
    for (size_t i = 0; i < offset && i < len; i++) {
        if (text[i] == '\n') p.line++, p.col = 1;
        else if (((unsigned char)text[i] & 0xc0) != 0x80) p.col++;
    }
    return p;
}

static int syntax_error(loader *L, const yaml_parser_t *parser, const char *text, size_t len)
{
    const char *problem = parser->problem ? parser->problem : "malformed YAML";
    switch (parser->error) {
    case YAML_MEMORY_ERROR:
        return loader_fail_at(L, (pos){0, 0}, "out of memory while parsing YAML");
    case YAML_READER_ERROR:
        if (parser->problem_value != -1)
            return loader_fail_at(L, pos_of_offset(text, len, parser->problem_offset), "YAML error: %s (byte 0x%02x)",
                                  problem, (unsigned)parser->problem_value & 0xffu);
        return loader_fail_at(L, pos_of_offset(text, len, parser->problem_offset), "YAML error: %s", problem);
    default: {
        pos at = {(int)parser->problem_mark.line + 1, (int)parser->problem_mark.column + 1};
        size_t i = parser->problem_mark.index; /* libyaml counts characters; tabs are ASCII */
        if (parser->error == YAML_SCANNER_ERROR && i < len && text[i] == '\t' &&
            pos_of_offset(text, len, i).line == at.line)
            return loader_fail_at(L, at, "YAML syntax error: a tab character; YAML indents with spaces only");
        if (parser->context)
            return loader_fail_at(L, at, "YAML syntax error: %s (%s at line %d)", problem, parser->context,
                                  (int)parser->context_mark.line + 1);
        return loader_fail_at(L, at, "YAML syntax error: %s", problem);
    }
    }
}

/* A job file is two levels deep (section -> key -> value, a value at most a
 * short flow list); libyaml's document loader takes time quadratic in the
 * nesting (100,000 levels of `[` took 39 s to refuse). Walk the events first and
 * stop at the first collection deeper than this: the scanner then reads only
 * that far. Syntax errors are left to the loader, which reports them fully. */
#define JOB_YAML_MAX_DEPTH 64

static int check_depth(loader *L, const char *text, size_t len)
{
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) return loader_fail_at(L, (pos){0, 0}, "cannot start the YAML parser");
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    int depth = 0, rc = 0;
    for (;;) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&parser, &ev)) break;
        yaml_event_type_t type = ev.type;
        pos at = {(int)ev.start_mark.line + 1, (int)ev.start_mark.column + 1};
        yaml_event_delete(&ev);
        if (type == YAML_STREAM_END_EVENT) break;
        if (type == YAML_SEQUENCE_START_EVENT || type == YAML_MAPPING_START_EVENT) {
            if (++depth > JOB_YAML_MAX_DEPTH) {
                rc = loader_fail_at(L, at, "YAML nested deeper than %d levels (a job file is a mapping of sections "
                                           "of keys)", JOB_YAML_MAX_DEPTH);
                break;
            }
        } else if (type == YAML_SEQUENCE_END_EVENT || type == YAML_MAPPING_END_EVENT) {
            depth--;
        }
    }
    yaml_parser_delete(&parser);
    return rc;
}

int loader_load(loader *L, const char *text, size_t len, const char *const *overrides, int n_overrides)
{
    yaml_parser_t parser;
    yaml_document_t doc, next;
    if (check_depth(L, text, len)) return -1;
    if (!yaml_parser_initialize(&parser)) return loader_fail_at(L, (pos){0, 0}, "cannot start the YAML parser");
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        syntax_error(L, &parser, text, len);
        yaml_parser_delete(&parser);
        return -1;
    }
    int rc = 0;
    /* A second document would be silently ignored otherwise. */
    if (yaml_document_get_root_node(&doc)) {
        if (!yaml_parser_load(&parser, &next)) {
            rc = syntax_error(L, &parser, text, len);
        } else {
            yaml_node_t *extra = yaml_document_get_root_node(&next);
            if (extra)
                rc = loader_fail_at(L, (pos){(int)next.start_mark.line + 1, (int)next.start_mark.column + 1},
                                    "a second YAML document; a job file holds exactly one");
            yaml_document_delete(&next);
        }
    }
    if (rc == 0) rc = collect(L, &doc);
    if (rc == 0) rc = loader_collect_overrides(L, overrides, n_overrides);
    if (rc == 0) rc = loader_resolve(L); /* still reads scalars inside doc */
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return rc;
}

