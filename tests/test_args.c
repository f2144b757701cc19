/*
 * test_args.c — lib/args.h's flag parser, and the CLI's flag tables.
 *
 * First the parser on a table of its own with one flag of every kind:
 * each kind's values (separate and inline), each error and its message,
 * the missing-value rule, repeated --set in order, the operand rules,
 * --help anywhere and the unknown-flag hint.
 *
 * Then the tables of tools/hanayo.c itself (the file is included whole,
 * its main renamed): every flag a command's table holds is documented in
 * its usage text and every flag a usage text documents is in a table, so
 * the two cannot drift; every example a "needs a value" message shows is
 * a value its flag accepts.
 */
#include "args.h"
#include "test.h"

#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* ---- the parser on a table of its own ---------------------------------- */

typedef struct {
    int on;
    int count;
    double cost, size;
    const char *name;
    hy_flag_list sets;
    int color;
    int pair[2];        /* --pair A:B */
} test_args;

static const char *const colors[] = {"auto", "always", "never", NULL};
static const char *const sides[] = {"left", "right", NULL};

/* "A:B" into two ints; checks that the callback gets the flag's name and
 * its field. */
static int parse_pair(const char *name, const char *v, void *field, hy_error *err) {
    int *pair = field;
    const char *colon = strchr(v, ':');
    if (!colon) return hy_fail(err, HY_ERR_INPUT, "%s: '%s' is not A:B", name, v);
    pair[0] = atoi(v);
    pair[1] = atoi(colon + 1);
    return HY_OK;
}

#define T(field) offsetof(test_args, field)
static const hy_flag test_flags[] = {
    { .name = "--on", .kind = HY_FLAG_SWITCH, .off = T(on) },
    { .name = "--count", .alias = "-n", .kind = HY_FLAG_INT, .off = T(count), .example = "4",
      .lo = 1, .hi = 64 },
    { .name = "--cost", .kind = HY_FLAG_REAL, .off = T(cost), .example = "0.5",
      .lo = 0, .hi = 1e12 },
    { .name = "--size", .kind = HY_FLAG_REAL, .off = T(size), .lo = 0, .lo_open = 1,
      .hi = 100 },
    { .name = "--name", .kind = HY_FLAG_STRING, .off = T(name), .example = "x.json" },
    { .name = "--set", .kind = HY_FLAG_LIST, .off = T(sets), .example = "a.b=1" },
    { .name = "--color", .kind = HY_FLAG_CHOICE, .off = T(color), .example = "never",
      .choices = colors },
    { .name = "--side", .kind = HY_FLAG_CHOICE, .off = T(color), .example = "left",
      .choices = sides },
    { .name = "--pair", .kind = HY_FLAG_CUSTOM, .off = T(pair), .example = "1:2",
      .parse = parse_pair },
    { .name = NULL },
};

static const hy_args_spec spec_optional = {
    .command = "test", .flags = test_flags, .operand = "config file" };
static const hy_args_spec spec_required = {
    .command = "test", .flags = test_flags, .operand = "config file",
    .synopsis = "hanayo test CONFIG [--count N]" };
static const hy_args_spec spec_none = {
    .command = "test sub", .flags = test_flags, .operand_hint = "give it as --name FILE" };
static const hy_args_spec spec_none_plain = { .command = "test sub", .flags = test_flags };
/* Any number of operands (plot's logs), into the list field. */
static const hy_args_spec spec_many = {
    .command = "test", .flags = test_flags, .operand = "log",
    .synopsis = "hanayo test LOG [LOG2 ...]", .many_operands = 1,
    .operands_off = offsetof(test_args, sets) };
static const hy_args_spec spec_second = {
    .command = "test", .flags = test_flags, .operand = "shard",
    .second_operand = "test takes one shard" };

/* One parse of the NULL-terminated arguments into *a (reset first, with
 * count = 7 and cost = -1 as "not given"). */
static int parse_into(const hy_args_spec *spec, test_args *a, hy_args_result *got,
                      hy_error *err, const char *const *words) {
    char *argv[64];   /* the values stored point at the words, not here */
    int argc = 0;
    while (words[argc]) {
        argv[argc] = (char *)words[argc];   /* the parser never writes into argv */
        argc++;
    }
    hy_flag_list_free(&a->sets);
    *a = (test_args){ .count = 7, .cost = -1 };
    hy_error_clear(err);
    return hy_args_parse(spec, argc, argv, a, got, err);
}
#define PARSE(spec, ...) parse_into((spec), &a, &got, &err, (const char *const[]){__VA_ARGS__, NULL})

/* An input error whose message holds `want`. */
#define CHECK_FAILS(call, want) do { \
    int st_ = (call); \
    CHECKF(st_ == HY_ERR_INPUT && err.status == HY_ERR_INPUT, "status %d", st_); \
    CHECKF(strstr(err.msg, (want)) != NULL, "message '%s' lacks '%s'", err.msg, (want)); \
} while (0)

static void test_kinds(void) {
    test_args a = { .sets = { 0 } };
    hy_args_result got;
    hy_error err;

    /* Nothing given: every field keeps its default. */
    CHECK(PARSE(&spec_optional, "cfg.json") == HY_OK);
    CHECK(got.operand && !strcmp(got.operand, "cfg.json") && !got.help);
    CHECK(a.on == 0 && a.count == 7 && a.cost == -1 && !a.name && a.sets.n == 0);

    /* Each kind, the value apart and inline. */
    CHECK(PARSE(&spec_optional, "--on", "--count", "12", "--cost=0.25", "--name", "n.json",
                "--color=never", "--pair", "3:4", "--size", "1e-9") == HY_OK);
    CHECK(a.on == 1 && a.count == 12 && a.cost == 0.25 && a.size == 1e-9);
    CHECK(a.name && !strcmp(a.name, "n.json"));
    CHECK(a.color == 2 && a.pair[0] == 3 && a.pair[1] == 4);
    CHECK(!got.operand);
    CHECK(PARSE(&spec_optional, "--count=1", "--side", "right") == HY_OK && a.count == 1 && a.color == 1);
    /* An alias reads as its flag; a flag given twice keeps the last. */
    CHECK(PARSE(&spec_optional, "-n", "64", "--count", "5", "--count=6") == HY_OK && a.count == 6);

    /* The edges of a range are in it. */
    CHECK(PARSE(&spec_optional, "--count", "64", "--cost", "1e12") == HY_OK);
    CHECK(a.count == 64 && a.cost == 1e12);
    CHECK(PARSE(&spec_optional, "--cost", "0", "--size", "100") == HY_OK && a.cost == 0);

    /* --set: every one, in order, apart or inline; the list grows. */
    CHECK(PARSE(&spec_optional, "--set", "a=1", "cfg.json", "--set=b=2", "--count", "3",
                "--set", "c=") == HY_OK);
    CHECK(a.sets.n == 3 && !strcmp(a.sets.items[0], "a=1") && !strcmp(a.sets.items[1], "b=2")
          && !strcmp(a.sets.items[2], "c="));
    CHECK(got.operand && !strcmp(got.operand, "cfg.json"));
    CHECK(PARSE(&spec_optional, "--set", "k0=0", "--set", "k1=1", "--set", "k2=2", "--set",
                "k3=3", "--set", "k4=4", "--set", "k5=5", "--set", "k6=6", "--set", "k7=7",
                "--set", "k8=8", "--set", "k9=9", "--set", "k10=10") == HY_OK);
    CHECK(a.sets.n == 11 && !strcmp(a.sets.items[0], "k0=0") && !strcmp(a.sets.items[10], "k10=10"));
    hy_flag_list_free(&a.sets);
    CHECK(a.sets.n == 0 && a.sets.items == NULL);
    hy_flag_list_free(&a.sets);   /* twice is harmless */

    /* hy_flag_list_add, as the CLI appends eval's --init. */
    hy_flag_list l = { 0 };
    CHECK(hy_flag_list_add(&l, "x=1", &err) == HY_OK && hy_flag_list_add(&l, "y=2", &err) == HY_OK);
    CHECK(l.n == 2 && !strcmp(l.items[1], "y=2"));
    hy_flag_list_free(&l);
}

static void test_value_errors(void) {
    test_args a = { .sets = { 0 } };
    hy_args_result got;
    hy_error err;

    /* Whole numbers. */
    CHECK_FAILS(PARSE(&spec_optional, "--count", "0"),
                "--count: 0 is out of range; give a number from 1 to 64");
    CHECK_FAILS(PARSE(&spec_optional, "--count=65"), "--count: 65 is out of range");
    CHECK_FAILS(PARSE(&spec_optional, "--count", "abc"),
                "--count: 'abc' is not a whole number; give one from 1 to 64");
    const char *not_whole[] = {"4x", "2.5", "1e3", " 4", "\t4", "", "0x10"};
    for (size_t i = 0; i < sizeof not_whole / sizeof not_whole[0]; i++) {
        int st = PARSE(&spec_optional, "--count", not_whole[i]);
        CHECK_FAILS(st, "is not a whole number");
    }
    CHECK_FAILS(PARSE(&spec_optional, "--count", "99999999999999999999"), "is out of range");
    /* A value may start with one '-': "-1" is a number out of range, not
     * a missing value. */
    CHECK_FAILS(PARSE(&spec_optional, "--count", "-1"), "--count: -1 is out of range");
    CHECK(a.count == 7);   /* a failed value leaves the field alone */

    /* Reals. */
    const char *not_real[] = {"nan", "inf", "-inf", "1e400", "1,5", "abc", "", " 1"};
    for (size_t i = 0; i < sizeof not_real / sizeof not_real[0]; i++) {
        int st = PARSE(&spec_optional, "--cost", not_real[i]);
        CHECK_FAILS(st, "is not a number; give one from 0 to 1e+12");
    }
    CHECK_FAILS(PARSE(&spec_optional, "--cost", "-1"),
                "--cost: -1 is out of range; give a number from 0 to 1e+12");
    CHECK_FAILS(PARSE(&spec_optional, "--cost", "2e12"), "--cost: 2e12 is out of range");
    CHECK_FAILS(PARSE(&spec_optional, "--size", "0"),
                "--size: 0 is out of range; give a number above 0, up to 100");
    CHECK_FAILS(PARSE(&spec_optional, "--size", "100.5"), "is out of range");

    /* Strings must say something; an empty one is a missing value. */
    CHECK_FAILS(PARSE(&spec_optional, "--name", ""), "--name needs a value, e.g. --name x.json");
    CHECK_FAILS(PARSE(&spec_optional, "--name="), "--name needs a value, e.g. --name x.json");

    /* Choices list themselves as prose. */
    CHECK_FAILS(PARSE(&spec_optional, "--color", "sometimes"),
                "--color: 'sometimes' is not auto, always or never");
    CHECK_FAILS(PARSE(&spec_optional, "--side", "up"), "--side: 'up' is not left or right");
    CHECK_FAILS(PARSE(&spec_optional, "--color", ""), "--color: '' is not auto");

    /* A custom parser's error comes back as it made it. */
    CHECK_FAILS(PARSE(&spec_optional, "--pair", "3"), "--pair: '3' is not A:B");

    /* A switch takes no value. */
    CHECK_FAILS(PARSE(&spec_optional, "--on=yes"), "--on takes no value; write just --on");
    CHECK_FAILS(PARSE(&spec_optional, "--on="), "--on takes no value");
    CHECK(PARSE(&spec_optional, "--on", "cfg.json") == HY_OK && a.on == 1 && got.operand);

    /* The first error stops the parse: nothing after it is read. */
    CHECK_FAILS(PARSE(&spec_optional, "--count", "0", "--on", "--bogus"), "--count: 0");
    CHECK(a.on == 0);
    hy_flag_list_free(&a.sets);
}

static void test_missing_values(void) {
    test_args a = { .sets = { 0 } };
    hy_args_result got;
    hy_error err;
    /* At the end, before another flag, or with no example in the table. */
    CHECK_FAILS(PARSE(&spec_optional, "--count"), "--count needs a value, e.g. --count 4");
    CHECK_FAILS(PARSE(&spec_optional, "--count", "--on"), "--count needs a value, e.g. --count 4");
    CHECK(a.on == 0);
    CHECK_FAILS(PARSE(&spec_optional, "--set", "--count=4"), "--set needs a value, e.g. --set a.b=1");
    CHECK_FAILS(PARSE(&spec_optional, "--name", "--"), "--name needs a value");
    CHECK_FAILS(PARSE(&spec_optional, "--size"), "--size needs a value");
    CHECKF(strcmp(err.msg, "--size needs a value") == 0, "%s", err.msg);
    CHECK_FAILS(PARSE(&spec_optional, "--pair", "--color", "never"), "--pair needs a value, e.g. --pair 1:2");
    CHECK_FAILS(PARSE(&spec_optional, "-n"), "--count needs a value");
    /* "-x" is not "--x": it can be a value. */
    CHECK(PARSE(&spec_optional, "--name", "-") == HY_OK && !strcmp(a.name, "-"));
    CHECK(PARSE(&spec_optional, "--name", "-x.json") == HY_OK && !strcmp(a.name, "-x.json"));
    hy_flag_list_free(&a.sets);
}

static void test_unknown_flags(void) {
    test_args a = { .sets = { 0 } };
    hy_args_result got;
    hy_error err;
    CHECK_FAILS(PARSE(&spec_optional, "--cont", "4"),
                "unknown flag '--cont' for 'test'; did you mean --count? (hanayo test --help lists them)");
    CHECK_FAILS(PARSE(&spec_optional, "--zzzzzzzz"),
                "unknown flag '--zzzzzzzz' for 'test'; run 'hanayo test --help' for the list");
    /* The part before '=' is the flag. */
    CHECK_FAILS(PARSE(&spec_optional, "--nmae=x"), "unknown flag '--nmae' for 'test'; did you mean --name?");
    /* --help is among the hints; aliases are not ("-m" is one edit from
     * "-n", as every two-letter typo is from every short alias). */
    CHECK_FAILS(PARSE(&spec_optional, "--hepl"), "did you mean --help?");
    CHECK_FAILS(PARSE(&spec_optional, "-m"), "unknown flag '-m' for 'test'; run 'hanayo test --help'");
    /* Ties keep the table's order: --side and --size are one edit from --sie. */
    CHECK_FAILS(PARSE(&spec_optional, "--sie"), "did you mean --size?");
    CHECK_FAILS(PARSE(&spec_none, "--bogus"), "unknown flag '--bogus' for 'test sub'; run 'hanayo test sub --help'");
    /* A very long flag is named (cut short) but never matched. */
    char longflag[400];
    memset(longflag, 'x', sizeof longflag - 1);
    longflag[0] = longflag[1] = '-';
    longflag[sizeof longflag - 1] = '\0';
    CHECK_FAILS(PARSE(&spec_optional, longflag), "for the list");
    CHECK(strlen(err.msg) < sizeof err.msg - 1);
    hy_flag_list_free(&a.sets);
}

static void test_operands_and_help(void) {
    test_args a = { .sets = { 0 } };
    hy_args_result got;
    hy_error err;

    /* At most one operand, anywhere among the flags. */
    CHECK(PARSE(&spec_optional, "--on", "a.json", "--count", "2") == HY_OK);
    CHECK(!strcmp(got.operand, "a.json") && a.count == 2);
    CHECK_FAILS(PARSE(&spec_optional, "a.json", "--on", "b.json"),
                "'test' takes one config file, got 'a.json' and 'b.json' (flags start with --)");
    CHECK_FAILS(PARSE(&spec_second, "a.bin", "b.bin"),
                "test takes one shard, got 'a.bin' and 'b.bin' (flags start with --)");
    /* Any number where the command says so, in order, among the flags. */
    CHECK(PARSE(&spec_many, "a.jsonl", "--count", "2", "b.jsonl", "-") == HY_OK);
    CHECK(a.sets.n == 3 && !strcmp(a.sets.items[0], "a.jsonl") &&
          !strcmp(a.sets.items[1], "b.jsonl") && !strcmp(a.sets.items[2], "-"));
    CHECK(!strcmp(got.operand, "a.jsonl") && a.count == 2);
    CHECK_FAILS(PARSE(&spec_many, "--count", "2"), "test needs a log: hanayo test LOG [LOG2 ...]");
    /* A lone "-" is an operand. */
    CHECK(PARSE(&spec_optional, "-") == HY_OK && !strcmp(got.operand, "-"));
    /* None taken: the hint says what to write. */
    CHECK_FAILS(PARSE(&spec_none, "--on", "x.bin"),
                "test sub takes no argument 'x.bin' on its own; give it as --name FILE");
    CHECK_FAILS(PARSE(&spec_none_plain, "x.bin"),
                "test sub takes no argument 'x.bin' (flags start with --)");
    CHECK(PARSE(&spec_none, "--on") == HY_OK && !got.operand);

    /* Required: missing is an error naming the synopsis ... */
    CHECK_FAILS(PARSE(&spec_required, "--count", "3"),
                "test needs a config file: hanayo test CONFIG [--count N]");
    CHECK(PARSE(&spec_required, "c.json") == HY_OK);
    /* ... unless --help asks for the usage instead. */
    CHECK(PARSE(&spec_required, "--count", "3", "--help") == HY_OK && got.help && a.count == 3);
    CHECK(PARSE(&spec_required, "-h") == HY_OK && got.help);
    CHECK(PARSE(&spec_none, "--help", "--on") == HY_OK && got.help && a.on);
    CHECK(PARSE(&spec_optional, "x.json") == HY_OK && !got.help);
    /* --help is a switch like any other; other errors still count. */
    CHECK_FAILS(PARSE(&spec_optional, "--help=x"), "--help takes no value; write just --help");
    CHECK_FAILS(PARSE(&spec_optional, "--help", "--count", "0"), "--count: 0 is out of range");
    hy_flag_list_free(&a.sets);
}

static void test_value_checks(void) {
    hy_error err;
    int n = 0;
    double x = 0;
    CHECK(hy_args_int("--k", "-5", -5, 5, &n, &err) == HY_OK && n == -5);
    CHECK(hy_args_int("--k", "+5", -5, 5, &n, &err) == HY_OK && n == 5);
    CHECK(hy_args_int("--k", "2147483647", 0, INT_MAX, &n, &err) == HY_OK && n == INT_MAX);
    CHECK(hy_args_int("--k", "2147483648", 0, INT_MAX, &n, &err) == HY_ERR_INPUT);
    CHECK(strstr(err.msg, "--k: 2147483648 is out of range; give a number from 0 to 2147483647"));
    CHECK(hy_args_real("--r", "60", 0, 60, 0, &x, &err) == HY_OK && x == 60);
    CHECK(hy_args_real("--r", "1e-400", 0, 60, 0, &x, &err) == HY_ERR_INPUT);
    CHECK(hy_args_real("--r", "0.001", 0, 60, 1, &x, &err) == HY_OK && x == 0.001);
    CHECK(hy_args_real("--r", "-0", 0, 60, 1, &x, &err) == HY_ERR_INPUT);
}

/* ---- the CLI's own tables ----------------------------------------------
 * tools/hanayo.c whole, with its main renamed so that this file's runs. */
#define main hanayo_main
#include "../tools/hanayo.c"
#undef main

#define MAX_DOCUMENTED 64

/* The flags a usage text documents: those in its synopsis (the lines up
 * to the first blank one) and the one that opens each option line
 * ("  --steps N   measured steps"). A mention in prose ("feed it to
 * hanayo plan --costs") documents another command's flag, not this one's.
 * Returns how many, each at most 31 characters. */
static int documented_flags(const char *usage, char names[][32]) {
    int n = 0, in_synopsis = 1;
    for (const char *line = usage; *line; ) {
        const char *end = strchr(line, '\n');
        if (!end) end = line + strlen(line);
        if (end == line) in_synopsis = 0;
        for (const char *p = line; p + 2 < end && n < MAX_DOCUMENTED; p++) {
            int opens_option = p == line + 2 && line[0] == ' ' && line[1] == ' ';
            int starts_word = p == line || p[-1] == ' ' || p[-1] == '[';
            if (strncmp(p, "--", 2) != 0 || !starts_word || (!in_synopsis && !opens_option))
                continue;
            size_t len = 2;
            while (p + len < end && (p[len] == '-' || (p[len] >= 'a' && p[len] <= 'z')))
                len++;
            if (len > 2 && len < 32) {
                memcpy(names[n], p, len);
                names[n++][len] = '\0';
            }
        }
        line = *end ? end + 1 : end;
    }
    return n;
}

static int in_table(const hy_flag *flags, const char *name) {
    for (const hy_flag *f = flags; f->name; f++)
        if (!strcmp(f->name, name)) return 1;
    return 0;
}

/* Every command that reads its flags through a table, subcommands (data's,
 * checkpoint's) too. */
static int table_commands(const cli_command **out, int max) {
    int n = 0;
    for (size_t i = 0; i < sizeof commands / sizeof commands[0] && n < max; i++) {
        if (commands[i]->spec) out[n++] = commands[i];
        for (size_t k = 0; k < commands[i]->n_subs && n < max; k++)
            out[n++] = &commands[i]->subs[k];
    }
    return n;
}

static void test_tables_match_usage(void) {
    const cli_command *cmds[32];
    int n_cmds = table_commands(cmds, 32);
    /* train eval sample plan profile tune check plot, data synth and
     * info, checkpoint verify and list */
    CHECK(n_cmds == 12);
    for (int c = 0; c < n_cmds; c++) {
        const cli_command *cmd = cmds[c];
        char names[MAX_DOCUMENTED][32];
        int n = documented_flags(cmd->usage, names);
        /* Table → usage. */
        for (const hy_flag *f = cmd->spec->flags; f->name; f++) {
            int found = 0;
            for (int i = 0; i < n; i++) found |= !strcmp(names[i], f->name);
            CHECKF(found, "'%s' has %s in its table but its usage text does not document it",
                   cmd->spec->command, f->name);
        }
        /* Usage → some table of a command with this usage text (synth
         * and info share one). */
        for (int i = 0; i < n; i++) {
            int found = 0;
            for (int d = 0; d < n_cmds; d++)
                if (cmds[d]->usage == cmd->usage) found |= in_table(cmds[d]->spec->flags, names[i]);
            CHECKF(found, "the usage text of '%s' documents %s, which no table holds",
                   cmd->spec->command, names[i]);
        }
    }
    /* The checker sees what it must: a synopsis flag, an option line and
     * not a prose mention. */
    char names[MAX_DOCUMENTED][32];
    int n = documented_flags("usage: x [--a N]\n\n  --b V   see y --c\n  -- not\n", names);
    CHECK(n == 2 && !strcmp(names[0], "--a") && !strcmp(names[1], "--b"));
}

/* Each entry is well formed, and its example is a value it accepts: the
 * example is what a user is told to type. */
static void test_tables_are_sound(void) {
    const cli_command *cmds[32];
    int n_cmds = table_commands(cmds, 32);
    for (int c = 0; c < n_cmds; c++) {
        const hy_args_spec *spec = cmds[c]->spec;
        for (const hy_flag *f = spec->flags; f->name; f++) {
            CHECKF(!strncmp(f->name, "--", 2) && strcmp(f->name, "--help") != 0,
                   "%s %s", spec->command, f->name);
            for (const hy_flag *g = f + 1; g->name; g++)
                CHECKF(strcmp(f->name, g->name) != 0, "%s lists %s twice", spec->command, f->name);
            if (f->kind == HY_FLAG_INT)
                CHECKF(f->lo <= f->hi && f->hi <= INT_MAX, "%s %s", spec->command, f->name);
            if (f->kind == HY_FLAG_SWITCH) continue;
            CHECKF(f->example != NULL, "%s %s has no example", spec->command, f->name);
            if (!f->example) continue;
            /* Into a zeroed stand-in for the command's struct. */
            static union { max_align_t align; char bytes[8192]; } field;
            memset(&field, 0, sizeof field);
            CHECKF(f->off < sizeof field.bytes - 256, "%s %s", spec->command, f->name);
            char *argv[] = {(char *)f->name, (char *)f->example};
            /* The command's table without its operand rules: no CONFIG here. */
            hy_args_spec one = { .command = spec->command, .flags = spec->flags };
            hy_args_result got;
            hy_error err;
            hy_error_clear(&err);
            int st = hy_args_parse(&one, 2, argv, field.bytes, &got, &err);
            CHECKF(st == HY_OK, "%s %s %s: %s", spec->command, f->name, f->example, err.msg);
            if (f->kind == HY_FLAG_LIST) hy_flag_list_free((hy_flag_list *)(field.bytes + f->off));
        }
    }
}

int main(void) {
    test_kinds();
    test_value_errors();
    test_missing_values();
    test_unknown_flags();
    test_operands_and_help();
    test_value_checks();
    test_tables_match_usage();
    test_tables_are_sound();
    return TEST_END("args");
}
