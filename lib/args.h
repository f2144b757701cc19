/*
 * args.h — a command's arguments read by one table-driven routine.
 *
 * A command describes its flags once, as a table of hy_flag entries: the
 * flag's name (and an alias), its kind, the example value its "needs a
 * value" message shows, the range or choices a value must meet, and where
 * the value goes: an offset into the command's own struct of arguments,
 * which usually embeds a library request (hy_plan_request, ...).
 * hy_args_parse walks argv with that table; it knows no command, only the
 * rules every command shares:
 *
 *   - "--flag value" and "--flag=value" mean the same; a value that starts
 *     with "--" is not a value but the next flag, so "--ranks --json" is a
 *     missing value, not ranks "--json"; a switch given "=x" is an error;
 *   - numbers are whole numbers or finite reals, all of the text and
 *     nothing else, in the entry's range;
 *   - at most one positional argument (the CONFIG, the SHARD), or none,
 *     or, for a command that says so, any number (plot's logs);
 *   - --help (or -h) anywhere is noted, not an error;
 *   - an unknown flag is answered with the closest known one
 *     (suggest.h's hy_closest), or with where the list is.
 *
 * Every error is an hy_error with HY_ERR_INPUT (HY_ERR_RUNTIME only when
 * out of memory) that names the flag; nothing here prints. The CLI
 * (tools/hanayo.c) holds the tables and the usage texts.
 */
#ifndef HY_ARGS_H
#define HY_ARGS_H

#include <stddef.h>

#include "error.h"

typedef enum {
    HY_FLAG_SWITCH,   /* no value; sets an int to 1 */
    HY_FLAG_INT,      /* a whole number in [lo, hi]; an int */
    HY_FLAG_REAL,     /* a finite real in [lo, hi] ((lo, hi] with lo_open); a double */
    HY_FLAG_STRING,   /* a non-empty string; a const char * into argv */
    HY_FLAG_LIST,     /* repeatable; each value appended, in order, to an hy_flag_list */
    HY_FLAG_CHOICE,   /* one of `choices`; its index, an int */
    HY_FLAG_CUSTOM    /* parse(name, value, field, err) decides */
} hy_flag_kind;

typedef struct {
    const char *name;      /* "--ranks"; NULL ends a table */
    /* Another spelling ("-h"). Accepted, never suggested: every two-letter
     * typo is within reach of every short alias. */
    const char *alias;
    hy_flag_kind kind;
    size_t off;            /* the field: an offset into the command's struct */
    const char *example;   /* the value in "--ranks needs a value, e.g. --ranks 4" */
    double lo, hi;         /* INT, REAL: the range */
    int lo_open;           /* REAL: lo itself is excluded ("above 0") */
    const char *const *choices;   /* CHOICE: the names, NULL-terminated */
    /* CUSTOM: reads value (never NULL) into field; errors name `name`. */
    int (*parse)(const char *name, const char *value, void *field, hy_error *err);
} hy_flag;

/* One command's arguments: its flags and what its positional argument is. */
typedef struct {
    const char *command;    /* as messages name it: "plan", "data synth" */
    const hy_flag *flags;   /* the table, ended by an entry with name NULL */
    /* The one positional argument, as messages name it ("config file",
     * "shard"), or NULL when the command takes none. */
    const char *operand;
    /* NULL: the operand may be left out. Else it is required (unless
     * --help is given) and a missing one is answered with "<command>
     * needs a <operand>: <synopsis>". */
    const char *synopsis;
    /* The start of the error for a second positional argument, where it
     * is not "'<command>' takes one <operand>" ("data info takes one
     * shard"); NULL: that. */
    const char *second_operand;
    /* operand NULL: what to write instead of a positional argument, added
     * to the error ("give it as --out FILE"); NULL: nothing added. */
    const char *operand_hint;
    /* Nonzero: any number of operands, each appended in order to the
     * hy_flag_list at operands_off in dest (result->operand is the
     * first; the synopsis rule above holds for it). */
    int many_operands;
    size_t operands_off;
} hy_args_spec;

/* The values of a HY_FLAG_LIST flag, in the order given. items are the
 * argv strings themselves (or what hy_flag_list_add was given); the array
 * is malloc'd. An all-zero list is empty. */
typedef struct {
    const char **items;
    int n, cap;
} hy_flag_list;

/* Appends s (not copied). HY_ERR_RUNTIME when out of memory. */
int hy_flag_list_add(hy_flag_list *l, const char *s, hy_error *err);
/* Frees the array and leaves the list empty; a second free is harmless. */
void hy_flag_list_free(hy_flag_list *l);

typedef struct {
    const char *operand;   /* the positional argument, or NULL */
    int help;              /* --help or -h was given */
} hy_args_result;

/* Reads argv[0..argc-1] (a command's arguments, after its name) with
 * spec's table into dest, the command's struct, and fills *result. Fields
 * of flags not given are left as they were, so dest holds the defaults
 * beforehand; a flag given twice keeps the last value (LIST: every one).
 * Stops at the first error. Lists in dest may hold memory after a failure
 * as after success: free them either way. */
int hy_args_parse(const hy_args_spec *spec, int argc, char *const *argv, void *dest,
                  hy_args_result *result, hy_error *err);

/* The value checks the kinds use, for CUSTOM parsers to share their
 * messages. A whole number in [lo, hi], all of s: */
int hy_args_int(const char *name, const char *s, long lo, long hi, int *out, hy_error *err);
/* A finite real in [lo, hi], or (lo, hi] with lo_open, all of s: */
int hy_args_real(const char *name, const char *s, double lo, double hi, int lo_open,
                 double *out, hy_error *err);

#endif
