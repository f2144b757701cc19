/*
 * args.c — see args.h.
 *
 * One pass over argv. Each argument is a flag (it starts with '-' and is
 * more than a lone "-") or the positional operand. A flag is looked up by
 * the part before any '=', among --help/-h first and then the command's
 * table; its value, when its kind takes one, is the part after '=' or the
 * next argument, and goes through the kind's check into the field.
 */
#include "args.h"
#include "suggest.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every command's --help, so that no table needs to list it. The parser
 * notes it in hy_args_result.help; it has no field. */
static const hy_flag help_flag = { .name = "--help", .alias = "-h", .kind = HY_FLAG_SWITCH };

int hy_flag_list_add(hy_flag_list *l, const char *s, hy_error *err) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 8;
        const char **items = realloc(l->items, sizeof *items * (size_t)cap);
        if (!items) return hy_fail(err, HY_ERR_RUNTIME, "out of memory");
        l->items = items;
        l->cap = cap;
    }
    l->items[l->n++] = s;
    return HY_OK;
}

void hy_flag_list_free(hy_flag_list *l) {
    free(l->items);
    *l = (hy_flag_list){ 0 };
}

int hy_args_int(const char *name, const char *s, long lo, long hi, int *out, hy_error *err) {
    char *end = NULL;
    errno = 0;
    /* strtol would skip leading blanks; the number must be all of s. */
    long v = isspace((unsigned char)s[0]) ? 0 : strtol(s, &end, 10);
    if (!end || end == s || *end != '\0')
        return hy_fail(err, HY_ERR_INPUT, "%s: '%s' is not a whole number; give one from "
                       "%ld to %ld", name, s, lo, hi);
    if (errno == ERANGE || v < lo || v > hi)
        return hy_fail(err, HY_ERR_INPUT, "%s: %s is out of range; give a number from %ld "
                       "to %ld", name, s, lo, hi);
    *out = (int)v;
    return HY_OK;
}

int hy_args_real(const char *name, const char *s, double lo, double hi, int lo_open,
                 double *out, hy_error *err) {
    char range[96];
    if (lo_open) snprintf(range, sizeof range, "above %g, up to %g", lo, hi);
    else snprintf(range, sizeof range, "from %g to %g", lo, hi);
    char *end = NULL;
    errno = 0;
    double v = isspace((unsigned char)s[0]) ? 0 : strtod(s, &end);
    /* "nan" and "inf" parse, and 1e400 overflows to inf: none is a number
     * a user means. */
    if (!end || end == s || *end != '\0' || !isfinite(v))
        return hy_fail(err, HY_ERR_INPUT, "%s: '%s' is not a number; give one %s", name, s, range);
    if (errno == ERANGE || v < lo || v > hi || (lo_open && v <= lo))
        return hy_fail(err, HY_ERR_INPUT, "%s: %s is out of range; give a number %s", name, s,
                       range);
    *out = v;
    return HY_OK;
}

/* The index of v among f's choices, or an error listing them as prose:
 * "--color: 'x' is not auto, always or never". */
static int parse_choice(const hy_flag *f, const char *v, int *out, hy_error *err) {
    int n = 0;
    for (; f->choices[n]; n++)
        if (strcmp(v, f->choices[n]) == 0) return (*out = n, HY_OK);
    char list[512] = "";
    size_t at = 0;
    for (int i = 0; i < n && at < sizeof list; i++)
        at += (size_t)snprintf(list + at, sizeof list - at, "%s%s",
                               i == 0 ? "" : i == n - 1 ? " or " : ", ", f->choices[i]);
    return hy_fail(err, HY_ERR_INPUT, "%s: '%s' is not %s", f->name, v, list);
}

/* Whether the n bytes at s spell `name` (NULL spells nothing). */
static int spells(const char *name, const char *s, size_t n) {
    return name && strlen(name) == n && memcmp(name, s, n) == 0;
}

static const hy_flag *find_flag(const hy_flag *flags, const char *s, size_t n) {
    if (spells(help_flag.name, s, n) || spells(help_flag.alias, s, n)) return &help_flag;
    for (const hy_flag *f = flags; f->name; f++)
        if (spells(f->name, s, n) || spells(f->alias, s, n)) return f;
    return NULL;
}

/* The flag typed is the n bytes at s. The hint is the closest of the
 * table's names and --help, in table order (hy_closest keeps the earlier
 * of two as close). */
static int unknown_flag(const hy_args_spec *spec, const char *s, size_t n, hy_error *err) {
    size_t count = 0;
    while (spec->flags[count].name) count++;
    const char **names = malloc(sizeof *names * (count + 2));
    if (!names) return hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    for (size_t i = 0; i < count; i++) names[i] = spec->flags[i].name;
    names[count] = help_flag.name;
    names[count + 1] = NULL;
    /* Past 127 bytes nothing is close (hy_edit_distance), so a longer flag
     * need not be copied out whole. */
    char typed[128];
    const char *near = NULL;
    if (n < sizeof typed) {
        memcpy(typed, s, n);
        typed[n] = '\0';
        near = hy_closest(typed, names);
    }
    int shown = n > 200 ? 200 : (int)n;
    int rc;
    if (near)
        rc = hy_fail(err, HY_ERR_INPUT, "unknown flag '%.*s' for '%s'; did you mean %s? "
                     "(hanayo %s --help lists them)", shown, s, spec->command, near,
                     spec->command);
    else
        rc = hy_fail(err, HY_ERR_INPUT, "unknown flag '%.*s' for '%s'; run 'hanayo %s "
                     "--help' for the list", shown, s, spec->command, spec->command);
    free(names);
    return rc;
}

/* A value that did not come, or an empty one where a string must say
 * something: the same answer, with the entry's example. */
static int needs_value(const hy_flag *f, hy_error *err) {
    if (f->example)
        return hy_fail(err, HY_ERR_INPUT, "%s needs a value, e.g. %s %s", f->name, f->name,
                       f->example);
    return hy_fail(err, HY_ERR_INPUT, "%s needs a value", f->name);
}

/* v, checked as f's kind says, into field. */
static int store_value(const hy_flag *f, const char *v, void *field, hy_error *err) {
    switch (f->kind) {
    case HY_FLAG_INT:
        return hy_args_int(f->name, v, (long)f->lo, (long)f->hi, field, err);
    case HY_FLAG_REAL:
        return hy_args_real(f->name, v, f->lo, f->hi, f->lo_open, field, err);
    case HY_FLAG_STRING:
        *(const char **)field = v;
        return HY_OK;
    case HY_FLAG_LIST:
        return hy_flag_list_add(field, v, err);
    case HY_FLAG_CHOICE:
        return parse_choice(f, v, field, err);
    case HY_FLAG_CUSTOM:
        return f->parse(f->name, v, field, err);
    case HY_FLAG_SWITCH:
        break;
    }
    return hy_fail(err, HY_ERR_RUNTIME, "%s: a switch has no value to store", f->name);
}

/* The flag at argv[*i]; moves *i past its value when that is the next
 * argument. */
static int take_flag(const hy_args_spec *spec, int argc, char *const *argv, int *i,
                     void *dest, hy_args_result *result, hy_error *err) {
    const char *s = argv[*i];
    const char *eq = strchr(s, '=');
    const hy_flag *f = find_flag(spec->flags, s, eq ? (size_t)(eq - s) : strlen(s));
    if (!f) return unknown_flag(spec, s, eq ? (size_t)(eq - s) : strlen(s), err);
    if (f->kind == HY_FLAG_SWITCH) {
        if (eq)
            return hy_fail(err, HY_ERR_INPUT, "%s takes no value; write just %s", f->name,
                           f->name);
        if (f == &help_flag) result->help = 1;
        else *(int *)((char *)dest + f->off) = 1;
        return HY_OK;
    }
    /* The next argument is this flag's value unless it is the next flag:
     * "--ranks --json" lacks a value. "-1" can still be one. */
    const char *v = eq ? eq + 1 : NULL;
    if (!v && *i + 1 < argc && strncmp(argv[*i + 1], "--", 2) != 0) v = argv[++*i];
    if (!v || (f->kind == HY_FLAG_STRING && v[0] == '\0')) return needs_value(f, err);
    return store_value(f, v, (char *)dest + f->off, err);
}

static int take_operand(const hy_args_spec *spec, const char *s, void *dest,
                        hy_args_result *result, hy_error *err) {
    if (!spec->operand && spec->operand_hint)
        return hy_fail(err, HY_ERR_INPUT, "%s takes no argument '%s' on its own; %s",
                       spec->command, s, spec->operand_hint);
    if (!spec->operand)
        return hy_fail(err, HY_ERR_INPUT, "%s takes no argument '%s' (flags start with --)",
                       spec->command, s);
    if (spec->many_operands) {
        if (!result->operand) result->operand = s;
        return hy_flag_list_add((hy_flag_list *)((char *)dest + spec->operands_off), s, err);
    }
    if (result->operand && spec->second_operand)
        return hy_fail(err, HY_ERR_INPUT, "%s, got '%s' and '%s' (flags start with --)",
                       spec->second_operand, result->operand, s);
    if (result->operand)
        return hy_fail(err, HY_ERR_INPUT, "'%s' takes one %s, got '%s' and '%s' (flags start "
                       "with --)", spec->command, spec->operand, result->operand, s);
    result->operand = s;
    return HY_OK;
}

int hy_args_parse(const hy_args_spec *spec, int argc, char *const *argv, void *dest,
                  hy_args_result *result, hy_error *err) {
    *result = (hy_args_result){ .operand = NULL, .help = 0 };
    for (int i = 0; i < argc; i++) {
        /* A lone "-" is an operand, as it is for most tools. */
        int is_flag = argv[i][0] == '-' && argv[i][1] != '\0';
        int rc = is_flag ? take_flag(spec, argc, argv, &i, dest, result, err)
                         : take_operand(spec, argv[i], dest, result, err);
        if (rc != HY_OK) return rc;
    }
    if (spec->operand && spec->synopsis && !result->operand && !result->help)
        return hy_fail(err, HY_ERR_INPUT, "%s needs a %s: %s", spec->command, spec->operand,
                       spec->synopsis);
    return HY_OK;
}
