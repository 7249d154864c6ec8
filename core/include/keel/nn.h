/*
 * keel nn — layers as C structs with a small vtable, following the layer
 * semantics of PaddlePaddle 3.x (paddle.nn). See docs/nn.md.
 *
 * A keel_layer owns named parameters (stop_gradient = false), named buffers
 * (running statistics: stop_gradient = true) and named sublayers. Names
 * compose with dots: a Sequential holding a Linear at index 0 exposes
 * "0.weight". Parameters and buffers are float32 tensors on the device that
 * was current (keel_set_device) when the layer was created. Initializers
 * draw from keel's seeded generator, so keel_seed() makes models
 * reproducible.
 *
 * Every layer starts in training mode. Forward results are new tensors the
 * caller frees; the layer keeps its own references. keel_layer_free frees a
 * layer with its sublayers. Functions return KEEL_STATUS_OK or an error
 * status with a message in keel_last_error().
 */
#ifndef KEEL_NN_H
#define KEEL_NN_H

#include <stdbool.h>
#include <stdint.h>

#include <keel/io.h>
#include <keel/ops.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct keel_layer keel_layer;

/* ---- the vtable (for user-defined layers) ------------------------------- */

typedef struct keel_layer_ops {
    /** Layer type name ("Linear", ...), for messages. */
    const char *type;
    /** Compute *out from inputs[0..num_inputs). NULL: not callable (as a
     *  LayerList). */
    keel_status (*forward)(keel_layer *layer, keel_tensor *const *inputs,
                           int num_inputs, keel_tensor **out);
    /** Free the private data given to keel_layer_create (may be NULL). */
    void (*destroy)(void *priv);
} keel_layer_ops;

/** A new empty layer with vtable `ops` (kept by pointer: it must outlive
 *  the layer) and private data `priv`, owned by the layer once this
 *  returns OK (ops->destroy frees it); on failure the caller keeps it. */
KEEL_API keel_status keel_layer_create(const keel_layer_ops *ops, void *priv,
                                       keel_layer **out);
/** The private data given to keel_layer_create. */
KEEL_API void *keel_layer_priv(const keel_layer *layer);
/** The type name of the vtable. */
KEEL_API const char *keel_layer_type(const keel_layer *layer);
/** Free a layer, its parameters, buffers and sublayers (NULL: no-op). */
KEEL_API void keel_layer_free(keel_layer *layer);

/** Register a parameter (stop_gradient is set to false; the layer takes
 *  its own reference). Names are unique and hold no '.'. */
KEEL_API keel_status keel_layer_add_parameter(keel_layer *layer,
                                              const char *name,
                                              keel_tensor *param);
/** Register a buffer (kept in the state dict, never trained). */
KEEL_API keel_status keel_layer_add_buffer(keel_layer *layer, const char *name,
                                           keel_tensor *buffer);
/** Register a sublayer; the parent takes ownership (also on failure). */
KEEL_API keel_status keel_layer_add_sublayer(keel_layer *layer,
                                             const char *name,
                                             keel_layer *sub);
/** A direct parameter, buffer or sublayer by name (borrowed; NULL when
 *  absent). */
KEEL_API keel_tensor *keel_layer_parameter(const keel_layer *layer,
                                           const char *name);
KEEL_API keel_tensor *keel_layer_buffer(const keel_layer *layer,
                                        const char *name);
KEEL_API keel_layer *keel_layer_sublayer(const keel_layer *layer,
                                         const char *name);
/** Number of direct sublayers, and sublayer i (borrowed; NULL out of
 *  range). */
KEEL_API int keel_layer_num_sublayers(const keel_layer *layer);
KEEL_API keel_layer *keel_layer_sublayer_at(const keel_layer *layer, int i);

/* ---- using a layer ------------------------------------------------------- */

/** Run the layer: *out receives a new tensor. */
KEEL_API keel_status keel_layer_forward(keel_layer *layer,
                                        keel_tensor *const *inputs,
                                        int num_inputs, keel_tensor **out);
/** One-input and two-input shorthands (losses take (input, label)). */
KEEL_API keel_status keel_layer_call(keel_layer *layer, keel_tensor *x,
                                     keel_tensor **out);
KEEL_API keel_status keel_layer_call2(keel_layer *layer, keel_tensor *x,
                                      keel_tensor *y, keel_tensor **out);
/** Training / evaluation mode, applied to every sublayer. */
KEEL_API void keel_layer_train(keel_layer *layer);
KEEL_API void keel_layer_eval(keel_layer *layer);
KEEL_API bool keel_layer_is_training(const keel_layer *layer);

/** All parameters, recursively, as a new state dict of dotted names ->
 *  the layer's own tensors (shared, not copied), own parameters first,
 *  then each sublayer in registration order. */
KEEL_API keel_status keel_layer_parameters(const keel_layer *layer,
                                           keel_state_dict **out);
/** Number of parameter tensors, recursively. */
KEEL_API int64_t keel_layer_num_parameters(const keel_layer *layer);
/** Parameters and buffers (Paddle's state_dict()): per layer, parameters
 *  then buffers, then the sublayers. The tensors are shared. */
KEEL_API keel_status keel_layer_state_dict(const keel_layer *layer,
                                           keel_state_dict **out);
/** Copy `sd` into the layer's parameters and buffers (Paddle's
 *  set_state_dict). Names, dtypes and shapes are all checked first: on
 *  INVALID_ARGUMENT nothing has changed. strict: missing or unexpected
 *  names are errors. */
KEEL_API keel_status keel_layer_set_state_dict(keel_layer *layer,
                                               const keel_state_dict *sd,
                                               bool strict);
/**
 * Paddle's layer.clear_gradients() (set_to_zero = True): every parameter
 * gradient that exists becomes zeros of its shape (see
 * keel_tensor_clear_grad); parameters without one are left alone. Returns
 * OK, INVALID_ARGUMENT (NULL) or the first error of zeroing (out of
 * memory); on an error the parameters before the failing one are cleared.
 */
KEEL_API keel_status keel_layer_clear_gradients(keel_layer *layer);

/** Keep this layer's own parameters and buffers in float32 under
 *  keel_amp_decorate (keel/amp.h; Paddle's
 *  layer._cast_to_low_precision = False). Returns OK or INVALID_ARGUMENT. */
KEEL_API keel_status keel_layer_set_keep_fp32(keel_layer *layer, bool keep);
/**
 * Paddle's layer.clear_gradients(set_to_zero): set_to_zero true zeroes as
 * above; false drops every gradient (keel_tensor_grad() then returns NULL
 * and an optimizer skips the parameter until the next backward).
 */
KEEL_API keel_status keel_layer_clear_gradients_ex(keel_layer *layer,
                                                   bool set_to_zero);

/* ---- containers ---------------------------------------------------------- */

/** Sequential: sublayers named "0", "1", ... called in order. Takes
 *  ownership of layers[0..n) (also on failure). */
KEEL_API keel_status keel_sequential_create(keel_layer *const *layers, int n,
                                            keel_layer **out);
/** LayerList: a registered list of sublayers named "0", "1", ...; it has
 *  no forward. A plain C array of layers registers nothing. */
KEEL_API keel_status keel_layer_list_create(keel_layer **out);
/** Append (Sequential or LayerList); takes ownership of sub. */
KEEL_API keel_status keel_layer_list_append(keel_layer *list,
                                            keel_layer *sub);

/* ---- parameter attributes (Paddle's weight_attr / bias_attr) ------------ */

typedef enum keel_init_kind {
    KEEL_INIT_DEFAULT = 0,  /* the layer's Paddle default             */
    KEEL_INIT_NONE,         /* no parameter (bias_attr=False)          */
    KEEL_INIT_CONSTANT,     /* a                                       */
    KEEL_INIT_UNIFORM,      /* U(a, b)                                 */
    KEEL_INIT_NORMAL,       /* N(a, b^2): mean a, std b                */
    KEEL_INIT_XAVIER_UNIFORM,
    KEEL_INIT_XAVIER_NORMAL,
    KEEL_INIT_KAIMING_NORMAL, /* N(0, 2 / fan_in)                      */
} keel_init_kind;

typedef struct keel_param_attr {
    keel_init_kind kind;
    double a, b;
} keel_param_attr;

/** Fill a new parameter of `shape` with `attr` (fan_in / fan_out as
 *  Paddle computes them: shape[0] / shape[1] for 2-D, in * receptive
 *  field / out * receptive field for conv weights). */
KEEL_API keel_status keel_init_param(int ndim, const int64_t *shape,
                                     const keel_param_attr *attr,
                                     keel_tensor **out);

/* ---- layers ------------------------------------------------------------- */

/** Linear: weight [in, out], Xavier uniform; bias [out] zeros. attrs may
 *  be NULL (default). */
KEEL_API keel_status keel_nn_linear(int64_t in_features, int64_t out_features,
                                    const keel_param_attr *weight_attr,
                                    const keel_param_attr *bias_attr,
                                    keel_layer **out);
/** Conv2D: weight [out, in/groups, kh, kw] N(0, sqrt(2/(in*kh*kw))); bias
 *  [out] zeros. p NULL: stride 1, padding 0, dilation 1, groups 1. */
KEEL_API keel_status keel_nn_conv2d(int64_t in_channels, int64_t out_channels,
                                    int64_t kh, int64_t kw,
                                    const keel_conv2d_params *p,
                                    const keel_param_attr *weight_attr,
                                    const keel_param_attr *bias_attr,
                                    keel_layer **out);
/** Conv2DTranspose: weight [in, out/groups, kh, kw], same default init. */
KEEL_API keel_status keel_nn_conv2d_transpose(
    int64_t in_channels, int64_t out_channels, int64_t kh, int64_t kw,
    const keel_conv2d_params *p, const keel_param_attr *weight_attr,
    const keel_param_attr *bias_attr, keel_layer **out);
/** MaxPool2D / AvgPool2D: stride <= 0 means kernel_size (Paddle's None).
 *  AvgPool2D: exclusive (padding not counted) as Paddle's default. */
KEEL_API keel_status keel_nn_max_pool2d(int64_t kernel, int64_t stride,
                                        int64_t padding, bool ceil_mode,
                                        keel_layer **out);
KEEL_API keel_status keel_nn_avg_pool2d(int64_t kernel, int64_t stride,
                                        int64_t padding, bool ceil_mode,
                                        bool exclusive, keel_layer **out);
KEEL_API keel_status keel_nn_adaptive_avg_pool2d(int64_t oh, int64_t ow,
                                                 keel_layer **out);
/** Flatten axes start..stop (Paddle default 1, -1). */
KEEL_API keel_status keel_nn_flatten(int start_axis, int stop_axis,
                                     keel_layer **out);

typedef enum keel_activation {
    KEEL_ACT_RELU,
    KEEL_ACT_RELU6,
    KEEL_ACT_SIGMOID,
    KEEL_ACT_TANH,
    KEEL_ACT_SILU,
    KEEL_ACT_HARDSWISH,
    KEEL_ACT_GELU,       /* a != 0: tanh approximation (default exact) */
    KEEL_ACT_LEAKY_RELU, /* a: negative slope (Paddle default 0.01)    */
    KEEL_ACT_ELU,        /* a: alpha (1.0)                              */
    KEEL_ACT_SOFTPLUS,   /* a: beta (1), b: threshold (20)              */
    KEEL_ACT_SOFTMAX,    /* a: axis (-1)                                */
    KEEL_ACT_LOG_SOFTMAX,/* a: axis (-1)                                */
} keel_activation;

/** An activation layer (no parameters). a and b are as listed above;
 *  keel_nn_activation_default uses Paddle's defaults. */
KEEL_API keel_status keel_nn_activation(keel_activation kind, double a,
                                        double b, keel_layer **out);
KEEL_API keel_status keel_nn_activation_default(keel_activation kind,
                                                keel_layer **out);

/** BatchNorm1D ([N,C] or [N,C,L]) / BatchNorm2D ([N,C,H,W]): weight ones,
 *  bias zeros, buffers "_mean" zeros and "_variance" ones (Paddle names).
 *  Paddle momentum: running = momentum * running + (1 - momentum) * batch.
 *  Defaults: momentum 0.9, epsilon 1e-5. */
KEEL_API keel_status keel_nn_batch_norm1d(int64_t num_features,
                                          double momentum, double epsilon,
                                          keel_layer **out);
KEEL_API keel_status keel_nn_batch_norm2d(int64_t num_features,
                                          double momentum, double epsilon,
                                          keel_layer **out);
/** LayerNorm over the trailing `ndim` axes of `shape`; weight ones and
 *  bias zeros of [prod(shape)] as Paddle; epsilon 1e-5. */
KEEL_API keel_status keel_nn_layer_norm(int ndim, const int64_t *shape,
                                        double epsilon, keel_layer **out);
/** GroupNorm: weight ones, bias zeros [num_channels]; epsilon 1e-5. */
KEEL_API keel_status keel_nn_group_norm(int64_t num_groups,
                                        int64_t num_channels, double epsilon,
                                        keel_layer **out);
/** Dropout(p, mode): upscale_in_train (default) or downscale_in_infer.
 *  Masks come from keel's generator. In eval, upscale_in_train is the
 *  identity. */
KEEL_API keel_status keel_nn_dropout(double p, bool downscale_in_infer,
                                     keel_layer **out);
/** Embedding [num, dim], Xavier uniform; padding_idx < 0 counts from the
 *  end (Paddle), KEEL_NN_NO_PADDING for none. Rows at padding_idx give
 *  zeros and get no gradient. */
#define KEEL_NN_NO_PADDING INT64_MIN
KEEL_API keel_status keel_nn_embedding(int64_t num_embeddings,
                                       int64_t embedding_dim,
                                       int64_t padding_idx,
                                       const keel_param_attr *weight_attr,
                                       keel_layer **out);

/* ---- losses: forward(input, label) --------------------------------------- */

/** reduction: "mean" (default, NULL), "sum" or "none". */
typedef struct keel_ce_options {
    const keel_tensor *weight;  /* per-class weights or NULL */
    int64_t ignore_index;       /* -100 */
    const char *reduction;      /* "mean" */
    bool soft_label;            /* false */
    int axis;                   /* -1 */
    bool use_softmax;           /* true */
    double label_smoothing;     /* 0 */
} keel_ce_options;

/** Paddle's CrossEntropyLoss defaults. */
KEEL_API keel_ce_options keel_ce_default_options(void);
/** CrossEntropyLoss (opts NULL: defaults). */
KEEL_API keel_status keel_nn_cross_entropy_loss(const keel_ce_options *opts,
                                                keel_layer **out);
KEEL_API keel_status keel_nn_mse_loss(const char *reduction,
                                      keel_layer **out);
KEEL_API keel_status keel_nn_l1_loss(const char *reduction, keel_layer **out);
/** SmoothL1Loss (Paddle): 0.5 z^2 when |z| < delta, else delta * |z| -
 *  0.5 delta^2 (delta 1.0). */
KEEL_API keel_status keel_nn_smooth_l1_loss(const char *reduction,
                                            double delta, keel_layer **out);
/** NLLLoss(weight, ignore_index -100, reduction). */
KEEL_API keel_status keel_nn_nll_loss(const keel_tensor *weight,
                                      int64_t ignore_index,
                                      const char *reduction,
                                      keel_layer **out);
/** BCEWithLogitsLoss(weight, reduction, pos_weight). */
KEEL_API keel_status keel_nn_bce_with_logits_loss(
    const keel_tensor *weight, const char *reduction,
    const keel_tensor *pos_weight, keel_layer **out);

#ifdef __cplusplus
}
#endif

#endif /* KEEL_NN_H */
