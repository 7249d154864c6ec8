/*
 * Writes docs/ops.md from the op catalog (device-api/include/keel/ops.def):
 * the table of ops, then what a kernel receives, in general and per shape
 * rule (the texts below). Run by the build; `meson test` checks that the
 * committed copy is current.
 *
 *   gen-ops-doc OUTPUT
 */
#include <stdio.h>
#include <string.h>

#define KEEL_OP_CATALOG_DEFINE_TABLE
#include <keel/op_catalog.h>

/*
 * What a kernel receives, per shape rule. Each text is checked against the
 * rule's code in core/src/dispatch/shape_*.c and dispatch.c; the generator refuses
 * a catalog whose shape rule has no text here, and a text whose rule no
 * op uses, so a new rule cannot ship undocumented.
 */
static const struct {
    const char *rule;
    const char *text;
} conventions[] = {
    {"broadcast",
     "Inputs (x, y). Both are promoted to a common dtype first (only "
     "floating dtypes promote: float16 with bfloat16 gives float32; any "
     "other mix is refused before the kernel), so they arrive in **one "
     "dtype, which keys the lookup**; `divide` casts integer inputs to "
     "float32 as well. Both descriptors arrive **already broadcast**: each "
     "has the output's rank and shape, with stride 0 along broadcast "
     "dimensions (and any view strides elsewhere), so the kernel never "
     "broadcasts. The output has that shape and dtype. bool arithmetic is "
     "refused before the kernel."},
    {"compare",
     "Inputs (x, y), promoted to one dtype (as for `broadcast`; bool "
     "inputs allowed) and **already broadcast** to the output's shape "
     "(stride 0 along broadcast dims). The common input dtype keys the "
     "lookup; the output is bool."},
    {"logical",
     "As `compare`: inputs of one dtype (which keys the lookup), already "
     "broadcast to the output's shape; the output is bool."},
    {"logical_unary",
     "Input x with its own descriptor (any strides); its dtype keys the "
     "lookup. Output bool, x's shape."},
    {"where",
     "Inputs (cond, x, y): cond is bool; x and y are promoted to one dtype, "
     "which keys the lookup (not cond's). All three arrive **already "
     "broadcast** to the output's shape (stride 0 along broadcast dims). "
     "Output: the value dtype."},
    {"same",
     "Input x with its own descriptor, unchanged: any strides, including 0 "
     "and negative ones, no contiguity guarantee. Its dtype keys the "
     "lookup; the output has x's shape and dtype. `flip`'s axes are "
     "checked to be in range but arrive as given (negative ones "
     "included); `clip`'s `min` and `max` are floats, not NaN, min <= max "
     "(an integer kernel converts them); `softplus`'s beta is non-zero."},
    {"cast",
     "Input x with its own descriptor (any strides); **x's dtype keys the "
     "lookup**, so one kernel per source dtype converts to every target. "
     "The output has x's shape and the `dtype` attribute's dtype (which "
     "may equal x's)."},
    {"creation",
     "No inputs. The `dtype` attribute keys the lookup (only dtypes of the "
     "op's set reach the kernel); the output has shape `shape` (0 to 8 "
     "non-negative entries; `eye` has 2, `arange` and `linspace` 1) in that "
     "dtype. Random ops take `seed` and `offset` as required attributes, "
     "which keel's API (`keel_uniform`, ...) fills from its generator, so "
     "every device computes the same Philox stream; `randint` has low < "
     "high."},
    {"reduce",
     "Input x with its own descriptor, unchanged (any strides). x's dtype "
     "keys the lookup. The `axis` attribute arrives **as given**: entries "
     "may be negative (add ndim), empty means every axis; dispatch has "
     "checked that they are in range and not repeated (a 0-d x accepts 0 "
     "and -1, which reduce nothing). Output: the reduced shape (reduced "
     "dims kept as 1 with `keepdim`); dtype x's, except `sum` of bool or "
     "integers, which is int64. An empty reduction reaches the kernel, "
     "which writes the identity (sum 0, prod 1; mean NaN); `max` and `min` "
     "over an empty axis with outputs left are refused before it."},
    {"reduce_arg",
     "As `reduce`, with at most one axis (empty: the flattened tensor, "
     "with `keepdim` every dim kept as 1); the output is int64. An empty "
     "axis with outputs left is refused before the kernel."},
    {"reduce_bool",
     "As `reduce` (any number of axes); the output is bool."},
    {"cumsum",
     "Input x unchanged (any strides); x's dtype keys the lookup. At most "
     "one axis, as given (may be negative); empty: the output is 1-D with "
     "x's element count, in row-major order of x's logical indices. "
     "Output dtype: x's for floating x, int64 for integers and bool."},
    {"same_axis",
     "Input x unchanged (any strides); x's dtype keys the lookup. `axis` "
     "arrives as given (negative allowed, range checked; a 0-d x accepts 0 "
     "and -1). Output: x's shape and dtype."},
    {"same_axis_grad",
     "Inputs (out, dout) of one shape, cast to their promoted dtype, which "
     "keys the lookup; `axis` as for `same_axis`. Output: that shape and "
     "dtype."},
    {"matmul",
     "Inputs (x, y), promoted to one floating dtype (which keys the "
     "lookup). The descriptors arrive **resolved**: x as [B..., M, K] and "
     "y as [B..., K, N] with the same batch shape B (broadcast batch dims "
     "have stride 0; an operand with fewer batch dims gets them with "
     "stride 0). `transpose_x` / `transpose_y` are **already applied as "
     "swapped strides**: the attributes are still passed, and a kernel "
     "must not apply them again. A 1-D x arrives as [1, K] (row stride 0), "
     "a 1-D y as [K, 1] (column stride 0). Any operand may be strided "
     "(column-major after a transpose, or a non-contiguous view). The "
     "output is contiguous with B * M * N elements in [B..., M, N] order; "
     "its rank drops M and/or N where an operand was 1-D. K may be 0 (the "
     "output is then zeros, written by the kernel)."},
    {"linear",
     "Inputs (x [..., in], weight [in, out], bias [out]) with bias optional "
     "(2 inputs when absent), promoted to one floating dtype (which keys "
     "the lookup). The descriptors are **not** rewritten: any strides. "
     "Output [..., out], contiguous."},
    {"conv2d",
     "Inputs (x [N, C, H, W], weight [O, C/groups, kh, kw], bias [O]) with "
     "bias optional, all promoted to one floating dtype (which keys the "
     "lookup); descriptors unchanged (any strides). The geometry "
     "attributes arrive **as given** and the kernel resolves them with the "
     "core's rules (core/src/dispatch/shape_conv.c): `stride`, `dilation` 1 or 2 "
     "values (>= 1); `padding` 1, 2 (h, w) or 4 (top, bottom, left, right) "
     "values (>= 0); `padding_algorithm` EXPLICIT uses `padding`, VALID "
     "pads nothing, SAME pads total = max((ceil(in/stride) - 1) * stride + "
     "(k - 1) * dilation + 1 - in, 0) per dim, half before and the odd one "
     "after. groups divides C and O; the dilated kernel fits the padded "
     "input. Output [N, O, oh, ow], oh = (H + pads - ((kh - 1) * dilation + "
     "1)) / stride + 1."},
    {"conv2d_grad",
     "Inputs (x, weight, dout), all promoted to one floating dtype (which "
     "keys the lookup), descriptors unchanged; attributes as for `conv2d` "
     "(as given), and dout has the forward output's shape. Outputs (dx, "
     "dweight, dbias) with x's, weight's and [O] shapes; only (dx, dweight) "
     "when `has_bias` = 0. With `need_dx` = 0 the kernel may leave dx "
     "unwritten."},
    {"conv2d_transpose",
     "As `conv2d` with weight [C, O/groups, kh, kw] and `output_padding` "
     "(empty, 1 or 2 values, each smaller than the stride or the "
     "dilation). Output [N, O, oh, ow], oh = (H - 1) * stride - pads + (kh "
     "- 1) * dilation + 1 + output_padding; SAME pads are computed from H "
     "as for conv2d."},
    {"conv2d_transpose_grad",
     "As `conv2d_grad`, for `conv2d_transpose`'s geometry and weight "
     "layout."},
    {"pool2d",
     "Input x [N, C, H, W], floating (its dtype keys the lookup), "
     "descriptor unchanged. Attributes as given: `kernel_size` 1 or 2 "
     "values, `stride` empty (= kernel_size), 1 or 2 values, `padding` 1, "
     "2 or 4 values as for conv2d, `ceil_mode`. Output [N, C, oh, ow], oh "
     "= (H + pads - kh + (ceil_mode ? stride - 1 : 0)) / stride + 1; "
     "`max_pool2d` adds int64 indices of that shape, each h * W + w within "
     "its input plane."},
    {"pool2d_grad",
     "`max_pool2d_grad`: inputs (x, indices, dout) with indices int64 "
     "(unchanged) and [N, C, oh, ow] like dout; x and dout are promoted to "
     "one floating dtype, which keys the lookup. `avg_pool2d_grad` and "
     "`adaptive_avg_pool2d_grad`: inputs (x, dout) with the forward's "
     "attributes (as given) and dout of the forward output's shape. "
     "Output dx: x's shape and the promoted dtype. Descriptors unchanged."},
    {"adaptive_pool2d",
     "Input x [N, C, H, W], floating, non-empty H and W; its dtype keys the "
     "lookup. `output_size` as given: 1 or 2 values, -1 keeps that input "
     "size. Output [N, C, oh, ow]."},
    {"batch_norm",
     "Inputs (x [N, C, ...] with >= 2 dims, scale, bias, running_mean, "
     "running_var), the last four 1-D [C]; x floating, its dtype keys the "
     "lookup; each of the four is x's dtype **or float32** (not cast: "
     "float16/bfloat16 x usually comes with float32 parameters). With "
     "`training` = 1 the kernel **updates running_mean and running_var in "
     "place**; they are never broadcast views (no stride 0 over a dim > "
     "1). Outputs: y (x's shape and dtype), saved_mean and saved_invstd "
     "[C] in float64 for a float64 x, float32 otherwise."},
    {"batch_norm_grad",
     "Inputs (x, scale, saved_mean, saved_invstd, dy): dy is cast to x's "
     "dtype and has x's shape; scale and the saved statistics are [C] in "
     "x's dtype or float32. x's dtype keys the lookup. Outputs dx (x's "
     "shape and dtype), dscale and dbias ([C], scale's dtype)."},
    {"layer_norm",
     "Inputs (x), (x, scale) or (x, scale, bias): absent ones are simply "
     "not passed. x floating (keys the lookup). `begin_norm_axis` arrives "
     "as given (may be negative: add ndim). scale and bias are 1-D with "
     "prod(x.shape[b:]) elements or have x.shape[b:], in x's dtype or "
     "float32 (not cast). Outputs: y (x's shape and dtype), mean and "
     "invstd of shape x.shape[:b], float64 for a float64 x, float32 "
     "otherwise."},
    {"layer_norm_grad",
     "Inputs (x, scale, mean, invstd, dy), or (x, mean, invstd, dy) "
     "without a scale; dy is cast to x's dtype, which keys the lookup; mean "
     "and invstd are any floating dtype (not cast) with prod(x.shape[:b]) "
     "elements in any shape. Always three outputs (dx, dscale, dbias): "
     "dscale and dbias take scale's shape and dtype, or x.shape[b:] in x's "
     "dtype without a scale."},
    {"group_norm",
     "Inputs (x [N, C, ...]), (x, scale) or (x, scale, bias), scale and "
     "bias [C] in x's dtype or float32; `groups` divides C. x's dtype keys "
     "the lookup. Outputs y, mean [N, groups], invstd [N, groups] "
     "(statistics float64 for float64 x, else float32)."},
    {"group_norm_grad",
     "Inputs (x, scale, mean, invstd, dy) or without scale; dy cast to x's "
     "dtype (keys the lookup); mean and invstd any floating dtype with N * "
     "groups elements. Outputs dx, dscale and dbias ([C]; scale's dtype, "
     "or x's without a scale)."},
    {"cross_entropy",
     "Inputs (logits, label) or (logits, label, weight). logits floating "
     "(keys the lookup), >= 1 dim; `axis` as given (may be negative), the "
     "class axis non-empty. Hard labels (`soft_label` = 0): any integer "
     "dtype, **not cast**, shaped like logits without the class axis or "
     "with it equal to 1; label values are not checked before the kernel "
     "(it checks the range, except `ignore_index`). Soft labels: any "
     "floating dtype (not cast), logits' shape. weight: [C], any floating "
     "dtype. `reduction` is none, mean or sum. Outputs: loss in logits' "
     "dtype, 0-d unless reduction is none (then logits' shape with the "
     "class axis 1, or without it when the label has no class axis); "
     "softmax of logits' shape."},
    {"cross_entropy_grad",
     "Inputs (softmax, label, dloss) or with weight; attributes and labels "
     "as for `cross_entropy`; dloss any floating dtype (not cast) with the "
     "loss's element count. softmax's dtype keys the lookup. Output "
     "dlogits: softmax's shape and dtype."},
    {"loss",
     "Inputs (x, label) for `mse_loss`, and (logit, label[, pos_weight]) "
     "for `bce_with_logits`: x floating (keys the lookup), label floating "
     "of x's shape and **any floating dtype** (not cast); pos_weight "
     "arrives **broadcast to x's shape** (stride 0). Output in x's dtype: "
     "0-d for mean and sum, x's shape for none."},
    {"nll_loss",
     "Inputs (logp [N, C, ...] or [C], label[, weight [C]]): logp floating "
     "(keys the lookup); label any integer dtype (not cast), logp's shape "
     "without the class dim (dim 1; dim 0 for 1-D logp); values are checked "
     "by the kernel. Output in logp's dtype: 0-d, or the label's shape for "
     "none."},
    {"embedding",
     "Inputs (ids, table [V, D]): ids of any integer dtype and shape (not "
     "cast, values not checked before the kernel); the **table's dtype "
     "keys the lookup**. `padding_idx` < V; negative means no padding row "
     "(not converted). Output [ids.shape..., D] in the table's dtype."},
    {"embedding_grad",
     "Inputs (ids, dout [ids.shape..., D]); **dout's dtype keys the "
     "lookup**. Output [num_embeddings, D] in dout's dtype, not zeroed by "
     "the core: the kernel writes every row, scatter-adding into zeros."},
    {"dropout",
     "Input x floating (keys the lookup), unchanged. `p` in [0, 1], `mode` "
     "upscale_in_train or downscale_in_infer, `seed` and `offset` "
     "required (keel's API fills them from its generator). Outputs (out in "
     "x's dtype, mask uint8), x's shape."},
    {"one_hot",
     "Input x of any integer dtype (keys the lookup); values not checked "
     "before the kernel. Output float32 [x.shape..., num_classes]."},
    {"concat",
     "One or more inputs of **one dtype** (a mix is refused, not "
     "promoted) and one rank >= 1, equal except along `axis`; descriptors "
     "unchanged (each may have its own strides). `axis` as given (may be "
     "negative). The dtype keys the lookup; the output's size along axis "
     "is the sum."},
    {"stack",
     "One or more inputs of one dtype and one shape, descriptors "
     "unchanged; `axis` as given, in [-(ndim+1), ndim] (relative to the "
     "output's rank). Output: a new dim of size n at axis."},
    {"split",
     "Input x unchanged; its dtype keys the lookup. One output per entry "
     "of `sections`, which arrives **as given, possibly with one -1**: the "
     "output shapes carry the resolved sizes, so read them there. `axis` "
     "as given (may be negative)."},
    {"gather",
     "Inputs (x, index); index int32 or int64 (not cast), values not "
     "checked before the kernel. `axis` as given (may be negative). A 1-D "
     "index gives the output x's shape with axis resized; `gather` also "
     "takes a 0-d index, which **arrives as [1] with stride 0** while the "
     "output drops the axis (rank ndim - 1). x's dtype keys the lookup."},
    {"scatter",
     "Inputs (x, index, updates): x >= 1 dim, index int32 or int64, updates "
     "of x's dtype shaped [n, x.shape[1:]...]; a 0-d index **arrives as "
     "[1]** and updates then gets a leading dim 1 with stride 0. Rows are "
     "along axis 0; index values are checked by the kernel. x's dtype keys "
     "the lookup; output: x's shape."},
    {"take_along_axis",
     "Inputs (x, index), index int32 or int64 of x's rank. Both arrive "
     "**re-expressed with the output's shape** (stride 0 along broadcast "
     "dims), except that x keeps its own size along `axis`; `axis` as given "
     "(may be negative). x's dtype keys the lookup."},
    {"tile",
     "Input x unchanged (any strides); `repeat_times` as given, aligned to "
     "x's dims from the right (missing entries 1, missing dims 1), so the "
     "output may have a higher rank than x. x's dtype keys the lookup."},
    {"pad",
     "Input x unchanged; `pad` as given: (before, after) pairs from the "
     "first dim, at most 2 * ndim entries, each >= 0 (reflect: less than "
     "the dim's size). `mode` constant, reflect or replicate; `value` is a "
     "float. Output: x's shape grown by the pads; x's dtype keys the "
     "lookup."},
    {"topk",
     "Input x unchanged; its dtype keys the lookup. `axis` as given (0-d x: "
     "0 or -1, k = 1); 0 <= k <= the size along axis. Outputs (values in "
     "x's dtype, int64 indices), x's shape with axis resized to k."},
    {"sort",
     "Input x unchanged; its dtype keys the lookup; `axis` as given (0-d x: "
     "0 or -1). Outputs (values, int64 indices) of x's shape."},
    {"argsort",
     "As `sort`, with only the int64 indices."},
    {"optimizer",
     "Inputs (param, grad[, states...]) and **no outputs**: the kernel "
     "**updates param and the states in place**. param is floating (keys "
     "the lookup) and never a broadcast view (no stride 0 over a dim > "
     "1), but may otherwise be strided; grad has param's shape and **any "
     "floating dtype** (not cast); states (velocity; m and v) have param's "
     "shape and dtype and are not broadcast views either. Adam's beta1, "
     "beta2, beta1_pow and beta2_pow are checked to be in [0, 1)."},
    {"unscale",
     "Inputs (x, scale, found_inf) and **no outputs**: the kernel **updates "
     "x and found_inf in place**. x is floating (keys the lookup), any "
     "shape (empty included: then nothing is written), never a broadcast "
     "view but possibly strided; scale is float32 and found_inf bool, each "
     "with exactly one element (shape [1] or 0-d, possibly other "
     "all-ones shapes). found_inf is read, then set when any x value "
     "(before scaling) is infinite or NaN, and left as it was otherwise; "
     "every x is scaled, non-finite ones too. The inverse is 1.0f / scale "
     "in float32; float16/bfloat16 x is multiplied in float32 and rounded "
     "back; float64 x uses 1.0 / scale and the product in float64."},
    {"fused_linear",
     "As `linear` (inputs x, weight [in, out], bias [out] optional, "
     "promoted to one floating dtype that keys the lookup, descriptors "
     "unchanged; output [..., out], contiguous), plus the attributes "
     "`activation` and `alpha`. `activation` is checked to be one of none, "
     "relu, relu6, gelu, gelu_tanh, silu, sigmoid, tanh, leaky_relu, "
     "hardswish (`KEEL_FUSED_ACT_NAMES` in keel/op_catalog.h; "
     "`keel_kit_activation` reads it); `alpha` (leaky_relu's negative "
     "slope) is not checked. The kernel writes act(linear), each "
     "activation computed as the catalog op of its name computes it on "
     "linear's output (gelu exact, gelu_tanh its tanh form); float16 and "
     "bfloat16 results go through the dtype before act, as the two ops "
     "would. Not differentiable."},
    {"fused_conv2d",
     "As `conv2d` (inputs x, weight, bias optional, one floating dtype "
     "keying the lookup, geometry attributes as given and resolved by the "
     "core's rules; output [N, O, oh, ow], contiguous), plus `activation` "
     "and `alpha` checked and meant as for `fused_linear`. Not "
     "differentiable."},
};

/* What holds for every op (docs/device-abi.md, section 18, says the same). */
static const char *const general[] = {
    "**Inputs** come in the catalog's order. An optional input the "
    "caller left out is not passed at all (`num_inputs` is smaller and the "
    "later inputs move up, as the rule says: `layer_norm_grad` without a "
    "scale gets (x, mean, invstd, dy)); there are no NULL descriptors.",
    "**Input descriptors are views** unless the op's rule below says "
    "otherwise: `data` already includes the view's offset (so it is "
    "aligned to the element size only), strides are in elements and may "
    "be 0 (broadcast), negative (a reversed slice) or anything a "
    "permute or slice produces. Nothing is made contiguous for the "
    "kernel. A kernel that handles only some layouts returns "
    "`KEEL_STATUS_NOT_SUPPORTED` for the others: the core then runs that "
    "call on the CPU plugin (counted as a fallback; an error in strict "
    "mode). Inputs may alias each other (`add(x, x)`).",
    "**Outputs** are allocated by the core for every call: new, "
    "row-major contiguous (stride of a dim = product of the later dims, "
    "empty dims counted as 1), starting at a plugin allocation (so "
    "aligned to `alloc_alignment`), never aliasing an input or another "
    "output, and **not initialised** (a reused block holds old data): the "
    "kernel writes every element. An output with no elements has `data` "
    "0.",
    "**Empty tensors** reach the kernel: shapes may contain 0, and the "
    "kernel must then touch no memory (a reduction still writes its "
    "identity into a non-empty output).",
    "**Attributes**: dispatch passes every attribute of the op's catalog "
    "spec, in catalog order, with defaults filled in and the catalog's "
    "type (an int given for a float or bool attribute is converted). "
    "Values are validated but **not normalised**: negative axes, 1-, 2- "
    "or 4-value paddings, `SAME`, an inferred `-1` arrive as the caller "
    "wrote them; the rules below say how the core interpreted them, and a "
    "kernel interprets them the same way. Other callers (`keel conform`, "
    "a vendor's own tests) may pass fewer attributes, so a missing one "
    "takes the catalog default.",
    "**Dtypes**: the rule's key dtype (below) selects the kernel, and "
    "only dtypes in the op's catalog set reach a kernel. Where a rule "
    "says inputs are promoted, they arrive already cast (as new "
    "contiguous tensors, though a kernel must not rely on that); inputs "
    "the rule does not promote (indices, labels, masks, float32 "
    "parameters of a float16 input, an optimizer's grad) keep their own "
    "dtype and the kernel checks `desc.dtype`.",
    "**In place**: only the optimizer updates (param and states), "
    "`check_finite_and_unscale` (x and found_inf) and `batch_norm` with "
    "`training` = 1 (the running statistics) write inputs. Such an input "
    "is never a broadcast view.",
    "**Data-dependent checks** (an index, id, label or class out of "
    "range) are the kernel's: it returns `KEEL_STATUS_INVALID_ARGUMENT` "
    "with a message naming the offending value.",
    "**Stream**: dispatch passes `stream` NULL (the device's default "
    "stream); `keel conform` also passes streams it created. A kernel "
    "enqueues on `args->stream` and may return before the work has run; "
    "the arguments are valid only during the call.",
};

static void link_rule(FILE *f, const char *rule)
{
    fprintf(f, "[%s](#shape-rule-%s)", rule, rule);
}

static const char *convention_of(const char *rule)
{
    for (size_t i = 0; i < sizeof(conventions) / sizeof(conventions[0]); i++)
        if (!strcmp(conventions[i].rule, rule))
            return conventions[i].text;
    return NULL;
}

/* Every rule in the catalog has a text, and every text a rule. */
static int check_conventions(void)
{
    int bad = 0;

    for (int i = 0; i < KEEL_OP_COUNT; i++)
        if (!convention_of(keel_op_table[i].shape_rule)) {
            fprintf(stderr,
                    "gen-ops-doc: shape rule '%s' (op %s) has no kernel "
                    "convention in tools/gen_ops_doc.c\n",
                    keel_op_table[i].shape_rule, keel_op_table[i].name);
            bad = 1;
        }
    for (size_t k = 0; k < sizeof(conventions) / sizeof(conventions[0]);
         k++) {
        int used = 0;
        for (int i = 0; i < KEEL_OP_COUNT && !used; i++)
            used = !strcmp(keel_op_table[i].shape_rule, conventions[k].rule);
        if (!used) {
            fprintf(stderr,
                    "gen-ops-doc: the convention for shape rule '%s' "
                    "matches no op of the catalog\n",
                    conventions[k].rule);
            bad = 1;
        }
    }
    return bad;
}

/* The rules in the order of their first op, each with its ops. */
static void write_conventions(FILE *f)
{
    fputs("\n## What a kernel receives\n\n"
          "The core's dispatch (core/src/dispatch/dispatch.c) and the op's shape "
          "rule (core/src/dispatch/shape_*.c) prepare every kernel call. What holds "
          "for every op:\n\n",
          f);
    for (size_t i = 0; i < sizeof(general) / sizeof(general[0]); i++)
        fprintf(f, "- %s\n", general[i]);
    fputs("\nThen per shape rule, the ops it serves and what their kernels "
          "receive. The op's attributes and semantics are in the table "
          "above; the ABI side of the call is in "
          "[device-abi.md](device-abi.md#13-kernel-group).\n",
          f);
    for (int i = 0; i < KEEL_OP_COUNT; i++) {
        const char *rule = keel_op_table[i].shape_rule;
        int first = 1, seen = 0;

        for (int j = 0; j < i && !seen; j++)
            seen = !strcmp(keel_op_table[j].shape_rule, rule);
        if (seen)
            continue;
        fprintf(f, "\n### Shape rule `%s`\n\nOps:", rule);
        for (int j = i; j < KEEL_OP_COUNT; j++)
            if (!strcmp(keel_op_table[j].shape_rule, rule)) {
                fprintf(f, "%s `%s`", first ? "" : ",", keel_op_table[j].name);
                first = 0;
            }
        fprintf(f, ".\n\n%s\n", convention_of(rule));
    }
}

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

/* ops.md's amp column: the class name, "-" for none. */
static const char *amp_name(keel_amp_class a)
{
    return a == KEEL_AMP_NONE ? "-" : keel_amp_class_name(a);
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

/* One class's ops as a comma-separated list of names. */
static void amp_class_ops(FILE *f, keel_amp_class a)
{
    int n = 0;

    for (int i = 0; i < KEEL_OP_COUNT; i++)
        if (keel_op_table[i].amp == a)
            fprintf(f, "%s`%s`", n++ ? ", " : "", keel_op_table[i].name);
    if (!n)
        fputs("(none)", f);
}

/* The generated part of docs/amp.md: what each class does at each level,
 * and which ops are in each class. */
static void amp_tables(FILE *f)
{
    static const struct {
        keel_amp_class a;
        const char *o1, *o2, *o2np, *od;
    } rows[] = {
        {KEEL_AMP_WHITE, "amp dtype", "amp dtype", "amp dtype", "amp dtype"},
        {KEEL_AMP_BLACK, "float32", "promote", "amp dtype", "float32"},
        {KEEL_AMP_PROMOTE, "promote", "promote", "amp dtype", "float32"},
        {KEEL_AMP_FP32, "float32", "float32", "float32", "float32"},
        {KEEL_AMP_NONE, "inputs kept", "inputs kept", "inputs kept",
         "inputs kept"},
    };

    fputs("| class | O1 | O2 | O2, use_promote off | OD |\n"
          "| --- | --- | --- | --- | --- |\n", f);
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        fprintf(f, "| %s | %s | %s | %s | %s |\n",
                keel_amp_class_name(rows[i].a),
                rows[i].o1, rows[i].o2, rows[i].o2np, rows[i].od);
    fputs("\n\"promote\": float32 when any floating input is float32, "
          "else the amp dtype. The ops of each class (catalog version ", f);
    fprintf(f, "%d):\n\n", KEEL_OP_CATALOG_VERSION);
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        fprintf(f, "- **%s**: ",
                keel_amp_class_name(rows[i].a));
        amp_class_ops(f, rows[i].a);
        fputs("\n", f);
    }
}

/* gen-ops-doc --amp TEMPLATE OUTPUT: the template with the line
 * "@AMP_TABLES@" replaced by the tables. */
static int write_amp(const char *tmpl, const char *out)
{
    FILE *in = fopen(tmpl, "r"), *f;
    char line[4096];
    int seen = 0;

    if (!in) {
        perror(tmpl);
        return 1;
    }
    f = fopen(out, "w");
    if (!f) {
        perror(out);
        fclose(in);
        return 1;
    }
    while (fgets(line, sizeof(line), in)) {
        if (!strcmp(line, "@AMP_TABLES@\n")) {
            amp_tables(f);
            seen = 1;
        } else {
            fputs(line, f);
        }
    }
    fclose(in);
    if (fclose(f) || !seen) {
        fprintf(stderr, "%s: %s\n", out,
                seen ? "write failed" : "no @AMP_TABLES@ line in template");
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    FILE *f;

    if (argc == 4 && !strcmp(argv[1], "--amp"))
        return write_amp(argv[2], argv[3]);
    if (argc != 2) {
        fprintf(stderr, "usage: gen-ops-doc OUTPUT | --amp TEMPLATE "
                        "OUTPUT\n");
        return 2;
    }
    if (check_conventions())
        return 1;
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
               "bool), the shape rule (linked to what its kernels receive, "
               "below), the backward rule used by autograd "
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
        fputs(" | ", f);
        link_rule(f, op->shape_rule);
        fprintf(f, " | %s | %s | ", op->grad_rule, amp_name(op->amp));
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
    write_conventions(f);
    if (fclose(f) != 0) {
        perror(argv[1]);
        return 1;
    }
    return 0;
}
