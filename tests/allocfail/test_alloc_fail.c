/*
 * Allocation-failure walk (docs/testing.md, "Allocation failures").
 *
 * One scenario — build a small convolutional net, run one Adam training
 * step on random data, save its state dict, load the file and copy it back
 * into the net — is run once per N with the Nth allocation made by
 * libkeel or the CPU plugin failing (allocfail.h), for N = 1, 2, ... until
 * a run makes fewer than N allocations, i.e. succeeds untouched. At every
 * N the run must
 *   - end with KEEL_STATUS_OUT_OF_MEMORY and a message
 *     (keel_last_error()), or with OK when the failure was absorbed, and
 *     then with the results of a clean run (the same loss within float32
 *     rounding, a loaded dict equal to the saved one bit for bit);
 *   - not crash (a crash ends the test, with the last "N =" line printed
 *     before it when KEEL_ALLOCFAIL_VERBOSE=1);
 *   - leave no more keel allocations alive than before it, once its
 *     objects are freed and the device cache is emptied.
 *
 * Settings (environment):
 *   KEEL_ALLOCFAIL_STRIDE=k   walk N = 1, 1+k, 1+2k, ... (default 1)
 *   KEEL_ALLOCFAIL_MAX=m      stop after N = m (default 0: the whole walk)
 *   KEEL_ALLOCFAIL_ONLY=n     run N = n only (to reproduce one failure)
 *   KEEL_ALLOCFAIL_PERSIST=1  fail every allocation from N on, not only
 *                             the Nth
 *   KEEL_ALLOCFAIL_SELFTEST=leak
 *                             the test itself drops one tensor reference
 *                             whenever the scenario fails; the walk must
 *                             report that leak (exit 0 only if it does),
 *                             which shows the leak check can fail.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <keel/autograd.h>
#include <keel/io.h>
#include <keel/nn.h>
#include <keel/ops.h>
#include <keel/optim.h>
#include <keel/runtime.h>
#include <keel/tensor.h>

#include "allocfail.h"

/* An absorbed failure may take a slower path with another summation order
 * (the CPU plugin's matmul without its workspace), so the loss is compared
 * to a float32 rounding tolerance; the loaded dict must equal the saved
 * one exactly. */
#define LOSS_RTOL 1e-5

static bool selftest_leak;
static bool mismatch; /* a load gave back other values than were saved */
static char ckpt_path[4096];

/* A small LeNet-like net: conv 1->2 3x3, ReLU, max-pool, flatten, linear
 * 2*3*3 -> 4. */
static keel_status make_net(keel_layer **out)
{
    keel_layer *l[5] = {0};
    keel_status st = KEEL_STATUS_OK;
    int n = 0;

#define ADD(call)                                                            \
    if (st == KEEL_STATUS_OK)                                                \
        st = (call)
    ADD(keel_nn_conv2d(1, 2, 3, 3, NULL, NULL, NULL, &l[n++]));
    ADD(keel_nn_activation_default(KEEL_ACT_RELU, &l[n++]));
    ADD(keel_nn_max_pool2d(2, 2, 0, false, &l[n++]));
    ADD(keel_nn_flatten(1, -1, &l[n++]));
    ADD(keel_nn_linear(2 * 3 * 3, 4, NULL, NULL, &l[n++]));
#undef ADD
    if (st != KEEL_STATUS_OK) {
        for (int i = 0; i < n; i++)
            keel_layer_free(l[i]);
        return st;
    }
    return keel_sequential_create(l, n, out);
}

/* Every tensor of `a` has an equal twin in `b` (same name, dtype, shape,
 * bytes); a difference sets `mismatch` (a status says nothing about it). */
static keel_status compare_dicts(const keel_state_dict *a,
                                 const keel_state_dict *b)
{
    keel_status st = KEEL_STATUS_OK;

    if (keel_state_dict_count(a) != keel_state_dict_count(b)) {
        mismatch = true;
        return KEEL_STATUS_OK;
    }
    for (int64_t i = 0; i < keel_state_dict_count(a) && !st; i++) {
        const char *name;
        keel_tensor *ta, *tb;
        size_t nb;
        void *ha, *hb;

        st = keel_state_dict_at(a, i, &name, &ta);
        if (st)
            break;
        tb = keel_state_dict_get(b, name);
        if (!tb || keel_tensor_dtype(ta) != keel_tensor_dtype(tb) ||
            keel_tensor_numel(ta) != keel_tensor_numel(tb)) {
            mismatch = true;
            break;
        }
        nb = (size_t)keel_tensor_numel(ta) *
             keel_dtype_size(keel_tensor_dtype(ta));
        ha = calloc(1, nb + 1);
        hb = calloc(1, nb + 1);
        if (!ha || !hb) {
            free(ha);
            free(hb);
            return keel_clear_error(), KEEL_STATUS_OUT_OF_MEMORY;
        }
        st = keel_tensor_to_host(ta, ha, nb);
        if (!st)
            st = keel_tensor_to_host(tb, hb, nb);
        if (!st && memcmp(ha, hb, nb))
            mismatch = true;
        free(ha);
        free(hb);
    }
    return st;
}

#define TRY(call)                                                            \
    do {                                                                     \
        st = (call);                                                         \
        if (st != KEEL_STATUS_OK)                                            \
            goto out;                                                        \
    } while (0)

/* The scenario; returns its first failing status (or OK) and, in *where,
 * the call that returned it. Frees everything it made either way. */
static keel_status scenario(const char **where, double *loss_out)
{
    keel_layer *net = NULL, *ce = NULL;
    keel_state_dict *params = NULL, *saved = NULL, *loaded = NULL;
    keel_named_param np[8];
    keel_optimizer *opt = NULL;
    keel_optimizer_options oo;
    keel_tensor *x = NULL, *y = NULL, *logits = NULL, *loss = NULL;
    keel_status st;
    int64_t n;

    *where = "";
    keel_seed(11);
    *where = "make the net";
    TRY(make_net(&net));
    *where = "cross-entropy loss layer";
    TRY(keel_nn_cross_entropy_loss(NULL, &ce));
    *where = "parameters";
    TRY(keel_layer_parameters(net, &params));
    n = keel_state_dict_count(params);
    if (n > 8)
        n = 8;
    for (int64_t i = 0; i < n; i++)
        TRY(keel_state_dict_at(params, i, &np[i].name, &np[i].param));
    oo = keel_optimizer_default_options(KEEL_OPTIM_ADAM);
    oo.learning_rate = 1e-2;
    *where = "optimizer";
    TRY(keel_optimizer_create(KEEL_OPTIM_ADAM, np, (size_t)n, &oo, &opt));

    *where = "random inputs";
    TRY(keel_randn(4, (int64_t[]){3, 1, 8, 8}, KEEL_F32, NULL, &x));
    *where = "random labels";
    TRY(keel_randint(0, 4, 1, (int64_t[]){3}, KEEL_I64, NULL, &y));
    *where = "forward";
    TRY(keel_layer_call(net, x, &logits));
    *where = "loss";
    TRY(keel_layer_call2(ce, logits, y, &loss));
    *where = "backward";
    TRY(keel_backward(loss, NULL, false));
    *where = "optimizer step";
    TRY(keel_optimizer_step(opt));
    *where = "clear gradients";
    TRY(keel_optimizer_clear_grad(opt));
    *where = "loss value";
    TRY(keel_tensor_item(loss, 0, loss_out));

    *where = "state dict";
    TRY(keel_layer_state_dict(net, &saved));
    *where = "save";
    TRY(keel_save(ckpt_path, saved));
    *where = "load";
    TRY(keel_load(ckpt_path, NULL, &loaded));
    *where = "compare loaded with saved";
    TRY(compare_dicts(saved, loaded));
    *where = "set_state_dict";
    TRY(keel_layer_set_state_dict(net, loaded, true));
    *where = "";
out:
    if (st != KEEL_STATUS_OK && selftest_leak)
        keel_tensor_ref(x); /* the deliberate leak */
    keel_state_dict_free(loaded);
    keel_state_dict_free(saved);
    keel_tensor_free(loss);
    keel_tensor_free(logits);
    keel_tensor_free(y);
    keel_tensor_free(x);
    keel_optimizer_free(opt);
    keel_state_dict_free(params);
    keel_layer_free(ce);
    keel_layer_free(net);
    return st;
}

static uint64_t env_u64(const char *name, uint64_t dflt)
{
    const char *v = getenv(name);

    return v && *v ? strtoull(v, NULL, 10) : dflt;
}

static void settle(void)
{
    keel_place pl;

    if (keel_current_place(&pl) == KEEL_STATUS_OK)
        keel_device_synchronize(pl);
    keel_memory_empty_cache(NULL);
    keel_clear_error();
}

int main(void)
{
    uint64_t stride = env_u64("KEEL_ALLOCFAIL_STRIDE", 1);
    uint64_t max = env_u64("KEEL_ALLOCFAIL_MAX", 0);
    uint64_t only = env_u64("KEEL_ALLOCFAIL_ONLY", 0);
    int persist = (int)env_u64("KEEL_ALLOCFAIL_PERSIST", 0);
    int verbose = (int)env_u64("KEEL_ALLOCFAIL_VERBOSE", 0);
    const char *self = getenv("KEEL_ALLOCFAIL_SELFTEST");
    uint64_t total, baseline, walked = 0, failed = 0, absorbed = 0, oom = 0;
    uint64_t leaks = 0, silent = 0, last_n = 0, wrong = 0;
    double clean_loss;
    char site[512];
    const char *where, *tmp = getenv("TMPDIR");
    char dir[4096];
    double loss = NAN;
    keel_status st;
    int found;

    selftest_leak = self && !strcmp(self, "leak");
    if (stride == 0)
        stride = 1;
    snprintf(dir, sizeof dir, "%s/keel-allocfail-XXXXXX",
             tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(ckpt_path, sizeof ckpt_path, "%s/net.safetensors", dir);

    if (keel_set_device("cpu:0") != KEEL_STATUS_OK) {
        fprintf(stderr, "no cpu:0: %s\n", keel_last_error());
        return 1;
    }
    found = allocfail_scan_objects();
    if (found < 2) {
        fprintf(stderr, "found %d of libkeel and libkeel-cpu loaded\n", found);
        return 1;
    }

    /* Two clean runs: the first fills lazily made state (kernel tables,
     * workspaces), the second gives the allocation count and baseline. */
    for (int i = 0; i < 2; i++) {
        allocfail_arm(0, 0);
        st = scenario(&where, &loss);
        if (st != KEEL_STATUS_OK || !isfinite(loss)) {
            fprintf(stderr, "clean run %d failed at %s: %s\n", i, where,
                    keel_last_error());
            return 1;
        }
        total = allocfail_count();
        settle();
    }
    if (mismatch) {
        fprintf(stderr, "a clean run loaded other values than it saved\n");
        return 1;
    }
    clean_loss = loss;
    baseline = allocfail_live(NULL);
    allocfail_mark();
    printf("one clean run: %llu allocations by libkeel and libkeel-cpu, "
           "loss %.6f; %llu keel allocations live between runs\n",
           (unsigned long long)total, loss, (unsigned long long)baseline);

    for (uint64_t n = only ? only : 1;; n += stride) {
        uint64_t live;
        int fired;

        if (max && n > max)
            break;
        if (verbose)
            printf("N = %llu\n", (unsigned long long)n), fflush(stdout);
        loss = NAN;
        mismatch = false;
        allocfail_arm(n, persist);
        st = scenario(&where, &loss);
        fired = allocfail_fired();
        allocfail_disarm();
        allocfail_describe_failed(site, sizeof site);
        last_n = n;
        if (!fired) {
            if (st != KEEL_STATUS_OK) {
                printf("N = %llu: nothing failed, yet %s at %s: %s\n",
                       (unsigned long long)n, keel_status_name(st), where,
                       keel_last_error());
                failed++;
            }
            break;
        }
        walked++;
        if (st == KEEL_STATUS_OK) {
            /* Absorbed (a cache or a fast path did without): the results
             * must be exactly those of a clean run. */
            absorbed++;
            if (verbose)
                printf("N = %llu: absorbed (allocation at %s)\n",
                       (unsigned long long)n, site);
            if (mismatch || !(fabs(loss - clean_loss) <=
                              LOSS_RTOL * fabs(clean_loss))) {
                printf("N = %llu: succeeded with wrong results (loss %.9g, "
                       "clean %.9g%s; allocation at %s)\n",
                       (unsigned long long)n, loss, clean_loss,
                       mismatch ? ", loaded values differ" : "", site);
                wrong++;
            }
        } else {
            const char *msg = keel_last_error();

            if (st == KEEL_STATUS_OUT_OF_MEMORY)
                oom++;
            if (!msg || !*msg) {
                printf("N = %llu: %s at %s without a message (allocation "
                       "at %s)\n", (unsigned long long)n,
                       keel_status_name(st), where, site);
                silent++;
            } else if (st != KEEL_STATUS_OUT_OF_MEMORY) {
                /* Out of memory must say so, not pass for another error. */
                printf("N = %llu: %s, not OUT_OF_MEMORY, at %s (allocation "
                       "at %s): %s\n", (unsigned long long)n,
                       keel_status_name(st), where, site, msg);
                wrong++;
            } else if (verbose) {
                printf("N = %llu: %s at %s (allocation at %s): %s\n",
                       (unsigned long long)n, keel_status_name(st), where,
                       site, msg);
            }
        }
        settle();
        live = allocfail_live(NULL);
        if (live > baseline) {
            printf("N = %llu (%s at %s, allocation at %s): %llu keel "
                   "allocations leaked:\n", (unsigned long long)n,
                   keel_status_name(st), where, site,
                   (unsigned long long)(live - baseline));
            allocfail_report_new(8);
            leaks++;
            baseline = live;
            allocfail_mark();
        }
        if (only)
            break;
    }
    remove(ckpt_path);
    rmdir(dir);

    printf("allocation-failure walk (%s, stride %llu%s): N = %llu..%llu, "
           "%llu runs with a failed allocation: %llu ended in an error "
           "status (%llu OUT_OF_MEMORY), %llu absorbed it and succeeded; "
           "%llu without a message, %llu leaked, %llu with a wrong status or "
           "result, %llu other failures\n",
           persist ? "every allocation from N on" : "the Nth allocation",
           (unsigned long long)stride, max ? ", capped" : "",
           (unsigned long long)(only ? only : 1), (unsigned long long)last_n,
           (unsigned long long)walked, (unsigned long long)(walked - absorbed),
           (unsigned long long)oom, (unsigned long long)absorbed,
           (unsigned long long)silent, (unsigned long long)leaks,
           (unsigned long long)wrong, (unsigned long long)failed);
    if (selftest_leak) {
        /* The deliberate leak must have been seen, and nothing else. */
        printf("self-test: the deliberate leak was %s\n",
               leaks ? "caught" : "NOT caught");
        return leaks && !silent && !failed && !wrong ? 0 : 1;
    }
    return leaks || silent || failed || wrong ? 1 : 0;
}
