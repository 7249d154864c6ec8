/*
 * keel infer, keel export-onnx, keel import-onnx — the deployment path
 * from the command line (docs/cli.md, docs/inference.md).
 *
 *   keel infer PREFIX|MODEL.onnx --input NAME=FILE.npy ... [--device NAME]
 *              [--precision DTYPE] [--threads N] [--no-ir-optim]
 *              [--no-memory-optim] [--delete-pass PASS]... [--runs N]
 *              [--output-dir DIR] [--summary]
 *   keel export-onnx PREFIX OUT.onnx [--opset N]
 *   keel import-onnx IN.onnx PREFIX
 */
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <keel/inference.h>
#include <keel/io.h>
#include <keel/jit.h>

#include "cli.h"

#define MAX_INPUTS 64
#define MAX_DELETED 16

/* An int in [lo, hi] from text; false for anything else. */
static bool parse_count(const char *s, int lo, int hi, int *out)
{
    long v;

    if (!keel_cli_parse_long(s, lo, hi, &v))
        return false;
    *out = (int)v;
    return true;
}

static bool parse_precision(const char *s, keel_dtype *out)
{
    static const struct {
        const char *name;
        keel_dtype dt;
    } names[] = {{"float32", KEEL_F32}, {"float16", KEEL_F16},
                 {"bfloat16", KEEL_BF16}};

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (!strcmp(s, names[i].name)) {
            *out = names[i].dt;
            return true;
        }
    return false;
}

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

struct infer_args {
    const char *prefix, *device, *out_dir;
    const char *in_name[MAX_INPUTS], *in_file[MAX_INPUTS];
    int n_in;
    const char *deleted[MAX_DELETED];
    int n_deleted;
    keel_dtype precision;
    int threads, runs;
    bool ir_optim, memory_optim, summary;
};

static int infer_parse(int argc, char **argv, struct infer_args *a)
{
    const keel_cli_command *cmd = &keel_cmd_infer;

    *a = (struct infer_args){.precision = KEEL_F32, .runs = 1,
                             .ir_optim = true, .memory_optim = true};
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool takes = !strcmp(s, "--input") || !strcmp(s, "--device") ||
                     !strcmp(s, "--precision") || !strcmp(s, "--threads") ||
                     !strcmp(s, "--delete-pass") || !strcmp(s, "--runs") ||
                     !strcmp(s, "--output-dir");

        if (takes && !v)
            return keel_cli_usage_error(cmd, "%s needs a value", s);
        if (!strcmp(s, "--input")) {
            const char *eq = strchr(v, '=');
            if (a->n_in == MAX_INPUTS)
                return keel_cli_usage_error(cmd, "more than %d --input",
                                            MAX_INPUTS);
            /* NAME=FILE, or FILE alone for a one-input graph. */
            a->in_name[a->n_in] = eq ? v : NULL;
            a->in_file[a->n_in] = eq ? eq + 1 : v;
            if (eq && (eq == v || !eq[1]))
                return keel_cli_usage_error(
                    cmd, "--input '%s': expected NAME=FILE.npy", v);
            a->n_in++;
        } else if (!strcmp(s, "--device")) {
            a->device = v;
        } else if (!strcmp(s, "--precision")) {
            if (!parse_precision(v, &a->precision))
                return keel_cli_usage_error(
                    cmd, "--precision '%s': expected float32, float16 or "
                         "bfloat16",
                    v);
        } else if (!strcmp(s, "--threads")) {
            if (!parse_count(v, 1, 4096, &a->threads))
                return keel_cli_usage_error(
                    cmd, "--threads '%s': expected 1 to 4096", v);
        } else if (!strcmp(s, "--runs")) {
            if (!parse_count(v, 1, 1000000, &a->runs))
                return keel_cli_usage_error(
                    cmd, "--runs '%s': expected 1 to 1000000", v);
        } else if (!strcmp(s, "--delete-pass")) {
            if (a->n_deleted == MAX_DELETED)
                return keel_cli_usage_error(cmd, "more than %d --delete-pass",
                                            MAX_DELETED);
            a->deleted[a->n_deleted++] = v;
        } else if (!strcmp(s, "--output-dir")) {
            a->out_dir = v;
        } else if (!strcmp(s, "--no-ir-optim")) {
            a->ir_optim = false;
            continue;
        } else if (!strcmp(s, "--no-memory-optim")) {
            a->memory_optim = false;
            continue;
        } else if (!strcmp(s, "--summary")) {
            a->summary = true;
            continue;
        } else if (s[0] == '-' && s[1]) {
            return keel_cli_usage_error(cmd, "unknown option '%s'", s);
        } else if (!a->prefix) {
            a->prefix = s;
            continue;
        } else {
            return keel_cli_usage_error(cmd, "unexpected argument '%s'", s);
        }
        i++; /* the option's value */
    }
    if (!a->prefix)
        return keel_cli_usage_error(cmd, "no model PREFIX given");
    return KEEL_EXIT_OK;
}

static int infer_config(const struct infer_args *a,
                        keel_inference_config **cfg)
{
    const keel_cli_command *cmd = &keel_cmd_infer;
    keel_status st = keel_inference_config_create(a->prefix, cfg);

    if (st == KEEL_STATUS_OK && a->device)
        st = keel_inference_config_set_device(*cfg, a->device);
    if (st == KEEL_STATUS_OK && a->threads)
        st = keel_inference_config_set_threads(*cfg, a->threads);
    if (st == KEEL_STATUS_OK)
        st = keel_inference_config_set_precision(*cfg, a->precision);
    if (st == KEEL_STATUS_OK)
        st = keel_inference_config_switch_ir_optim(*cfg, a->ir_optim);
    if (st == KEEL_STATUS_OK)
        st = keel_inference_config_enable_memory_optim(*cfg,
                                                       a->memory_optim);
    for (int i = 0; st == KEEL_STATUS_OK && i < a->n_deleted; i++)
        st = keel_inference_config_delete_pass(*cfg, a->deleted[i]);
    return st == KEEL_STATUS_OK ? KEEL_EXIT_OK
                                : keel_cli_runtime_error(cmd, "config", st);
}

/* Load each --input onto the predictor's device and hand it over. */
static int infer_inputs(const struct infer_args *a, keel_predictor *p)
{
    const keel_cli_command *cmd = &keel_cmd_infer;
    int n = keel_predictor_num_inputs(p);
    bool given[MAX_INPUTS] = {false};

    if (n > MAX_INPUTS) {
        fprintf(stderr, "keel infer: the model has %d inputs; this command "
                        "takes at most %d\n",
                n, MAX_INPUTS);
        return KEEL_EXIT_ERROR;
    }
    for (int i = 0; i < a->n_in; i++) {
        char name[256];
        keel_io_handle *h;
        keel_tensor *t = NULL;
        keel_status st;
        int k;

        if (a->in_name[i]) {
            size_t len = (size_t)(strchr(a->in_name[i], '=') - a->in_name[i]);
            if (len >= sizeof(name))
                return keel_cli_usage_error(cmd, "input name too long");
            memcpy(name, a->in_name[i], len);
            name[len] = '\0';
        } else if (n == 1 && a->n_in == 1) {
            snprintf(name, sizeof(name), "%s", keel_predictor_input_name(p, 0));
        } else {
            return keel_cli_usage_error(
                cmd, "--input '%s' has no NAME=: the model has %d inputs", 
                a->in_file[i], n);
        }
        for (k = 0; k < n; k++)
            if (!strcmp(keel_predictor_input_name(p, k), name))
                break;
        if (k == n)
            return keel_cli_usage_error(cmd, "the model has no input '%s'",
                                        name);
        if (given[k])
            return keel_cli_usage_error(cmd, "input '%s' given twice", name);
        given[k] = true;
        h = keel_predictor_input_handle(p, name);
        st = keel_npy_load(a->in_file[i], a->device, &t);
        if (st == KEEL_STATUS_OK)
            st = h ? keel_io_handle_share(h, t) : keel_last_status();
        keel_tensor_free(t);
        if (st != KEEL_STATUS_OK)
            return keel_cli_runtime_error(cmd, a->in_file[i], st);
    }
    for (int k = 0; k < n; k++)
        if (!given[k])
            return keel_cli_usage_error(
                cmd, "no --input for the model's input '%s'",
                keel_predictor_input_name(p, k));
    return KEEL_EXIT_OK;
}

static int infer_outputs(const struct infer_args *a, keel_predictor *p)
{
    const keel_cli_command *cmd = &keel_cmd_infer;

    for (int i = 0; i < keel_predictor_num_outputs(p); i++) {
        const char *name = keel_predictor_output_name(p, i);
        keel_tensor *t =
            keel_io_handle_tensor(keel_predictor_output_handle(p, name));
        keel_status st;

        if (a->out_dir) {
            char path[4096];
            int len = snprintf(path, sizeof(path), "%s/%s.npy", a->out_dir,
                               name);
            if (len < 0 || (size_t)len >= sizeof(path))
                return keel_cli_usage_error(cmd, "--output-dir too long");
            st = keel_npy_save(path, t);
            if (st != KEEL_STATUS_OK)
                return keel_cli_runtime_error(cmd, path, st);
            printf("%s: wrote %s\n", name, path);
        } else {
            printf("%s: ", name);
            st = keel_tensor_print(t, stdout);
            if (st != KEEL_STATUS_OK)
                return keel_cli_runtime_error(cmd, name, st);
        }
    }
    return KEEL_EXIT_OK;
}

/* An ONNX model: imported and saved as a graph in a new temporary folder
 * (dir), whose prefix replaces a->prefix. */
static int infer_import(struct infer_args *a, char *dir, size_t dsize,
                        char *prefix, size_t psize)
{
    const keel_cli_command *cmd = &keel_cmd_infer;
    const char *tmp = getenv("TMPDIR");
    keel_graph *g = NULL;
    keel_status st;
    int n = snprintf(dir, dsize, "%s/keel-infer-XXXXXX",
                     tmp && *tmp ? tmp : "/tmp");

    if (n < 0 || (size_t)n >= dsize || !mkdtemp(dir)) {
        dir[0] = '\0';
        fprintf(stderr, "keel infer: cannot make a temporary folder for "
                        "the imported model (TMPDIR)\n");
        return KEEL_EXIT_ERROR;
    }
    snprintf(prefix, psize, "%s/model", dir);
    st = keel_onnx_import(a->prefix, "cpu", &g);
    if (st == KEEL_STATUS_OK)
        st = keel_jit_save(g, prefix);
    keel_graph_free(g);
    if (st != KEEL_STATUS_OK)
        return keel_cli_runtime_error(cmd, a->prefix, st);
    a->prefix = prefix;
    return KEEL_EXIT_OK;
}

static void infer_import_clean(const char *dir)
{
    char path[4200];

    if (!dir[0])
        return;
    snprintf(path, sizeof(path), "%s/model.keel.json", dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    unlink(path);
    rmdir(dir);
}

static bool is_onnx(const char *path)
{
    size_t n = strlen(path);

    return n > 5 && !strcmp(path + n - 5, ".onnx");
}

static int cmd_infer_run(int argc, char **argv)
{
    const keel_cli_command *cmd = &keel_cmd_infer;
    struct infer_args a;
    keel_inference_config *cfg = NULL;
    keel_predictor *p = NULL;
    double *ms = NULL;
    char dir[4096] = "", prefix[4200];
    int rc = infer_parse(argc, argv, &a);

    if (rc != KEEL_EXIT_OK)
        return rc;
    if (is_onnx(a.prefix))
        rc = infer_import(&a, dir, sizeof(dir), prefix, sizeof(prefix));
    if (rc == KEEL_EXIT_OK)
        rc = infer_config(&a, &cfg);
    if (rc == KEEL_EXIT_OK) {
        keel_status st = keel_predictor_create(cfg, &p);
        if (st != KEEL_STATUS_OK)
            rc = keel_cli_runtime_error(cmd, a.prefix, st);
    }
    if (rc == KEEL_EXIT_OK)
        rc = infer_inputs(&a, p);
    if (rc == KEEL_EXIT_OK && !(ms = malloc(sizeof(double) * (size_t)a.runs))) {
        fprintf(stderr, "keel infer: out of memory\n");
        rc = KEEL_EXIT_ERROR;
    }
    for (int r = 0; rc == KEEL_EXIT_OK && r < a.runs; r++) {
        double t0 = now_ms();
        keel_status st = keel_predictor_run(p);
        if (st != KEEL_STATUS_OK)
            rc = keel_cli_runtime_error(cmd, "run", st);
        /* An output read back ends the run on an asynchronous device. */
        else if (keel_predictor_num_outputs(p) > 0) {
            double v;
            keel_tensor *t = keel_io_handle_tensor(keel_predictor_output_handle(
                p, keel_predictor_output_name(p, 0)));
            if (t && keel_tensor_numel(t) > 0)
                (void)keel_tensor_item(t, 0, &v);
        }
        ms[r] = now_ms() - t0;
    }
    if (rc == KEEL_EXIT_OK)
        rc = infer_outputs(&a, p);
    if (rc == KEEL_EXIT_OK && a.runs > 1) {
        qsort(ms, (size_t)a.runs, sizeof(double), cmp_double);
        printf("%d runs: median %.3f ms, min %.3f ms, max %.3f ms "
               "(the first run included)\n",
               a.runs, ms[a.runs / 2], ms[0], ms[a.runs - 1]);
    }
    if (rc == KEEL_EXIT_OK && a.summary) {
        char buf[2048];
        keel_predictor_summary(p, buf, sizeof(buf));
        printf("%s\n", buf);
    }
    free(ms);
    keel_predictor_free(p);
    keel_inference_config_free(cfg);
    infer_import_clean(dir);
    return rc;
}

const keel_cli_command keel_cmd_infer = {
    .name = "infer",
    .synopsis = "PREFIX|MODEL.onnx --input [NAME=]FILE.npy ... "
                "[--device NAME] "
                "[--precision float32|float16|bfloat16] [--threads N] "
                "[--no-ir-optim] [--no-memory-optim] [--delete-pass PASS] "
                "[--runs N] [--output-dir DIR] [--summary]",
    .summary = "run a saved graph in a Predictor on .npy inputs",
    .help =
        "Load the graph keel_jit_save wrote at PREFIX (PREFIX.keel.json and\n"
        "PREFIX.safetensors) into a Predictor on --device (default: the\n"
        "current device), set each input from a .npy file, run, and print\n"
        "each output, or write it to DIR/NAME.npy with --output-dir.\n"
        "Every input of the graph needs an --input NAME=FILE.npy; a graph\n"
        "with one input also takes --input FILE.npy. --precision runs the\n"
        "graph in float16 or bfloat16 (auto_cast O1; outputs cast back),\n"
        "--threads sets the CPU plugin's threads, --no-ir-optim turns the\n"
        "IR passes off and --delete-pass one of them (constant_folding,\n"
        "linear_folding, batch_norm_folding, fuse_activation,\n"
        "transpose_elimination, dead_code_elimination), --no-memory-optim\n"
        "keeps every\n"
        "intermediate until the run ends. --runs N runs N times and prints\n"
        "the median, minimum and maximum time of a run; --summary prints\n"
        "what the passes did and the last run's memory. A MODEL.onnx is\n"
        "imported first (as keel import-onnx does) into a temporary folder,\n"
        "removed afterwards.\n",
    .run = cmd_infer_run,
};

/* ---- export-onnx / import-onnx ------------------------------------------ */

static int cmd_export_onnx_run(int argc, char **argv)
{
    const keel_cli_command *cmd = &keel_cmd_export_onnx;
    const char *pos[2] = {NULL, NULL};
    int npos = 0, opset = 0;
    keel_graph *g = NULL;
    keel_status st;

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--opset")) {
            if (i + 1 == argc ||
                !parse_count(argv[i + 1], 1, INT_MAX, &opset))
                return keel_cli_usage_error(cmd,
                                            "--opset needs a positive number");
            i++;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return keel_cli_usage_error(cmd, "unknown option '%s'", argv[i]);
        } else if (npos == 2) {
            return keel_cli_usage_error(cmd, "unexpected argument '%s'",
                                        argv[i]);
        } else {
            pos[npos++] = argv[i];
        }
    }
    if (npos != 2)
        return keel_cli_usage_error(cmd, "expected PREFIX and OUT.onnx");
    st = keel_jit_load(pos[0], "cpu", &g);
    if (st != KEEL_STATUS_OK)
        return keel_cli_runtime_error(cmd, pos[0], st);
    st = keel_onnx_export(g, pos[1], opset);
    if (st == KEEL_STATUS_OK)
        printf("wrote %s (opset %d, %d nodes in keel's graph)\n", pos[1],
               opset ? opset : KEEL_ONNX_OPSET_MIN, keel_graph_num_nodes(g));
    keel_graph_free(g);
    return st == KEEL_STATUS_OK ? KEEL_EXIT_OK
                                : keel_cli_runtime_error(cmd, pos[1], st);
}

const keel_cli_command keel_cmd_export_onnx = {
    .name = "export-onnx",
    .synopsis = "PREFIX OUT.onnx [--opset N]",
    .summary = "write a saved graph as an ONNX model",
    .help = "Load the graph keel_jit_save wrote at PREFIX and write it to\n"
            "OUT.onnx (default-domain opset N, 17 to 23; default 17), the\n"
            "weights as initializers and dynamic dimensions as named\n"
            "dim_params. An op ONNX cannot express exactly is an error that\n"
            "names it, and then nothing is written.\n",
    .run = cmd_export_onnx_run,
};

static int cmd_import_onnx_run(int argc, char **argv)
{
    const keel_cli_command *cmd = &keel_cmd_import_onnx;
    keel_graph *g = NULL;
    keel_status st;

    for (int i = 1; i < argc; i++)
        if (argv[i][0] == '-' && argv[i][1])
            return keel_cli_usage_error(cmd, "unknown option '%s'", argv[i]);
    if (argc != 3)
        return keel_cli_usage_error(cmd, "expected IN.onnx and PREFIX");
    st = keel_onnx_import(argv[1], "cpu", &g);
    if (st != KEEL_STATUS_OK)
        return keel_cli_runtime_error(cmd, argv[1], st);
    st = keel_jit_save(g, argv[2]);
    if (st == KEEL_STATUS_OK)
        printf("wrote %s.keel.json and %s.safetensors (%d nodes, %d "
               "inputs, %d outputs)\n",
               argv[2], argv[2], keel_graph_num_nodes(g),
               keel_graph_num_inputs(g), keel_graph_num_outputs(g));
    keel_graph_free(g);
    return st == KEEL_STATUS_OK ? KEEL_EXIT_OK
                                : keel_cli_runtime_error(cmd, argv[2], st);
}

const keel_cli_command keel_cmd_import_onnx = {
    .name = "import-onnx",
    .synopsis = "IN.onnx PREFIX",
    .summary = "convert an ONNX model into a keel graph",
    .help = "Read the ONNX model IN.onnx (the ops docs/inference.md lists;\n"
            "everything is validated) and save it as a keel graph at PREFIX\n"
            "(PREFIX.keel.json and PREFIX.safetensors), for keel infer or a\n"
            "Predictor.\n",
    .run = cmd_import_onnx_run,
};
