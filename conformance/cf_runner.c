/*
 * keel conform — isolation: suites run in forked children.
 *
 * Parent                                 child (one per suite, or resumed)
 *   fork, read the pipe  <---- JSON lines --- setup, then per test:
 *                                             {"ev":"start","t":i}
 *                                             {"ev":"end","t":i,"r":..}
 *
 * The parent knows which test a child is running. When the child dies in
 * the middle of one (a signal, an exit, or a kill after the test's timeout),
 * that test fails with the reason, and a new child resumes the suite at the
 * next test. Children reset the fatal signals to their default actions, so
 * a crash is a crash even under AddressSanitizer, and write nothing on the
 * parent's stdout. With --jobs N, up to N children run at once.
 */
#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "conform.h"
#include "progress.h"

/* ---- children still alive, for a parent killed by the user ---------------- */

/* Children run in their own process groups, so a Ctrl-C at the terminal
 * reaches only the parent: it kills them before it dies. */
#define MAX_LIVE 65
static volatile pid_t live[MAX_LIVE];

static void live_add(pid_t pid)
{
    for (int i = 0; i < MAX_LIVE; i++)
        if (!live[i]) {
            live[i] = pid;
            return;
        }
}

static void live_del(pid_t pid)
{
    for (int i = 0; i < MAX_LIVE; i++)
        if (live[i] == pid)
            live[i] = 0;
}

static void on_fatal_signal(int sig)
{
    for (int i = 0; i < MAX_LIVE; i++)
        if (live[i] > 0)
            kill(-live[i], SIGKILL);
    signal(sig, SIG_DFL);
    raise(sig);
}

static void catch_fatal_signals(void)
{
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_fatal_signal;
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
        sigaction(sigs[i], &sa, NULL);
}

/* ---- child side ------------------------------------------------------------ */

static int child_fd = -1;
static char child_failures[8 * CF_MSG_MAX];

static void send_json(json_t *obj)
{
    char *s = json_dumps(obj, JSON_COMPACT);
    size_t len, off = 0;

    json_decref(obj);
    if (!s)
        return;
    len = strlen(s);
    s[len] = '\n'; /* replaces the NUL; len + 1 bytes go out */
    while (off < len + 1) {
        ssize_t w = write(child_fd, s + off, len + 1 - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    free(s);
}

static void on_test_complete(const CU_pTest test, const CU_pSuite suite,
                             const CU_pFailureRecord failure)
{
    size_t n = strlen(child_failures);

    (void)test;
    (void)suite;
    for (CU_pFailureRecord f = failure; f; f = f->pNext) {
        int k;
        if (n + 8 >= sizeof(child_failures))
            break;
        k = snprintf(child_failures + n, sizeof(child_failures) - n,
                     "%s%s (%s:%u)", n ? "\n" : "",
                     f->strCondition ? f->strCondition : "failed",
                     f->strFileName ? f->strFileName : "?", f->uiLineNumber);
        if (k < 0)
            break;
        n += (size_t)k;
        if (n >= sizeof(child_failures))
            n = sizeof(child_failures) - 1;
    }
}

static void child_run_test(int index)
{
    struct cf_test *t = &cf_tests[index];
    enum cf_outcome outcome;
    const char *msg;
    double t0;
    json_t *o;

    cf_current = t;
    cf_test_state_reset();
    child_failures[0] = '\0';
    send_json(json_pack("{s:s,s:i}", "ev", "start", "t", index));
    t0 = cf_now();
    CU_run_test(t->cu_suite, t->cu_test);
    if (child_failures[0]) {
        outcome = CF_FAIL;
        msg = child_failures;
    } else if (cf_skipped()) {
        outcome = CF_SKIP;
        msg = cf_skip_reason();
    } else {
        outcome = CF_PASS;
        msg = "";
    }
    o = json_pack("{s:s,s:i,s:i,s:f,s:s,s:s}", "ev", "end", "t", index, "r",
                  (int)outcome, "ms", (cf_now() - t0) * 1e3, "msg", msg,
                  "notes", cf_notes());
    {
        double nmse, tol;

        /* JSON has no inf/NaN: a non-finite NMSE travels as null. */
        if (o && cf_metric_get(&nmse, &tol))
            json_object_set_new(
                o, "nmse",
                json_pack("{s:o,s:f}", "v",
                          isfinite(nmse) ? json_real(nmse) : json_null(),
                          "tol", tol));
    }
    send_json(o);
    cf_current = NULL;
}

static void stream_failure(const char *msg)
{
    if (cf_current)
        send_json(json_pack("{s:s,s:i,s:s}", "ev", "fail", "t",
                            (int)(cf_current - cf_tests), "msg", msg));
}

static void child_prepare(int fd)
{
    static const int fatal[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL,
                                SIGABRT, SIGTRAP, SIGSYS};
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = SIG_DFL;
    for (size_t i = 0; i < sizeof(fatal) / sizeof(fatal[0]); i++)
        sigaction(fatal[i], &sa, NULL);
    sigaction(SIGPIPE, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    memset((void *)live, 0, sizeof(live));
    setpgid(0, 0);
    /* The parent's stdout carries the progress; plugin chatter goes to
     * stderr. */
    dup2(STDERR_FILENO, STDOUT_FILENO);
    child_fd = fd;
    cf_fail_hook = stream_failure;
    CU_set_test_complete_handler(on_test_complete);
}

static void child_suite_main(const struct cf_config *cfg,
                             const struct cf_options *opt,
                             const struct cf_probe *probe, int s, int from,
                             int fd)
{
    const struct cf_suite *su = &cf_suites[s];
    char why[CF_MSG_MAX] = "";
    int rc;

    child_prepare(fd);
    if (su->ctx == CF_CTX_RAW)
        rc = cf_identity_setup(cfg, opt, probe->path, why, sizeof(why));
    else
        rc = cf_env_core_setup(cfg, opt, probe->path, why, sizeof(why));
    if (rc) {
        send_json(json_pack("{s:s,s:s}", "ev", "setup", "msg", why));
        _exit(0);
    }
    send_json(json_pack("{s:s}", "ev", "ready"));
    for (int k = from; k < su->ntests; k++)
        child_run_test(su->tests[k]);
    if (su->ctx == CF_CTX_RAW)
        cf_identity_teardown();
    else
        cf_env_core_teardown();
    _exit(0);
}

/* ---- the probe ------------------------------------------------------------------ */

static int probe_find_plugin(const struct cf_options *opt, int *idx)
{
    keel_plugin_info info;
    int n;

    if (opt->plugin_is_path) {
        keel_plugin_load(opt->plugin_arg, idx);
        return *idx >= 0 ? 0 : -1;
    }
    n = keel_plugin_count();
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n; i++) {
            const char *key;
            if (keel_plugin_get_info(i, &info) != KEEL_STATUS_OK)
                continue;
            key = pass == 0 ? info.name : info.device_type;
            if (key && !strcmp(key, opt->plugin_arg)) {
                *idx = i;
                return 0;
            }
        }
    return -1;
}

static json_t *props_json(const keel_device_props *p, const keel_memory_info *m,
                          int32_t d)
{
    return json_pack(
        "{s:i,s:s%,s:s%,s:s%,s:s%,s:s%,s:I,s:i,s:i,s:i,s:i,s:i,s:i,s:I,s:I,"
        "s:I}",
        "index", (int)d, "name", p->name, strnlen(p->name, sizeof(p->name)),
        "vendor", p->vendor, strnlen(p->vendor, sizeof(p->vendor)), "arch",
        p->arch, strnlen(p->arch, sizeof(p->arch)), "driver_version",
        p->driver_version,
        strnlen(p->driver_version, sizeof(p->driver_version)), "bus_id",
        p->bus_id, strnlen(p->bus_id, sizeof(p->bus_id)), "total_memory",
        (json_int_t)p->total_memory, "compute_units", (int)p->compute_units,
        "clock_khz", (int)p->clock_khz, "dtype_mask", (int)p->dtype_mask,
        "features", (int)p->features, "alloc_alignment",
        (int)p->alloc_alignment, "stream_priorities",
        (int)p->stream_priorities, "mem_total", (json_int_t)m->total,
        "mem_free", (json_int_t)m->free, "mem_used", (json_int_t)m->used);
}

static void probe_child(const struct cf_config *cfg,
                        const struct cf_options *opt, int fd)
{
    keel_plugin_info info;
    const keel_plugin_api *api;
    json_t *o, *devs;
    keel_place ref;
    int idx = -1;

    child_prepare(fd);
    keel_init();
    if (probe_find_plugin(opt, &idx) ||
        keel_plugin_get_info(idx, &info) != KEEL_STATUS_OK) {
        send_json(json_pack("{s:s,s:b,s:s}", "ev", "probe", "found", 0,
                            "msg", keel_last_error()));
        _exit(0);
    }
    o = json_pack("{s:s,s:b,s:b,s:s,s:s?,s:s?,s:s?,s:s?,s:i,s:i,s:i,s:s?,"
                  "s:s?}",
                  "ev", "probe", "found", 1, "loaded", info.loaded, "path",
                  info.path, "name", info.name, "version", info.version,
                  "device_type", info.device_type, "description",
                  info.description, "abi_major", (int)info.abi_major,
                  "abi_minor", (int)info.abi_minor, "device_count",
                  (int)info.device_count, "failed_check", info.failed_check,
                  "reason", info.reason);
    api = info.loaded ? keel_plugin_table(idx) : NULL;
    devs = json_array();
    for (int32_t d = 0; api && d < info.device_count && d < CF_MAX_DEVICES;
         d++) {
        keel_device_props p;
        keel_memory_info m;

        memset(&p, 0, sizeof(p));
        memset(&m, 0, sizeof(m));
        p.struct_size = sizeof(p);
        if (api->device->get_device_props(d, &p) != KEEL_STATUS_OK)
            memset(&p, 0, sizeof(p));
        api->memory->get_memory_info(d, &m);
        {
            json_t *dj = props_json(&p, &m, d);
            keel_collective_caps cc;
            char why[160] = "";
            int r = cf_coll_caps_query(api->collective, d, &cc, why,
                                       sizeof(why));

            json_object_set_new(
                dj, "coll_caps",
                json_pack("{s:i,s:I,s:I,s:I,s:I,s:s}", "declared", r,
                          "collectives", (json_int_t)cc.collectives,
                          "dtype_mask",
                          (json_int_t)cc.dtype_mask, "reduce_ops",
                          (json_int_t)cc.reduce_ops, "timeout_ms",
                          (json_int_t)cc.timeout_ms, "why", why));
            json_array_append_new(devs, dj);
        }
    }
    json_object_set_new(o, "devices", devs);
    json_object_set_new(o, "have_ref",
                        json_boolean(keel_place_parse("cpu:0", &ref) ==
                                     KEEL_STATUS_OK));
    (void)cfg;
    send_json(o);
    keel_shutdown();
    _exit(0);
}

static void copy_str(char *dst, size_t size, json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));

    snprintf(dst, size, "%s", s ? s : "");
}

static void props_from_json(json_t *d, keel_device_props *p,
                            keel_memory_info *m)
{
    memset(p, 0, sizeof(*p));
    memset(m, 0, sizeof(*m));
    p->struct_size = sizeof(*p);
    copy_str(p->name, sizeof(p->name), d, "name");
    copy_str(p->vendor, sizeof(p->vendor), d, "vendor");
    copy_str(p->arch, sizeof(p->arch), d, "arch");
    copy_str(p->driver_version, sizeof(p->driver_version), d,
             "driver_version");
    copy_str(p->bus_id, sizeof(p->bus_id), d, "bus_id");
    p->total_memory = (uint64_t)json_integer_value(
        json_object_get(d, "total_memory"));
    p->compute_units =
        (uint32_t)json_integer_value(json_object_get(d, "compute_units"));
    p->clock_khz = (uint32_t)json_integer_value(json_object_get(d, "clock_khz"));
    p->dtype_mask =
        (uint32_t)json_integer_value(json_object_get(d, "dtype_mask"));
    p->features = (uint32_t)json_integer_value(json_object_get(d, "features"));
    p->alloc_alignment =
        (uint32_t)json_integer_value(json_object_get(d, "alloc_alignment"));
    p->stream_priorities =
        (int32_t)json_integer_value(json_object_get(d, "stream_priorities"));
    m->total = (uint64_t)json_integer_value(json_object_get(d, "mem_total"));
    m->free = (uint64_t)json_integer_value(json_object_get(d, "mem_free"));
    m->used = (uint64_t)json_integer_value(json_object_get(d, "mem_used"));
}

static void probe_parse(json_t *o, struct cf_probe *pr)
{
    json_t *devs;
    size_t i;

    pr->ok = true;
    pr->loaded = json_is_true(json_object_get(o, "loaded"));
    copy_str(pr->path, sizeof(pr->path), o, "path");
    copy_str(pr->name, sizeof(pr->name), o, "name");
    copy_str(pr->version, sizeof(pr->version), o, "version");
    copy_str(pr->device_type, sizeof(pr->device_type), o, "device_type");
    copy_str(pr->description, sizeof(pr->description), o, "description");
    copy_str(pr->failed_check, sizeof(pr->failed_check), o, "failed_check");
    copy_str(pr->reason, sizeof(pr->reason), o, "reason");
    pr->abi_major = (uint32_t)json_integer_value(json_object_get(o, "abi_major"));
    pr->abi_minor = (uint32_t)json_integer_value(json_object_get(o, "abi_minor"));
    pr->device_count =
        (int32_t)json_integer_value(json_object_get(o, "device_count"));
    pr->have_ref = json_is_true(json_object_get(o, "have_ref"));
    devs = json_object_get(o, "devices");
    pr->ndev = 0;
    for (i = 0; i < json_array_size(devs) && i < CF_MAX_DEVICES; i++) {
        json_t *d = json_array_get(devs, i);
        pr->dev[pr->ndev] =
            (int32_t)json_integer_value(json_object_get(d, "index"));
        props_from_json(d, &pr->props[pr->ndev], &pr->mem[pr->ndev]);
        {
            json_t *cc = json_object_get(d, "coll_caps");
            keel_collective_caps *c = &pr->coll_caps[pr->ndev];

            memset(c, 0, sizeof(*c));
            pr->coll_declared[pr->ndev] =
                (int)json_integer_value(json_object_get(cc, "declared"));
            c->collectives = (uint32_t)json_integer_value(
                json_object_get(cc, "collectives"));
            c->dtype_mask = (uint32_t)json_integer_value(
                json_object_get(cc, "dtype_mask"));
            c->reduce_ops = (uint32_t)json_integer_value(
                json_object_get(cc, "reduce_ops"));
            c->timeout_ms = (uint32_t)json_integer_value(
                json_object_get(cc, "timeout_ms"));
            copy_str(pr->coll_why[pr->ndev], sizeof(pr->coll_why[0]), cc,
                     "why");
        }
        pr->ndev++;
    }
}

static void describe_status(int status, char *buf, size_t size)
{
    if (WIFSIGNALED(status))
        snprintf(buf, size, "killed by signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else if (WIFEXITED(status))
        snprintf(buf, size, "exited with status %d", WEXITSTATUS(status));
    else
        snprintf(buf, size, "ended (wait status %#x)", (unsigned)status);
}

static void kill_child(pid_t pid)
{
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
}

int cf_probe_run(const struct cf_config *cfg, const struct cf_options *opt,
                 struct cf_probe *probe, char *why, size_t whysz)
{
    char *buf = NULL, *nl;
    size_t len = 0, cap = 0;
    double deadline = cf_now() + cfg->test_timeout_s;
    int fds[2], status = 0;
    json_t *o = NULL;
    pid_t pid;

    memset(probe, 0, sizeof(*probe));
    if (pipe(fds)) {
        snprintf(why, whysz, "pipe: %s", strerror(errno));
        return -1;
    }
    fflush(NULL);
    pid = fork();
    if (pid < 0) {
        snprintf(why, whysz, "fork: %s", strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        close(fds[0]);
        probe_child(cfg, opt, fds[1]);
    }
    setpgid(pid, pid);
    catch_fatal_signals();
    live_add(pid);
    close(fds[1]);
    for (;;) {
        struct pollfd pfd = {fds[0], POLLIN, 0};
        int r = poll(&pfd, 1, 200);
        ssize_t n;

        if (cf_now() > deadline) {
            kill_child(pid);
            snprintf(why, whysz,
                     "loading the plugin hung for more than %.0f s",
                     cfg->test_timeout_s);
            break;
        }
        if (r <= 0)
            continue;
        if (len + 4096 > cap) {
            char *nb = realloc(buf, cap + 65536);
            if (!nb)
                break;
            buf = nb;
            cap += 65536;
        }
        n = read(fds[0], buf + len, cap - len - 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    close(fds[0]);
    waitpid(pid, &status, 0);
    live_del(pid);
    if (buf) {
        buf[len] = '\0';
        nl = strchr(buf, '\n');
        if (nl)
            *nl = '\0';
        o = json_loads(buf, 0, NULL);
    }
    free(buf);
    if (!o) {
        char st[128];
        if (!why[0]) {
            describe_status(status, st, sizeof(st));
            snprintf(why, whysz, "the process loading the plugin %s", st);
        }
        return -1;
    }
    if (!json_is_true(json_object_get(o, "found"))) {
        const char *m = json_string_value(json_object_get(o, "msg"));
        snprintf(why, whysz, "no plugin '%s' was found%s%s", opt->plugin_arg,
                 m && *m ? ": " : "", m ? m : "");
        json_decref(o);
        return -2;
    }
    probe_parse(o, probe);
    json_decref(o);
    return 0;
}

/* ---- parent: scheduling suites ---------------------------------------------- */

struct job {
    int suite;
    int next;          /* position in the suite of the next test     */
    pid_t pid;
    int fd;
    int cur;           /* test running (global index) or -1          */
    int cur_pos;
    double cur_start;
    double suite_start;
    bool ready;
    bool killed;
    bool expired;      /* the suite's timeout passed                */
    double last_event;
    char killed_why[256];
    char *buf;
    size_t len, cap;
    char pending[2048];  /* failures of the running test so far        */
};

struct runner {
    const struct cf_config *cfg;
    const struct cf_options *opt;
    const struct cf_probe *probe;
    FILE *out;
    int done_suites;
    int total_suites;
    keel_cli_progress progress; /* full/stress on a terminal (progress.h) */
    uint64_t tests_done;        /* tests of the suites printed so far     */
};

static void set_result(struct cf_test *t, enum cf_outcome o, double ms,
                       const char *msg, const char *notes)
{
    size_t n;

    if (t->known >= 0 && o == CF_FAIL)
        o = CF_XFAIL;
    else if (t->known >= 0 && o == CF_PASS)
        o = CF_XPASS;
    t->outcome = o;
    t->ms = ms;
    free(t->message);
    t->message = NULL;
    n = strlen(msg ? msg : "") + strlen(notes ? notes : "") + 16;
    t->message = malloc(n);
    if (!t->message)
        return;
    snprintf(t->message, n, "%s%s%s%s", msg ? msg : "",
             notes && *notes && msg && *msg ? "\n" : "",
             notes && *notes ? "note: " : "", notes ? notes : "");
}

static int spawn(struct runner *rn, struct job *j)
{
    int fds[2];
    pid_t pid;

    if (pipe(fds))
        return -1;
    fflush(NULL);
    pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        close(fds[0]);
        child_suite_main(rn->cfg, rn->opt, rn->probe, j->suite, j->next,
                         fds[1]);
    }
    setpgid(pid, pid);
    live_add(pid);
    close(fds[1]);
    fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
    j->pid = pid;
    j->fd = fds[0];
    j->cur = -1;
    j->ready = false;
    j->killed = false;
    j->killed_why[0] = '\0';
    j->len = 0;
    j->last_event = cf_now();
    return 0;
}

static int suite_pos(const struct cf_suite *s, int test)
{
    for (int k = 0; k < s->ntests; k++)
        if (s->tests[k] == test)
            return k;
    return -1;
}

static void fail_rest(struct job *j, const char *why)
{
    const struct cf_suite *s = &cf_suites[j->suite];

    for (int k = j->next; k < s->ntests; k++)
        set_result(&cf_tests[s->tests[k]], CF_FAIL, 0, why, NULL);
    j->next = s->ntests;
}

static void handle_line(struct job *j, const char *line)
{
    const struct cf_suite *s = &cf_suites[j->suite];
    json_t *o = json_loads(line, 0, NULL);
    const char *ev;
    int t;

    if (!o)
        return;
    j->last_event = cf_now();
    ev = json_string_value(json_object_get(o, "ev"));
    t = (int)json_integer_value(json_object_get(o, "t"));
    if (!ev) {
        /* ignore */
    } else if (!strcmp(ev, "ready")) {
        j->ready = true;
    } else if (!strcmp(ev, "setup")) {
        char why[CF_MSG_MAX + 64];
        snprintf(why, sizeof(why), "suite setup failed: %s",
                 json_string_value(json_object_get(o, "msg")));
        fail_rest(j, why);
    } else if (!strcmp(ev, "fail") && t == j->cur) {
        size_t n = strlen(j->pending);
        snprintf(j->pending + n, sizeof(j->pending) - n, "%s%s",
                 n ? "\n" : "", json_string_value(json_object_get(o, "msg")));
    } else if (!strcmp(ev, "start") && t >= 0 && t < cf_ntests) {
        j->pending[0] = '\0';
        j->cur = t;
        j->cur_pos = suite_pos(s, t);
        j->cur_start = cf_now();
    } else if (!strcmp(ev, "end") && t >= 0 && t < cf_ntests) {
        set_result(&cf_tests[t],
                   (enum cf_outcome)json_integer_value(json_object_get(o, "r")),
                   json_real_value(json_object_get(o, "ms")),
                   json_string_value(json_object_get(o, "msg")),
                   json_string_value(json_object_get(o, "notes")));
        {
            json_t *m = json_object_get(o, "nmse");

            if (json_is_object(m)) {
                json_t *v = json_object_get(m, "v");

                cf_tests[t].has_nmse = true;
                cf_tests[t].nmse = json_is_number(v) ? json_number_value(v)
                                                     : INFINITY;
                cf_tests[t].tol =
                    json_number_value(json_object_get(m, "tol"));
            }
        }
        j->next = suite_pos(s, t) + 1;
        j->cur = -1;
    }
    json_decref(o);
}

static void drain(struct job *j, bool *eof)
{
    for (;;) {
        ssize_t n;
        char *nl;

        if (j->len + 4096 > j->cap) {
            char *nb = realloc(j->buf, j->cap + 65536);
            if (!nb) {
                *eof = true;
                return;
            }
            j->buf = nb;
            j->cap += 65536;
        }
        n = read(j->fd, j->buf + j->len, j->cap - j->len - 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            *eof = errno != EAGAIN && errno != EWOULDBLOCK;
            return;
        }
        if (n == 0) {
            *eof = true;
            return;
        }
        j->len += (size_t)n;
        j->buf[j->len] = '\0';
        while ((nl = memchr(j->buf, '\n', j->len))) {
            *nl = '\0';
            handle_line(j, j->buf);
            j->len -= (size_t)(nl + 1 - j->buf);
            memmove(j->buf, nl + 1, j->len);
        }
    }
}

static void print_suite_line(struct runner *rn, const struct cf_suite *s)
{
    int pass = 0, fail = 0, skip = 0, known = 0;

    for (int k = 0; k < s->ntests; k++) {
        switch (cf_tests[s->tests[k]].outcome) {
        case CF_PASS:
            pass++;
            break;
        case CF_SKIP:
            skip++;
            break;
        case CF_KNOWN:
        case CF_XFAIL:
        case CF_XPASS:
            known++;
            break;
        default:
            fail++;
        }
    }
    if (s->exit_failure[0])
        fail++;
    keel_cli_progress_clear(&rn->progress);
    rn->tests_done += (uint64_t)s->ntests;
    rn->done_suites++;
    fprintf(rn->out, "[%3d/%d] %-24s %4d passed %4d failed %4d skipped",
            rn->done_suites, rn->total_suites, s->name, pass, fail, skip);
    if (known)
        fprintf(rn->out, " %3d known", known);
    fprintf(rn->out, " %8.2f s\n", s->seconds);
    for (int k = 0; k < s->ntests; k++) {
        const struct cf_test *t = &cf_tests[s->tests[k]];
        const char *m = t->message ? t->message : "";
        int len = (int)strcspn(m, "\n");
        bool failed = t->outcome == CF_FAIL || t->outcome == CF_NOT_RUN;

        if (failed || rn->opt->verbose)
            fprintf(rn->out, "        %-4s %s (%.1f ms)%s%.*s%s\n",
                    failed ? "FAIL"
                    : t->outcome == CF_PASS ? "ok"
                    : t->outcome == CF_SKIP ? "skip"
                                            : "known",
                    t->id, t->ms, len ? ": " : "", len > 300 ? 300 : len, m,
                    len > 300 ? "..." : "");
    }
    if (s->exit_failure[0])
        fprintf(rn->out, "        FAIL %s (suite): %s\n", s->name,
                s->exit_failure);
    fflush(rn->out);
}

/* The child is gone: record what its death means, and resume the suite
 * in a new child when tests remain. Returns true when the suite is done. */
static bool reap(struct runner *rn, struct job *j)
{
    struct cf_suite *s = &cf_suites[j->suite];
    char st[160], why[600], w[700];
    int status = 0;

    close(j->fd);
    j->fd = -1;
    while (waitpid(j->pid, &status, 0) < 0 && errno == EINTR)
        ;
    live_del(j->pid);
    describe_status(status, st, sizeof(st));
    if (j->killed)
        snprintf(why, sizeof(why), "%s", j->killed_why);
    else
        snprintf(why, sizeof(why), "the test process %s", st);
    if (j->cur >= 0) {
        char full[sizeof(j->pending) + sizeof(why) + 8];
        snprintf(full, sizeof(full), "%s%s%s", j->pending,
                 j->pending[0] ? "\n" : "", why);
        set_result(&cf_tests[j->cur], CF_FAIL,
                   (cf_now() - j->cur_start) * 1e3, full, NULL);
        j->next = j->cur_pos + 1;
        j->cur = -1;
    } else if (!j->ready) {
        snprintf(w, sizeof(w), "suite setup: %s", why);
        fail_rest(j, w);
    } else if (j->next < s->ntests) {
        snprintf(w, sizeof(w), "%s before the test started", why);
        set_result(&cf_tests[s->tests[j->next]], CF_FAIL, 0, w, NULL);
        j->next++;
    } else if (j->killed || !WIFEXITED(status) || WEXITSTATUS(status)) {
        /* Every test reported, but the process did not end cleanly: a
         * sanitizer's exit status, a crash or hang in teardown. That is a
         * failure of the suite, not a pass. */
        snprintf(s->exit_failure, sizeof(s->exit_failure),
                 "after its last test, %.280s", why);
    }
    if (j->expired)
        fail_rest(j, why);
    if (j->next < s->ntests) {
        if (spawn(rn, j) == 0)
            return false;
        fail_rest(j, "cannot fork a process for the rest of the suite");
    }
    s->seconds = cf_now() - j->suite_start;
    print_suite_line(rn, s);
    return true;
}

static void check_timeouts(struct runner *rn, struct job *j)
{
    double now = cf_now(), limit = rn->cfg->test_timeout_s;

    if (j->killed)
        return;
    if (now - j->suite_start > rn->cfg->suite_timeout_s) {
        j->expired = true;
        snprintf(j->killed_why, sizeof(j->killed_why),
                 "the suite ran past its timeout of %.0f s (timeouts.suite); "
                 "the test process was killed",
                 rn->cfg->suite_timeout_s);
    } else if (j->cur >= 0 && now - j->cur_start > limit) {
        snprintf(j->killed_why, sizeof(j->killed_why),
                 "timed out: still running after %.1f s (timeouts.test): "
                 "the plugin hangs or is too slow; the test process was "
                 "killed",
                 limit);
    } else if (j->cur < 0 && now - j->last_event > limit) {
        snprintf(j->killed_why, sizeof(j->killed_why),
                 "the test process hung for more than %.1f s outside a "
                 "test (%s) and was killed",
                 limit, j->ready ? "between tests or in teardown" : "setup");
    } else {
        return;
    }
    j->killed = true;
    kill_child(j->pid);
}

static void mark_known(struct cf_suite *s, const struct cf_options *opt)
{
    int k = 0;

    for (int i = 0; i < s->ntests; i++) {
        struct cf_test *t = &cf_tests[s->tests[i]];
        if (t->known >= 0 && !opt->also_known) {
            t->outcome = CF_KNOWN;
            continue;
        }
        s->tests[k++] = s->tests[i];
    }
    s->ntests = k;
}

static bool suite_runnable(const struct cf_probe *probe,
                           const struct cf_suite *s)
{
    if (probe->loaded)
        return true;
    return !strcmp(s->name, "identity") || !strcmp(s->name, "loader");
}

/* The live line (progress.h) counts tests: those of the suites printed
 * and those each running suite has passed; it names a running test. The
 * total shrinks as known failures are set aside (mark_known). */
static uint64_t selected_tests(void)
{
    uint64_t total = 0;

    for (int s = 0; s < cf_nsuites; s++)
        total += (uint64_t)cf_suites[s].ntests;
    return total;
}

static void progress_begin(struct runner *rn)
{
    keel_cli_progress_init(&rn->progress, rn->out, "conform",
                           selected_tests());
}

static void progress_tick(struct runner *rn, const struct job *js, int jobs)
{
    uint64_t done = rn->tests_done;
    const char *what = NULL;

    if (!rn->progress.live)
        return;
    rn->progress.total = selected_tests();
    for (int i = 0; i < jobs; i++) {
        if (js[i].suite < 0)
            continue;
        done += (uint64_t)js[i].next;
        if (!what && js[i].cur >= 0)
            what = cf_tests[js[i].cur].id;
    }
    keel_cli_progress_update(&rn->progress, done, what);
}

void cf_run_suites(const struct cf_config *cfg, const struct cf_options *opt,
                   const struct cf_probe *probe, FILE *out)
{
    struct runner rn = {cfg, opt, probe, out, 0, 0, {0}, 0};
    int jobs = opt->jobs > 0 ? opt->jobs : 1;
    struct job *js = calloc((size_t)jobs, sizeof(*js));
    int next_suite = 0, active = 0;

    if (!js)
        return;
    for (int s = 0; s < cf_nsuites; s++)
        if (cf_suites[s].ntests > 0)
            rn.total_suites++;
    for (int i = 0; i < jobs; i++)
        js[i].suite = -1;
    if (opt->level >= CF_LEVEL_FULL)
        progress_begin(&rn);
    for (;;) {
        struct pollfd pfd[64];
        int map[64], np = 0;

        /* Fill free slots. */
        for (int i = 0; i < jobs && next_suite < cf_nsuites; i++) {
            struct cf_suite *s;
            if (js[i].suite >= 0)
                continue;
            while (next_suite < cf_nsuites) {
                s = &cf_suites[next_suite];
                if (s->ntests == 0) {
                    next_suite++;
                    continue;
                }
                if (!suite_runnable(probe, s)) {
                    char why[CF_MSG_MAX + 128];
                    snprintf(why, sizeof(why),
                             "not run: the core did not load the plugin "
                             "[%.60s]: %.900s",
                             probe->failed_check, probe->reason);
                    for (int k = 0; k < s->ntests; k++)
                        set_result(&cf_tests[s->tests[k]], CF_SKIP, 0, why,
                                   NULL);
                    print_suite_line(&rn, s);
                    next_suite++;
                    continue;
                }
                mark_known(s, opt);
                if (s->ntests == 0) {
                    print_suite_line(&rn, s);
                    next_suite++;
                    continue;
                }
                break;
            }
            if (next_suite >= cf_nsuites)
                break;
            memset(&js[i], 0, sizeof(js[i]));
            js[i].suite = next_suite++;
            js[i].suite_start = cf_now();
            if (spawn(&rn, &js[i])) {
                fail_rest(&js[i], "cannot fork a test process");
                print_suite_line(&rn, &cf_suites[js[i].suite]);
                js[i].suite = -1;
                continue;
            }
            active++;
        }
        if (active == 0)
            break;
        for (int i = 0; i < jobs; i++)
            if (js[i].suite >= 0 && js[i].fd >= 0) {
                pfd[np].fd = js[i].fd;
                pfd[np].events = POLLIN;
                pfd[np].revents = 0;
                map[np++] = i;
            }
        poll(pfd, (nfds_t)np, 100);
        for (int k = 0; k < np; k++) {
            struct job *j = &js[map[k]];
            bool eof = false;

            if (pfd[k].revents)
                drain(j, &eof);
            if (!eof)
                check_timeouts(&rn, j);
            if (eof || j->killed) {
                if (!eof) {
                    /* Killed: collect what it still wrote, then reap. */
                    drain(j, &eof);
                }
                if (reap(&rn, j)) {
                    free(j->buf);
                    j->buf = NULL;
                    j->suite = -1;
                    active--;
                }
            }
        }
        progress_tick(&rn, js, jobs);
    }
    keel_cli_progress_clear(&rn.progress);
    for (int i = 0; i < jobs; i++)
        free(js[i].buf);
    free(js);
}
