/*
 * Writes docs/ops.md from the op catalog (device-api/include/keel/ops.def).
 * Run by the build; `meson test` checks that the committed copy is current.
 *
 *   gen-ops-doc OUTPUT
 */
#include <stdio.h>
#include <string.h>

#define KEEL_OP_CATALOG_DEFINE_TABLE
#include <keel/op_catalog.h>

static const char *const dtype_names[KEEL_DTYPE_COUNT_] = {
    "f32", "f64", "f16", "bf16", "i8", "u8", "i32", "i64", "bool"};

static void dtypes(FILE *f, uint32_t mask)
{
    int first = 1;

    if (mask == KEEL_DT_ALL) {
        fputs("all", f);
        return;
    }
    if (mask == KEEL_DT_FLOAT) {
        fputs("float", f);
        return;
    }
    if (mask == KEEL_DT_NUMERIC) {
        fputs("numeric", f);
        return;
    }
    for (int i = 0; i < KEEL_DTYPE_COUNT_; i++)
        if (mask & KEEL_DTYPE_BIT(i)) {
            fprintf(f, "%s%s", first ? "" : " ", dtype_names[i]);
            first = 0;
        }
}

static const char *amp_name(keel_amp_class a)
{
    switch (a) {
    case KEEL_AMP_WHITE:
        return "white";
    case KEEL_AMP_BLACK:
        return "black";
    case KEEL_AMP_PROMOTE:
        return "promote";
    default:
        return "-";
    }
}

/* Markdown table cells must not contain '|'. */
static void cell(FILE *f, const char *s)
{
    for (; *s; s++)
        if (*s == '|')
            fputs("\\|", f);
        else
            fputc(*s, f);
}

static void count(FILE *f, int n)
{
    if (n < 0)
        fputs("n", f);
    else
        fprintf(f, "%d", n);
}

int main(int argc, char **argv)
{
    FILE *f;

    if (argc != 2) {
        fprintf(stderr, "usage: gen-ops-doc OUTPUT\n");
        return 2;
    }
    f = fopen(argv[1], "w");
    if (!f) {
        perror(argv[1]);
        return 1;
    }
    fprintf(f, "# keel op catalog\n\n"
               "Generated from `device-api/include/keel/ops.def` (catalog "
               "version %d, %d ops) by `tools/gen_ops_doc.c`; do not edit by "
               "hand. Regenerate with `ninja -C build docs/ops.md && cp "
               "build/docs/ops.md docs/`.\n\n"
               "Columns: inputs and outputs (`n`: a variable number), the "
               "dtypes the op is defined for (`float` = f32 f64 f16 bf16, "
               "`numeric` = float and integer types, `all` = numeric and "
               "bool), the shape rule, the backward rule used by autograd "
               "(`NONE`: not differentiable), the class under automatic "
               "mixed precision, the attributes (`name:type=default`; no "
               "default means required) and the float64 reference "
               "semantics.\n\n",
            KEEL_OP_CATALOG_VERSION, (int)KEEL_OP_COUNT);
    fputs("| op | in | out | dtypes | shape | backward | amp | attributes "
          "| semantics |\n"
          "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
          f);
    for (int i = 0; i < KEEL_OP_COUNT; i++) {
        const keel_op_info *op = &keel_op_table[i];
        fprintf(f, "| `%s` | ", op->name);
        count(f, op->num_inputs);
        fputs(" | ", f);
        count(f, op->num_outputs);
        fputs(" | ", f);
        dtypes(f, op->dtype_mask);
        fprintf(f, " | %s | %s | %s | ", op->shape_rule, op->grad_rule,
                amp_name(op->amp));
        if (*op->attrs) {
            fputs("`", f);
            cell(f, op->attrs);
            fputs("`", f);
        } else {
            fputs("-", f);
        }
        fputs(" | ", f);
        cell(f, op->semantics);
        fputs(" |\n", f);
    }
    if (fclose(f) != 0) {
        perror(argv[1]);
        return 1;
    }
    return 0;
}
