/*
 * kitcases: the kit's before/after table test.
 *
 *   kitcases record --cpu PLUGIN.so
 *       print, for every (op, mutation), the verdicts of the CPU plugin
 *       and (when built with the CUDA driver) of the CUDA entry points:
 *       the body of before.tsv (record-before.sh runs it on the binaries
 *       of the commit before the kit).
 *   kitcases check BEFORE.tsv --cpu PLUGIN.so
 *       compute the verdicts now (kit, cpu, cuda when built) and fail when
 *       a valid launch is not accepted, or a case refused before by the
 *       CPU or CUDA plugin is not refused now by the kit, or by that
 *       plugin. Cases refused now and not before are listed (behaviour
 *       changes, not failures).
 *   kitcases selftest BEFORE.tsv --cpu PLUGIN.so
 *       the comparison itself: a before-table doctored so that a case now
 *       accepted was refused must fail; the now-verdicts as their own
 *       before-table must pass.
 *
 * A mutation id "valid" is the op's valid launch itself.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kc.h"

enum { D_KIT, D_CPU, D_CUDA, D_N };

struct row {
    int op;
    char what[96];
    struct kc_result v[D_N];  /* now; for a before row: cpu, cuda */
};

struct rows {
    struct row *r;
    int n, cap;
};

static struct row *add_row(struct rows *t, int op, const char *what)
{
    struct row *r;

    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 4096;
        t->r = realloc(t->r, sizeof(*t->r) * (size_t)t->cap);
        if (!t->r) {
            fprintf(stderr, "out of memory\n");
            exit(2);
        }
    }
    r = &t->r[t->n++];
    memset(r, 0, sizeof(*r));
    r->op = op;
    snprintf(r->what, sizeof(r->what), "%s", what);
    for (int d = 0; d < D_N; d++)
        r->v[d].v = KC_NONE;
    return r;
}

static struct row *find_row(struct rows *t, int op, const char *what,
                            int hint)
{
    if (hint >= 0 && hint < t->n && t->r[hint].op == op &&
        !strcmp(t->r[hint].what, what))
        return &t->r[hint];
    for (int i = 0; i < t->n; i++)
        if (t->r[i].op == op && !strcmp(t->r[i].what, what))
            return &t->r[i];
    return NULL;
}

/* Every (op, mutation) of the case table, in order: rows[base[op]] is the
 * op's valid launch, rows[base[op] + 1 + k] its mutant k. */
static int base[KEEL_OP_COUNT + 1];

static int make_rows(struct rows *t)
{
    static keel_kit_mutant m;
    int missing = 0;

    for (int op = 0; op < KEEL_OP_COUNT; op++) {
        struct kc_case c;
        char err[256];
        int n;

        base[op] = t->n;
        if (kc_case_build(op, &c, err, sizeof(err))) {
            printf("FAIL: %s\n", err);
            missing++;
            continue;
        }
        add_row(t, op, "valid");
        n = keel_kit_mutant_count(op, &c.args);
        for (int k = 0; k < n; k++) {
            if (!keel_kit_mutate(op, &c.args, k, &m)) {
                printf("FAIL: %s: mutant %d of %d missing\n",
                       keel_kit_op_info(op)->name, k, n);
                return -1;
            }
            add_row(t, op, m.what);
        }
    }
    base[KEEL_OP_COUNT] = t->n;
    return missing ? -1 : 0;
}

struct msg {
    int k;
    struct kc_result r;
};

/* Run the launches k0.. of op (k = -1: the valid one) through drv in this
 * process, each result written to fd. */
static void run_op(const struct kc_driver *drv, const char *arg, int op,
                   int k0, int fd)
{
    static keel_kit_mutant m;
    struct kc_case c;
    char err[512];
    int n;

    if (kc_case_build(op, &c, err, sizeof(err)) ||
        drv->setup(arg, err, sizeof(err)) || drv->prepare(&c)) {
        fprintf(stderr, "FAIL: %s: %s: %s\n", keel_kit_op_info(op)->name,
                drv->name, err);
        _exit(3);
    }
    n = keel_kit_mutant_count(op, &c.args);
    for (int k = k0; k < n; k++) {
        struct msg msg = {k, {KC_NONE, 0}};
        if (k >= 0 && !keel_kit_mutate(op, &c.args, k, &m))
            _exit(3);
        alarm(60); /* a hang is a crash */
        msg.r = drv->run(&c, k < 0 ? &c.args : &m.args);
        if (write(fd, &msg, sizeof(msg)) != (ssize_t)sizeof(msg))
            _exit(3);
    }
    drv->release(&c);
}

/* Driver d over every row. Each op runs in a child process that loads the
 * plugin itself (no threads inherited across fork): a launch that kills
 * it is recorded as CRASH(signal) and the op goes on in a new child from
 * the next launch. */
static int run_driver(const struct kc_driver *drv, int d, struct rows *t,
                      const char *arg)
{
    for (int op = 0; op < KEEL_OP_COUNT; op++) {
        int n = base[op + 1] - base[op] - 1, k0 = -1;

        if (n < 0)
            continue;
        if (!drv->isolate) {
            for (int k = -1; k < n; k++) {
                static keel_kit_mutant m;
                struct kc_case c;
                char err[256];
                kc_case_build(op, &c, err, sizeof(err));
                if (k >= 0)
                    keel_kit_mutate(op, &c.args, k, &m);
                t->r[base[op] + 1 + k].v[d] =
                    drv->run(&c, k < 0 ? &c.args : &m.args);
            }
            continue;
        }
        while (k0 < n) {
            int fds[2], status = 0, last = k0 - 1;
            struct msg msg;
            pid_t pid;

            fflush(stdout);
            fflush(stderr);
            if (pipe(fds) || (pid = fork()) < 0) {
                perror("fork");
                return -1;
            }
            if (pid == 0) {
                close(fds[0]);
                run_op(drv, arg, op, k0, fds[1]);
                _exit(0);
            }
            close(fds[1]);
            while (read(fds[0], &msg, sizeof(msg)) == (ssize_t)sizeof(msg)) {
                if (msg.k >= -1 && msg.k < n)
                    t->r[base[op] + 1 + msg.k].v[d] = msg.r;
                last = msg.k;
            }
            close(fds[0]);
            waitpid(pid, &status, 0);
            if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
                break;
            if (WIFEXITED(status)) {
                fprintf(stderr, "FAIL: %s: the %s driver could not run\n",
                        keel_kit_op_info(op)->name, drv->name);
                return -1;
            }
            /* the launch after the last reported one killed the child */
            t->r[base[op] + 2 + last].v[d] =
                (struct kc_result){KC_CRASH, WTERMSIG(status)};
            fprintf(stderr, "note: %s %s: %s driver died of signal %d\n",
                    keel_kit_op_info(op)->name, t->r[base[op] + 2 + last].what,
                    drv->name, WTERMSIG(status));
            k0 = last + 2;
        }
    }
    return 0;
}

static const char *opt(int argc, char **argv, const char *name)
{
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], name))
            return argv[i + 1];
    return NULL;
}

/* ---- before-table --------------------------------------------------------------- */

static int load_before(const char *path, struct rows *t)
{
    FILE *f = fopen(path, "r");
    char line[512];
    int ln = 0;

    if (!f) {
        fprintf(stderr, "FAIL: cannot read %s\n", path);
        return -1;
    }
    while (fgets(line, sizeof(line), f)) {
        char *op, *what, *cpu, *cuda, *save;
        struct row *r;
        int id;

        ln++;
        line[strcspn(line, "\r\n")] = 0;
        if (!line[0] || line[0] == '#')
            continue;
        op = strtok_r(line, "\t", &save);
        what = strtok_r(NULL, "\t", &save);
        cpu = strtok_r(NULL, "\t", &save);
        cuda = strtok_r(NULL, "\t", &save);
        id = op ? keel_kit_op_id(op) : -1;
        if (id < 0 || !what || !cpu || !cuda) {
            fprintf(stderr, "FAIL: %s:%d: bad line\n", path, ln);
            fclose(f);
            return -1;
        }
        r = add_row(t, id, what);
        if (!kc_verdict_parse(cpu, &r->v[D_CPU]) ||
            !kc_verdict_parse(cuda, &r->v[D_CUDA])) {
            fprintf(stderr, "FAIL: %s:%d: bad verdict\n", path, ln);
            fclose(f);
            return -1;
        }
    }
    fclose(f);
    return 0;
}

/* ---- the comparison ---------------------------------------------------------------- */

static bool rej(struct kc_result r)
{
    return r.v == KC_REJECTED;
}

struct tally {
    int cases, bcpu, bcuda, nkit, ncpu, ncuda, newly;
};

/* Failures of `now` against `before`; prints them (when loud) and the
 * summary. */
static int compare(struct rows *now, struct rows *before, bool cuda,
                   bool loud)
{
    struct tally t[KEEL_OP_COUNT], all;
    int fails = 0, newly = 0;
    char a[32], b[32], c[32];

    memset(t, 0, sizeof(t));
    memset(&all, 0, sizeof(all));
#define FAILF(...)                                                           \
    do {                                                                     \
        fails++;                                                             \
        if (loud)                                                            \
            printf("FAIL: " __VA_ARGS__);                                    \
    } while (0)
    for (int i = 0; i < now->n; i++) {
        struct row *r = &now->r[i];
        struct row *bf = find_row(before, r->op, r->what, i);
        const char *name = keel_kit_op_info(r->op)->name;
        struct tally *q = &t[r->op];

        q->cases++;
        if (!strcmp(r->what, "valid")) {
            if (r->v[D_KIT].v != KC_ACCEPTED)
                FAILF("%s: the valid launch is not accepted by the kit (%s)\n",
                      name, kc_verdict_text(r->v[D_KIT], a, sizeof(a)));
            if (r->v[D_CPU].v != KC_ACCEPTED)
                FAILF("%s: the valid launch is not accepted by cpu (%s)\n",
                      name, kc_verdict_text(r->v[D_CPU], a, sizeof(a)));
            /* An op the CUDA plugin has no kernel for, now and in the
             * before-table (an op added to the catalog since), is not
             * cuda's to accept: the core runs it on the CPU plugin. */
            if (cuda && r->v[D_CUDA].v != KC_ACCEPTED &&
                r->v[D_CUDA].v != KC_PASSED &&
                !(r->v[D_CUDA].v == KC_NONE && bf &&
                  bf->v[D_CUDA].v == KC_NONE))
                FAILF("%s: the valid launch does not pass cuda's checks "
                      "(%s)\n",
                      name, kc_verdict_text(r->v[D_CUDA], a, sizeof(a)));
        }
        if (!bf) {
            FAILF("%s: case '%s' is not in the before-table: the cases or "
                  "the mutations changed; rerun tests/kitcases/"
                  "record-before.sh\n", name, r->what);
            continue;
        }
        if (rej(bf->v[D_CPU]))
            q->bcpu++;
        if (rej(bf->v[D_CUDA]))
            q->bcuda++;
        if (rej(r->v[D_KIT]))
            q->nkit++;
        if (rej(r->v[D_CPU]))
            q->ncpu++;
        if (rej(r->v[D_CUDA]))
            q->ncuda++;
        if ((rej(bf->v[D_CPU]) || rej(bf->v[D_CUDA])) && !rej(r->v[D_KIT]))
            FAILF("%s %s: refused before (cpu %s, cuda %s), kit now %s\n",
                  name, r->what, kc_verdict_text(bf->v[D_CPU], a, sizeof(a)),
                  kc_verdict_text(bf->v[D_CUDA], b, sizeof(b)),
                  kc_verdict_text(r->v[D_KIT], c, sizeof(c)));
        if (rej(bf->v[D_CPU]) && !rej(r->v[D_CPU]))
            FAILF("%s %s: refused by cpu before, cpu now %s\n", name,
                  r->what, kc_verdict_text(r->v[D_CPU], a, sizeof(a)));
        if (cuda && rej(bf->v[D_CUDA]) && !rej(r->v[D_CUDA]))
            FAILF("%s %s: refused by cuda before, cuda now %s\n", name,
                  r->what, kc_verdict_text(r->v[D_CUDA], a, sizeof(a)));
        if (!rej(bf->v[D_CPU]) && !rej(bf->v[D_CUDA]) &&
            (rej(r->v[D_KIT]) || rej(r->v[D_CPU]) ||
             (cuda && rej(r->v[D_CUDA])))) {
            q->newly++;
            newly++;
            if (loud)
                printf("newly refused: %s %s (before cpu %s, cuda %s)\n",
                       name, r->what,
                       kc_verdict_text(bf->v[D_CPU], a, sizeof(a)),
                       kc_verdict_text(bf->v[D_CUDA], b, sizeof(b)));
        }
    }
    for (int i = 0; i < before->n; i++) {
        struct row *bf = &before->r[i];
        if (!find_row(now, bf->op, bf->what, i))
            FAILF("%s: before-table case '%s' is no longer generated; rerun "
                  "tests/kitcases/record-before.sh\n",
                  keel_kit_op_info(bf->op)->name, bf->what);
    }
    if (loud) {
        printf("\n%-26s %6s | %9s %9s | %9s %9s %9s | %6s\n", "op", "cases",
               "bef.cpu", "bef.cuda", "now.kit", "now.cpu", "now.cuda",
               "newly");
        for (int op = 0; op < KEEL_OP_COUNT; op++) {
            struct tally *q = &t[op];
            printf("%-26s %6d | %9d %9d | %9d %9d %9s | %6d\n",
                   keel_kit_op_info(op)->name, q->cases, q->bcpu, q->bcuda,
                   q->nkit, q->ncpu,
                   cuda ? (snprintf(a, sizeof(a), "%d", q->ncuda), a) : "-",
                   q->newly);
            all.cases += q->cases;
            all.bcpu += q->bcpu;
            all.bcuda += q->bcuda;
            all.nkit += q->nkit;
            all.ncpu += q->ncpu;
            all.ncuda += q->ncuda;
        }
        printf("%-26s %6d | %9d %9d | %9d %9d %9s | %6d\n", "TOTAL",
               all.cases, all.bcpu, all.bcuda, all.nkit, all.ncpu,
               cuda ? (snprintf(a, sizeof(a), "%d", all.ncuda), a) : "-",
               newly);
        printf("\n%d failure(s), %d newly refused case(s)\n", fails, newly);
    }
#undef FAILF
    return fails;
}

/* ---- modes ------------------------------------------------------------------------------ */

static int now_rows(int argc, char **argv, struct rows *now, bool with_kit)
{
    const char *cpu = opt(argc, argv, "--cpu");
    int rc = make_rows(now);

    if (with_kit)
        rc |= run_driver(&kc_driver_kit, D_KIT, now, NULL);
    rc |= run_driver(&kc_driver_cpu, D_CPU, now, cpu);
    if (kc_have_cuda)
        rc |= run_driver(&kc_driver_cuda, D_CUDA, now, NULL);
    return rc;
}

static void cuda_skip_line(void)
{
    if (!kc_have_cuda)
        printf("SKIP (cuda column): the CUDA driver is not built: it needs "
               "nvcc and the CUDA plugin's kernels "
               "(-Dplugin_cuda_kernels=enabled); only kit and cpu are "
               "checked\n");
}

int main(int argc, char **argv)
{
    struct rows now = {0}, before = {0};
    const char *mode = argc > 1 ? argv[1] : "";
    char a[32], b[32];

    if (!strcmp(mode, "record")) {
        if (now_rows(argc, argv, &now, false))
            return 1;
        for (int i = 0; i < now.n; i++)
            printf("%s\t%s\t%s\t%s\n", keel_kit_op_info(now.r[i].op)->name,
                   now.r[i].what, kc_verdict_text(now.r[i].v[D_CPU], a, 32),
                   kc_verdict_text(now.r[i].v[D_CUDA], b, 32));
        free(now.r);
        return 0;
    }
    if (!strcmp(mode, "check") && argc > 2) {
        int fails;
        cuda_skip_line();
        if (load_before(argv[2], &before) ||
            now_rows(argc, argv, &now, true))
            return 1;
        fails = compare(&now, &before, kc_have_cuda, true);
        cuda_skip_line();
        free(now.r);
        free(before.r);
        return fails ? 1 : 0;
    }
    if (!strcmp(mode, "selftest") && argc > 2) {
        struct rows self = {0};
        int doctored = -1, f0, f1;

        if (load_before(argv[2], &before) ||
            now_rows(argc, argv, &now, true))
            return 1;
        /* a before-table consistent with now: a case refused before only
         * where the kit and that plugin refuse it now */
        for (int i = 0; i < now.n; i++) {
            struct row *r = &now.r[i], *s = add_row(&self, r->op, r->what);
            bool kit = rej(r->v[D_KIT]);
            s->v[D_CPU].v = kit && rej(r->v[D_CPU]) ? KC_REJECTED
                                                    : KC_ACCEPTED;
            s->v[D_CUDA].v = kit && rej(r->v[D_CUDA]) ? KC_REJECTED
                                                      : KC_ACCEPTED;
        }
        f0 = compare(&now, &self, kc_have_cuda, false);
        /* a case every checker accepts now, marked refused before by cpu */
        for (int i = 0; i < now.n && doctored < 0; i++)
            if (now.r[i].v[D_KIT].v == KC_ACCEPTED &&
                now.r[i].v[D_CPU].v == KC_ACCEPTED &&
                self.r[i].v[D_CUDA].v != KC_REJECTED)
                doctored = i;
        if (doctored < 0) {
            printf("FAIL: no case accepted now to doctor\n");
            return 1;
        }
        self.r[doctored].v[D_CPU].v = KC_REJECTED;
        f1 = compare(&now, &self, kc_have_cuda, false);
        printf("consistent before-table: %d failure(s) (valid launches "
               "only); doctored %s %s refused by cpu before: %d failure(s) "
               "(want 2 more: kit and cpu)\n",
               f0, keel_kit_op_info(self.r[doctored].op)->name,
               self.r[doctored].what, f1);
        /* and the real before-table's rows are all generated now */
        int missing = 0;
        for (int i = 0; i < before.n && !missing; i++)
            if (!find_row(&now, before.r[i].op, before.r[i].what, i)) {
                printf("FAIL: before.tsv has '%s %s', not generated now\n",
                       keel_kit_op_info(before.r[i].op)->name,
                       before.r[i].what);
                missing = 1;
            }
        free(now.r);
        free(before.r);
        free(self.r);
        return !missing && f1 == f0 + 2 ? 0 : 1;
    }
    fprintf(stderr, "usage: kitcases record|check BEFORE|selftest BEFORE "
                    "--cpu PLUGIN\n");
    return 2;
}
