/*
 * conform-check: run `keel conform`, then check its exit status and the
 * JSON report it wrote. Used by the meson tests of conformance/.
 *
 *   conform-check --keel PATH --report FILE --exit N
 *                 [--failed TEST_ID]... [--message TEXT]
 *                 [--passed TEST_ID]... [--suite-failed SUITE]
 *                 [--stderr TEXT] [--certified] [--min-pass N]
 *                 -- CONFORM ARGS...
 *
 * --failed: the report must mark TEST_ID "fail" (with --message, the
 * failure message of the first --failed test must contain TEXT; without
 * --failed, the message of the first --suite-failed entry must).
 * --passed, --skipped: the report must mark TEST_ID "pass" or "skip".
 * --suite-failed: the report's suite_failures must name SUITE (its test
 * process ended abnormally after its last test).
 * --stderr: what keel conform wrote on stderr must contain TEXT (it is
 * passed through as well).
 * --certified: every selected test passed or was skipped and the report
 * certifies the level. --min-pass: at least N tests passed. --only-if VAR:
 * unless the environment variable VAR is 1, exit 77 (meson: skipped).
 * --abi M.N: the report's plugin.abi_version (what its tables claim) is
 * M.N.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

static int fail(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "conform-check: ");
    fprintf(stderr, fmt, a ? a : "", b ? b : "");
    fprintf(stderr, "\n");
    return 1;
}

static json_t *find_result(json_t *results, const char *id)
{
    for (size_t i = 0; i < json_array_size(results); i++) {
        json_t *r = json_array_get(results, i);
        const char *rid = json_string_value(json_object_get(r, "id"));
        if (rid && !strcmp(rid, id))
            return r;
    }
    return NULL;
}

int main(int argc, char **argv)
{
    const char *keel = NULL, *report = NULL, *message = NULL;
    const char *failed[16], *passed[16], *skipped[16], *suite_failed = NULL;
    const char *want_stderr = NULL, *want_abi = NULL;
    int npassed = 0, nskipped = 0, errpipe[2] = {-1, -1};
    char *errbuf = NULL;
    size_t errlen = 0;
    int nfailed = 0, want_exit = -1, min_pass = -1, status, i, rc = 0;
    bool certified = false;
    char **args;
    json_t *root, *results;
    json_error_t jerr;
    pid_t pid;

    for (i = 1; i < argc && strcmp(argv[i], "--"); i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--certified")) {
            certified = true;
            continue;
        }
        if (!v)
            return fail("option %s needs a value", argv[i], NULL);
        if (!strcmp(argv[i], "--keel"))
            keel = v;
        else if (!strcmp(argv[i], "--report"))
            report = v;
        else if (!strcmp(argv[i], "--exit"))
            want_exit = atoi(v);
        else if (!strcmp(argv[i], "--failed") && nfailed < 16)
            failed[nfailed++] = v;
        else if (!strcmp(argv[i], "--message"))
            message = v;
        else if (!strcmp(argv[i], "--passed") && npassed < 16)
            passed[npassed++] = v;
        else if (!strcmp(argv[i], "--skipped") && nskipped < 16)
            skipped[nskipped++] = v;
        else if (!strcmp(argv[i], "--suite-failed"))
            suite_failed = v;
        else if (!strcmp(argv[i], "--stderr"))
            want_stderr = v;
        else if (!strcmp(argv[i], "--min-pass"))
            min_pass = atoi(v);
        else if (!strcmp(argv[i], "--abi"))
            want_abi = v;
        else if (!strcmp(argv[i], "--only-if")) {
            const char *e = getenv(v);
            if (!e || strcmp(e, "1")) {
                printf("conform-check: skipped (set %s=1 to run)\n", v);
                return 77;
            }
        }
        else
            return fail("unknown option %s", argv[i], NULL);
        i++;
    }
    if (!keel || !report || want_exit < 0 || i >= argc)
        return fail("usage: conform-check --keel PATH --report FILE --exit N "
                    "[...] -- CONFORM ARGS",
                    NULL, NULL);
    args = calloc((size_t)(argc - i + 5), sizeof(*args));
    if (!args)
        return 1;
    args[0] = (char *)keel;
    args[1] = "conform";
    args[2] = "--report";
    args[3] = (char *)report;
    for (int k = i + 1; k < argc; k++)
        args[4 + k - i - 1] = argv[k];
    remove(report);
    if (want_stderr && pipe(errpipe))
        return fail("pipe: %s", strerror(errno), NULL);
    fflush(NULL);
    pid = fork();
    if (pid == 0) {
        if (want_stderr) {
            dup2(errpipe[1], STDERR_FILENO);
            close(errpipe[0]);
            close(errpipe[1]);
        }
        execv(keel, args);
        fprintf(stderr, "conform-check: exec %s: %s\n", keel, strerror(errno));
        _exit(127);
    }
    free(args);
    if (want_stderr && pid > 0) {
        size_t cap = 0;
        ssize_t n;

        close(errpipe[1]);
        for (;;) {
            if (errlen + 4096 + 1 > cap) {
                char *nb = realloc(errbuf, cap + 65536);
                if (!nb)
                    break;
                errbuf = nb;
                cap += 65536;
            }
            n = read(errpipe[0], errbuf + errlen, cap - errlen - 1);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                break;
            errlen += (size_t)n;
        }
        close(errpipe[0]);
        if (errbuf) {
            errbuf[errlen] = '\0';
            fputs(errbuf, stderr);
        }
    }
    if (pid < 0 || waitpid(pid, &status, 0) < 0)
        return fail("cannot run %s", keel, NULL);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != want_exit) {
        char got[32], want[32];
        snprintf(got, sizeof(got), "%d", WIFEXITED(status)
                                             ? WEXITSTATUS(status)
                                             : 128 + WTERMSIG(status));
        snprintf(want, sizeof(want), "%d", want_exit);
        return fail("keel conform exited with %s, expected %s", got, want);
    }
    if (want_stderr) {
        if (!errbuf || !strstr(errbuf, want_stderr))
            return fail("keel conform's stderr lacks \"%s\"", want_stderr,
                        NULL);
        printf("conform-check: stderr names \"%s\" as expected\n",
               want_stderr);
    }
    free(errbuf);
    if (nfailed == 0 && npassed == 0 && nskipped == 0 && !suite_failed &&
        !certified && !want_abi &&
        min_pass < 0)
        return 0; /* only the exit status was asked for */
    root = json_load_file(report, 0, &jerr);
    if (!root)
        return fail("cannot read the report %s: %s", report, jerr.text);
    results = json_object_get(root, "results");
    if (want_abi) {
        const char *abi = json_string_value(json_object_get(
            json_object_get(root, "plugin"), "abi_version"));
        if (!abi || strcmp(abi, want_abi))
            rc = fail("the plugin's tables claim ABI %s, expected %s",
                      abi ? abi : "(absent)", want_abi);
        else
            printf("conform-check: the plugin's tables claim ABI %s\n", abi);
    }
    for (int k = 0; k < nfailed; k++) {
        json_t *r = find_result(results, failed[k]);
        const char *res = r ? json_string_value(json_object_get(r, "result"))
                            : NULL;
        const char *msg = r ? json_string_value(json_object_get(r, "message"))
                            : NULL;
        if (!r) {
            rc = fail("the report has no test %s", failed[k], NULL);
            continue;
        }
        if (!res || strcmp(res, "fail")) {
            rc = fail("test %s is '%s', expected 'fail'", failed[k], res);
            continue;
        }
        printf("conform-check: %s failed as expected: %s\n", failed[k],
               msg ? msg : "");
        if (k == 0 && message && (!msg || !strstr(msg, message)))
            rc = fail("the message of %s lacks \"%s\"", failed[k], message);
    }
    for (int k = 0; k < npassed; k++) {
        json_t *r = find_result(results, passed[k]);
        const char *res = r ? json_string_value(json_object_get(r, "result"))
                            : NULL;
        if (!res || strcmp(res, "pass"))
            rc = fail("test %s is '%s', expected 'pass'", passed[k],
                      res ? res : "absent");
    }
    for (int k = 0; k < nskipped; k++) {
        json_t *r = find_result(results, skipped[k]);
        const char *res = r ? json_string_value(json_object_get(r, "result"))
                            : NULL;
        const char *msg = r ? json_string_value(json_object_get(r, "message"))
                            : NULL;
        if (!res || strcmp(res, "skip"))
            rc = fail("test %s is '%s', expected 'skip'", skipped[k],
                      res ? res : "absent");
        else
            printf("conform-check: %s skipped as expected: %s\n", skipped[k],
                   msg ? msg : "");
    }
    if (suite_failed) {
        json_t *sf = json_object_get(root, "suite_failures");
        const char *msg = NULL;

        for (size_t k = 0; k < json_array_size(sf); k++) {
            json_t *e = json_array_get(sf, k);
            const char *name = json_string_value(json_object_get(e, "suite"));
            if (name && !strcmp(name, suite_failed)) {
                msg = json_string_value(json_object_get(e, "message"));
                if (!msg)
                    msg = "";
                break;
            }
        }
        if (!msg) {
            rc = fail("the report's suite_failures lacks suite %s",
                      suite_failed, NULL);
        } else {
            printf("conform-check: suite %s failed as expected: %s\n",
                   suite_failed, msg);
            if (nfailed == 0 && message && !strstr(msg, message))
                rc = fail("the suite failure of %s lacks \"%s\"",
                          suite_failed, message);
        }
    }
    if (certified &&
        !json_is_true(json_object_get(json_object_get(root, "certification"),
                                      "certified")))
        rc = fail("the report does not certify the plugin", NULL, NULL);
    if (min_pass >= 0) {
        json_int_t pass = json_integer_value(
            json_object_get(json_object_get(root, "summary"), "passed"));
        if (pass < min_pass) {
            char a[32], b[32];
            snprintf(a, sizeof(a), "%lld", (long long)pass);
            snprintf(b, sizeof(b), "%d", min_pass);
            rc = fail("only %s tests passed, expected at least %s", a, b);
        }
    }
    json_decref(root);
    return rc;
}
