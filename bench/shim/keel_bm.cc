// keel_bm — the C interface of keel_bm.h over Google Benchmark (C++17).
//
// Each registered C benchmark becomes one benchmark::RegisterBenchmark()
// entry whose body wraps the benchmark::State in a keel_bm_state and calls
// the C function. The C side never sees a C++ type or an exception: every
// entry point catches what the library or the standard library may throw
// and turns it into an error return.

#include "keel_bm.h"

#include <benchmark/benchmark.h>

#include <cstdio>
#include <exception>
#include <memory>
#include <regex>
#include <string>
#include <vector>

struct keel_bm_state {
    benchmark::State *st;
    double manual; // seconds given to SetIterationTime in this call
};

namespace {

struct entry {
    std::string name;
    keel_bm_fn fn;
    void *ctx;
    void (*ctx_free)(void *);
    keel_bm_opts opts;
};

// The registry: owned here so that names can be matched against filters
// and contexts freed. Never destroyed at exit (keel_bm_clear empties it),
// which keeps it usable from static destructors of other objects.
keel_bm_hook_fn hook_fn;
void *hook_user;

std::vector<entry> &registry()
{
    static auto *r = new std::vector<entry>();
    return *r;
}

benchmark::TimeUnit to_unit(keel_bm_unit u)
{
    switch (u) {
    case KEEL_BM_UNIT_US:
        return benchmark::kMicrosecond;
    case KEEL_BM_UNIT_MS:
        return benchmark::kMillisecond;
    case KEEL_BM_UNIT_S:
        return benchmark::kSecond;
    default:
        return benchmark::kNanosecond;
    }
}

// The name the library reports (and filters on) for an entry: the given
// name, then "/iterations:N", then the time type, as BenchmarkName::str()
// joins them in Google Benchmark 1.7.
std::string reported_name(const entry &e)
{
    std::string n = e.name;

    if (e.opts.iterations > 0)
        n += "/iterations:" + std::to_string(e.opts.iterations);
    if (e.opts.time == KEEL_BM_TIME_MANUAL)
        n += "/manual_time";
    else if (e.opts.time == KEEL_BM_TIME_REAL)
        n += "/real_time";
    return n;
}

} // namespace

extern "C" {

int keel_bm_register(const char *name, keel_bm_fn fn, void *ctx,
                     void (*ctx_free)(void *), const keel_bm_opts *opts)
{
    if (!name || !*name || !fn)
        return -1;
    try {
        auto &reg = registry();
        for (const entry &e : reg)
            if (e.name == name)
                return -1;
        keel_bm_opts o = opts ? *opts : keel_bm_opts{};
        reg.push_back(entry{name, fn, ctx, ctx_free, o});

        std::string id = name;
        benchmark::internal::Benchmark *b = benchmark::RegisterBenchmark(
            name, [fn, ctx, id](benchmark::State &st) {
                keel_bm_state s{&st, 0.0};
                keel_bm_hook_fn h = hook_fn;

                if (h)
                    h(id.c_str(), true, hook_user);
                fn(&s, ctx);
                if (h)
                    h(id.c_str(), false, hook_user);
            });
        if (o.time == KEEL_BM_TIME_MANUAL)
            b->UseManualTime();
        else if (o.time == KEEL_BM_TIME_REAL)
            b->UseRealTime();
        b->Unit(to_unit(o.unit));
        if (o.iterations > 0)
            b->Iterations(o.iterations);
        return 0;
    } catch (const std::exception &ex) {
        std::fprintf(stderr, "keel_bm_register(%s): %s\n", name, ex.what());
        return -1;
    }
}

size_t keel_bm_count(void)
{
    return registry().size();
}

const char *keel_bm_name(size_t i)
{
    auto &reg = registry();
    return i < reg.size() ? reg[i].name.c_str() : nullptr;
}

bool keel_bm_any_selected(const char *filter, const char *prefix)
{
    return keel_bm_count_selected(filter, prefix) > 0;
}

size_t keel_bm_count_selected(const char *filter, const char *prefix)
{
    size_t n = 0;

    try {
        std::string spec = filter ? filter : "";
        bool negative = false;

        if (!spec.empty() && spec[0] == '-') {
            spec.erase(0, 1);
            negative = true;
        }
        if (spec.empty() || spec == "all")
            spec = ".";
        std::regex re(spec, std::regex_constants::extended);
        std::string pre = prefix ? prefix : "";
        for (const entry &e : registry()) {
            if (e.name.compare(0, pre.size(), pre) != 0)
                continue;
            if (std::regex_search(reported_name(e), re) != negative)
                n++;
        }
    } catch (const std::exception &) {
        // An invalid expression selects nothing (the library says so
        // itself when it runs).
        return 0;
    }
    return n;
}

void keel_bm_set_hook(keel_bm_hook_fn fn, void *user)
{
    hook_fn = fn;
    hook_user = user;
}

int keel_bm_add_context(const char *key, const char *value)
{
    if (!key || !value)
        return -1;
    try {
        benchmark::AddCustomContext(key, value);
        return 0;
    } catch (const std::exception &) {
        return -1;
    }
}

long keel_bm_run(int argc, const char *const *argv)
{
    try {
        // Initialize() reorders argv's pointers, never the strings.
        std::vector<char *> args;
        for (int i = 0; i < argc; i++)
            args.push_back(const_cast<char *>(argv[i]));
        args.push_back(nullptr);
        int n = argc;
        benchmark::Initialize(&n, args.data());
        if (benchmark::ReportUnrecognizedArguments(n, args.data()))
            return -1;
        long ran = static_cast<long>(benchmark::RunSpecifiedBenchmarks());
        benchmark::Shutdown();
        return ran;
    } catch (const std::exception &ex) {
        std::fprintf(stderr, "keel_bm_run: %s\n", ex.what());
        return -1;
    }
}

void keel_bm_clear(void)
{
    benchmark::ClearRegisteredBenchmarks();
    auto &reg = registry();
    for (entry &e : reg)
        if (e.ctx_free)
            e.ctx_free(e.ctx);
    reg.clear();
}

bool keel_bm_keep_running(keel_bm_state *s)
{
    return s->st->KeepRunning();
}

int64_t keel_bm_iterations(const keel_bm_state *s)
{
    return static_cast<int64_t>(s->st->iterations());
}

void keel_bm_set_iteration_time(keel_bm_state *s, double seconds)
{
    s->st->SetIterationTime(seconds);
    s->manual += seconds;
}

double keel_bm_manual_time(const keel_bm_state *s)
{
    return s->manual;
}

void keel_bm_set_bytes_processed(keel_bm_state *s, int64_t bytes)
{
    s->st->SetBytesProcessed(bytes);
}

void keel_bm_set_items_processed(keel_bm_state *s, int64_t items)
{
    s->st->SetItemsProcessed(items);
}

void keel_bm_set_counter(keel_bm_state *s, const char *name, double value,
                         unsigned flags)
{
    int f = benchmark::Counter::kDefaults;
    benchmark::Counter::OneK k = benchmark::Counter::kIs1000;

    if (!name)
        return;
    if (flags & KEEL_BM_COUNTER_RATE)
        f |= benchmark::Counter::kIsRate;
    if (flags & KEEL_BM_COUNTER_AVG_ITERATIONS)
        f |= benchmark::Counter::kAvgIterations;
    if (flags & KEEL_BM_COUNTER_INVERT)
        f |= benchmark::Counter::kInvert;
    if (flags & KEEL_BM_COUNTER_BASE_1024)
        k = benchmark::Counter::kIs1024;
    try {
        s->st->counters[name] = benchmark::Counter(
            value, static_cast<benchmark::Counter::Flags>(f), k);
    } catch (const std::exception &) {
        // Out of memory: the counter is simply missing from the report.
    }
}

void keel_bm_set_label(keel_bm_state *s, const char *label)
{
    try {
        s->st->SetLabel(label ? label : "");
    } catch (const std::exception &) {
    }
}

void keel_bm_skip_with_error(keel_bm_state *s, const char *message)
{
    s->st->SkipWithError(message ? message : "error");
}

bool keel_bm_error_occurred(const keel_bm_state *s)
{
    return s->st->error_occurred();
}

void keel_bm_pause_timing(keel_bm_state *s)
{
    s->st->PauseTiming();
}

void keel_bm_resume_timing(keel_bm_state *s)
{
    s->st->ResumeTiming();
}

} // extern "C"
