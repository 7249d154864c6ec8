/*
 * keel._C, part two: the C layers (keel/nn.h) and optimizers
 * (keel/optim.h) as Python objects.
 *
 * LayerHandle owns one keel_layer made by layer(kind, ...); the package's
 * keel.nn classes hold one each and register its parameters (the same
 * tensors, shared) as their own. Optimizer owns one keel_optimizer over a
 * list of (name, Tensor) pairs; the tensors are referenced by the
 * optimizer itself, so they stay alive while it does.
 */
#include "_C.h"

#include <string.h>

#include <keel/amp.h>
#include <keel/io.h>
#include <keel/nn.h>
#include <keel/optim.h>

keel_optimizer *kpy_optimizer_of(PyObject *o);

/* ---- layers --------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    keel_layer *layer;
} LayerObject;

static void layer_dealloc(LayerObject *self)
{
    keel_layer_free(self->layer);
    self->layer = NULL;
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static keel_layer *layer_of(LayerObject *self)
{
    if (!self->layer)
        PyErr_SetString(PyExc_ValueError, "the layer was never made");
    return self->layer;
}

static PyObject *layer_forward(LayerObject *self, PyObject *args)
{
    keel_layer *l = layer_of(self);
    keel_tensor *in[8], *out = NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    keel_status st;

    if (!l)
        return NULL;
    if (n > 8)
        return PyErr_Format(PyExc_TypeError, "%s: at most 8 inputs",
                            keel_layer_type(l));
    for (Py_ssize_t i = 0; i < n; i++)
        if (!(in[i] = kpy_unwrap(PyTuple_GET_ITEM(args, i), "a layer input")))
            return NULL;
    Py_BEGIN_ALLOW_THREADS
    st = keel_layer_forward(l, in, (int)n, &out);
    Py_END_ALLOW_THREADS
    KPY_CHECK(st);
    return kpy_wrap(out);
}

/* [(name, Tensor)] of a state dict (the tensors shared; sd is freed). */
static PyObject *named_list(keel_state_dict *sd)
{
    PyObject *list = PyList_New(0);

    for (int64_t i = 0; list && i < keel_state_dict_count(sd); i++) {
        const char *name = NULL;
        keel_tensor *t = NULL;
        PyObject *e;

        keel_state_dict_at(sd, i, &name, &t);
        e = Py_BuildValue("(sN)", name, kpy_wrap(keel_tensor_ref(t)));
        if (!e || PyList_Append(list, e) < 0) {
            Py_XDECREF(e);
            Py_CLEAR(list);
            break;
        }
        Py_DECREF(e);
    }
    keel_state_dict_free(sd);
    return list;
}

static PyObject *layer_named_parameters(LayerObject *self, PyObject *unused)
{
    keel_layer *l = layer_of(self);
    keel_state_dict *sd = NULL;

    (void)unused;
    if (!l)
        return NULL;
    KPY_CHECK(keel_layer_parameters(l, &sd));
    return named_list(sd);
}

/* Parameters and buffers (Paddle's state_dict order). */
static PyObject *layer_named_state(LayerObject *self, PyObject *unused)
{
    keel_layer *l = layer_of(self);
    keel_state_dict *sd = NULL;

    (void)unused;
    if (!l)
        return NULL;
    KPY_CHECK(keel_layer_state_dict(l, &sd));
    return named_list(sd);
}

static PyObject *layer_set_training(LayerObject *self, PyObject *arg)
{
    keel_layer *l = layer_of(self);
    int on = PyObject_IsTrue(arg);

    if (!l || on < 0)
        return NULL;
    if (on)
        keel_layer_train(l);
    else
        keel_layer_eval(l);
    Py_RETURN_NONE;
}

static PyObject *layer_type(LayerObject *self, PyObject *unused)
{
    keel_layer *l = layer_of(self);

    (void)unused;
    return l ? PyUnicode_FromString(keel_layer_type(l)) : NULL;
}

static PyMethodDef layer_methods[] = {
    {"forward", (PyCFunction)layer_forward, METH_VARARGS, NULL},
    {"named_parameters", (PyCFunction)layer_named_parameters, METH_NOARGS,
     NULL},
    {"named_state", (PyCFunction)layer_named_state, METH_NOARGS, NULL},
    {"set_training", (PyCFunction)layer_set_training, METH_O, NULL},
    {"type", (PyCFunction)layer_type, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyTypeObject Layer_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "keel._C.LayerHandle",
    .tp_basicsize = sizeof(LayerObject),
    .tp_dealloc = (destructor)layer_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "a C layer (used by keel.nn)",
    .tp_methods = layer_methods,
};


keel_layer *kpy_layer_of(PyObject *o)
{
    if (!PyObject_TypeCheck(o, &Layer_Type)) {
        PyErr_SetString(PyExc_TypeError, "a keel layer handle");
        return NULL;
    }
    return ((LayerObject *)o)->layer;
}

PyObject *kpy_layer_new(keel_layer *l)
{
    LayerObject *o = PyObject_New(LayerObject, &Layer_Type);

    if (!o) {
        keel_layer_free(l);
        return NULL;
    }
    o->layer = l;
    return (PyObject *)o;
}

static const struct {
    const char *name;
    keel_activation kind;
} activations[] = {
    {"relu", KEEL_ACT_RELU},       {"relu6", KEEL_ACT_RELU6},
    {"sigmoid", KEEL_ACT_SIGMOID}, {"tanh", KEEL_ACT_TANH},
    {"silu", KEEL_ACT_SILU},       {"hardswish", KEEL_ACT_HARDSWISH},
    {"gelu", KEEL_ACT_GELU},       {"leaky_relu", KEEL_ACT_LEAKY_RELU},
    {"elu", KEEL_ACT_ELU},         {"softplus", KEEL_ACT_SOFTPLUS},
    {"softmax", KEEL_ACT_SOFTMAX}, {"log_softmax", KEEL_ACT_LOG_SOFTMAX},
};

/* An integer or 1 to max integers (kernel sizes, strides, ...). */
static int ints_of(PyObject *o, int64_t *v, int max, const char *what)
{
    int n;

    if (PyLong_Check(o)) {
        v[0] = PyLong_AsLongLong(o);
        return v[0] == -1 && PyErr_Occurred() ? -1 : 1;
    }
    n = kpy_int64s(o, v, max, what);
    if (n == 0) {
        PyErr_Format(PyExc_ValueError, "%s: 1 to %d integers", what, max);
        return -1;
    }
    return n;
}

/* layer(kind, ...): the C layers, with Paddle's arguments in Paddle's
 * order (see keel/nn/__init__.py for the Python signatures). */
static PyObject *m_layer(PyObject *mod, PyObject *args)
{
    const char *kind;
    keel_layer *l = NULL;
    keel_status st;
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    PyObject *rest;

    (void)mod;
    if (n < 1 || !PyUnicode_Check(PyTuple_GET_ITEM(args, 0)))
        return PyErr_Format(PyExc_TypeError, "layer(kind, ...)");
    kind = PyUnicode_AsUTF8(PyTuple_GET_ITEM(args, 0));
    rest = PyTuple_GetSlice(args, 1, n);
    if (!kind || !rest)
        return NULL;
    if (!strcmp(kind, "linear")) {
        long long in, out;
        int bias = 1;
        keel_param_attr none = {KEEL_INIT_NONE, 0, 0};

        if (!PyArg_ParseTuple(rest, "LL|p", &in, &out, &bias))
            goto bad;
        st = keel_nn_linear(in, out, NULL, bias ? NULL : &none, &l);
    } else if (!strcmp(kind, "conv2d") || !strcmp(kind, "conv2d_transpose")) {
        long long in, out, groups = 1;
        PyObject *ks, *stride, *pad, *dil;
        const char *algo = "EXPLICIT";
        int bias = 1;
        int64_t k[2], s[2], d[2];
        keel_conv2d_params p;
        keel_param_attr none = {KEEL_INIT_NONE, 0, 0};
        int nk, ns, nd, np;

        PyObject *outpad = NULL;
        int64_t op[2] = {0, 0};

        if (!PyArg_ParseTuple(rest, "LLOOOOLps|O", &in, &out, &ks, &stride,
                              &pad, &dil, &groups, &bias, &algo, &outpad))
            goto bad;
        memset(&p, 0, sizeof(p));
        if (outpad) {
            int no = ints_of(outpad, op, 2, "output_padding");

            if (no < 0)
                goto bad;
            p.output_padding[0] = op[0];
            p.output_padding[1] = no == 2 ? op[1] : op[0];
        }
        if ((nk = ints_of(ks, k, 2, "kernel_size")) < 0 ||
            (ns = ints_of(stride, s, 2, "stride")) < 0 ||
            (nd = ints_of(dil, d, 2, "dilation")) < 0 ||
            (np = ints_of(pad, p.padding, 4, "padding")) < 0)
            goto bad;
        if (np == 3) {
            PyErr_SetString(PyExc_ValueError, "padding: 1, 2 or 4 values");
            goto bad;
        }
        p.npadding = np;
        p.stride[0] = s[0];
        p.stride[1] = ns == 2 ? s[1] : s[0];
        p.dilation[0] = d[0];
        p.dilation[1] = nd == 2 ? d[1] : d[0];
        p.groups = groups;
        p.padding_algorithm = algo;
        st = kind[6] == '_'
                 ? keel_nn_conv2d_transpose(in, out, k[0],
                                            nk == 2 ? k[1] : k[0], &p, NULL,
                                            bias ? NULL : &none, &l)
                 : keel_nn_conv2d(in, out, k[0], nk == 2 ? k[1] : k[0], &p,
                                  NULL, bias ? NULL : &none, &l);
    } else if (!strcmp(kind, "max_pool2d") || !strcmp(kind, "avg_pool2d")) {
        long long k, s, p;
        int ceil = 0, exclusive = 1;

        if (!PyArg_ParseTuple(rest, "LLL|pp", &k, &s, &p, &ceil, &exclusive))
            goto bad;
        st = kind[0] == 'm' ? keel_nn_max_pool2d(k, s, p, ceil, &l)
                            : keel_nn_avg_pool2d(k, s, p, ceil, exclusive, &l);
    } else if (!strcmp(kind, "adaptive_avg_pool2d")) {
        long long oh, ow;

        if (!PyArg_ParseTuple(rest, "LL", &oh, &ow))
            goto bad;
        st = keel_nn_adaptive_avg_pool2d(oh, ow, &l);
    } else if (!strcmp(kind, "flatten")) {
        int a, b;

        if (!PyArg_ParseTuple(rest, "ii", &a, &b))
            goto bad;
        st = keel_nn_flatten(a, b, &l);
    } else if (!strcmp(kind, "activation")) {
        const char *name;
        double a = 0, b = 0;
        int found = -1, defaults = 1;

        if (!PyArg_ParseTuple(rest, "s|ddp", &name, &a, &b, &defaults))
            goto bad;
        for (size_t i = 0; i < sizeof(activations) / sizeof(activations[0]);
             i++)
            if (!strcmp(name, activations[i].name))
                found = (int)i;
        if (found < 0) {
            PyErr_Format(PyExc_ValueError, "unknown activation %s", name);
            goto bad;
        }
        st = defaults
                 ? keel_nn_activation_default(activations[found].kind, &l)
                 : keel_nn_activation(activations[found].kind, a, b, &l);
    } else if (!strcmp(kind, "batch_norm1d") || !strcmp(kind, "batch_norm2d")) {
        long long nf;
        double mom, eps;

        if (!PyArg_ParseTuple(rest, "Ldd", &nf, &mom, &eps))
            goto bad;
        st = kind[10] == '1' ? keel_nn_batch_norm1d(nf, mom, eps, &l)
                             : keel_nn_batch_norm2d(nf, mom, eps, &l);
    } else if (!strcmp(kind, "layer_norm")) {
        PyObject *shape;
        double eps;
        int64_t sh[8];
        int nd;

        if (!PyArg_ParseTuple(rest, "Od", &shape, &eps) ||
            (nd = ints_of(shape, sh, 8, "normalized_shape")) < 0)
            goto bad;
        st = keel_nn_layer_norm(nd, sh, eps, &l);
    } else if (!strcmp(kind, "dropout")) {
        double p;
        int down = 0;

        if (!PyArg_ParseTuple(rest, "d|p", &p, &down))
            goto bad;
        st = keel_nn_dropout(p, down, &l);
    } else if (!strcmp(kind, "embedding")) {
        long long num, dim, pad;

        if (!PyArg_ParseTuple(rest, "LLL", &num, &dim, &pad))
            goto bad;
        st = keel_nn_embedding(num, dim, pad, NULL, &l);
    } else if (!strcmp(kind, "cross_entropy")) {
        keel_ce_options o = keel_ce_default_options();
        long long ignore = -100;
        int soft = 0, use_softmax = 1;
        const char *red = "mean";

        PyObject *wo = Py_None;

        if (!PyArg_ParseTuple(rest, "|LspipdO", &ignore, &red, &soft, &o.axis,
                              &use_softmax, &o.label_smoothing, &wo))
            goto bad;
        if (wo != Py_None && !(o.weight = kpy_unwrap(wo, "weight")))
            goto bad;
        o.ignore_index = ignore;
        o.reduction = red;
        o.soft_label = soft;
        o.use_softmax = use_softmax;
        st = keel_nn_cross_entropy_loss(&o, &l);
    } else if (!strcmp(kind, "group_norm")) {
        long long groups, channels;
        double eps;

        if (!PyArg_ParseTuple(rest, "LLd", &groups, &channels, &eps))
            goto bad;
        st = keel_nn_group_norm(groups, channels, eps, &l);
    } else if (!strcmp(kind, "smooth_l1")) {
        const char *red = "mean";
        double delta = 1.0;

        if (!PyArg_ParseTuple(rest, "|sd", &red, &delta))
            goto bad;
        st = keel_nn_smooth_l1_loss(red, delta, &l);
    } else if (!strcmp(kind, "nll") || !strcmp(kind, "bce_with_logits")) {
        PyObject *wo = Py_None, *po = Py_None;
        keel_tensor *w = NULL, *pw = NULL;
        long long ignore = -100;
        const char *red = "mean";

        if (kind[0] == 'n'
                ? !PyArg_ParseTuple(rest, "|OLs", &wo, &ignore, &red)
                : !PyArg_ParseTuple(rest, "|OsO", &wo, &red, &po))
            goto bad;
        if ((wo != Py_None && !(w = kpy_unwrap(wo, "weight"))) ||
            (po != Py_None && !(pw = kpy_unwrap(po, "pos_weight"))))
            goto bad;
        st = kind[0] == 'n'
                 ? keel_nn_nll_loss(w, ignore, red, &l)
                 : keel_nn_bce_with_logits_loss(w, red, pw, &l);
    } else if (!strcmp(kind, "mse") || !strcmp(kind, "l1")) {
        const char *red = "mean";

        if (!PyArg_ParseTuple(rest, "|s", &red))
            goto bad;
        st = kind[0] == 'm' ? keel_nn_mse_loss(red, &l)
                            : keel_nn_l1_loss(red, &l);
    } else {
        PyErr_Format(PyExc_ValueError, "layer: unknown kind %s", kind);
        goto bad;
    }
    Py_DECREF(rest);
    KPY_CHECK(st);
    return kpy_layer_new(l);
bad:
    Py_DECREF(rest);
    return NULL;
}

/* ---- learning-rate schedulers ------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    keel_lr_scheduler *s;
    PyObject *inner; /* a wrapped scheduler (LinearWarmup), kept alive */
} SchedObject;

static void sched_dealloc(SchedObject *self)
{
    keel_lr_scheduler_free(self->s);
    self->s = NULL;
    Py_CLEAR(self->inner);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *sched_step(SchedObject *self, PyObject *args)
{
    PyObject *epoch = Py_None;

    if (!PyArg_ParseTuple(args, "|O", &epoch))
        return NULL;
    if (epoch == Py_None) {
        KPY_CHECK(keel_lr_scheduler_step(self->s));
    } else {
        long long e = PyLong_AsLongLong(epoch);

        if (e == -1 && PyErr_Occurred())
            return NULL;
        KPY_CHECK(keel_lr_scheduler_step_to(self->s, e));
    }
    Py_RETURN_NONE;
}

static PyObject *sched_step_metric(SchedObject *self, PyObject *arg)
{
    double m = PyFloat_AsDouble(arg);

    if (m == -1.0 && PyErr_Occurred())
        return NULL;
    KPY_CHECK(keel_lr_scheduler_step_metric(self->s, m));
    Py_RETURN_NONE;
}

static PyObject *sched_last_lr(SchedObject *self, PyObject *unused)
{
    (void)unused;
    return PyFloat_FromDouble(keel_lr_scheduler_last_lr(self->s));
}

static PyObject *sched_get_lr(SchedObject *self, PyObject *unused)
{
    (void)unused;
    return PyFloat_FromDouble(keel_lr_scheduler_get_lr(self->s));
}

static PyObject *sched_last_epoch(SchedObject *self, PyObject *unused)
{
    (void)unused;
    return PyLong_FromLongLong(keel_lr_scheduler_last_epoch(self->s));
}

static PyMethodDef sched_methods[] = {
    {"step", (PyCFunction)sched_step, METH_VARARGS, NULL},
    {"step_metric", (PyCFunction)sched_step_metric, METH_O, NULL},
    {"last_lr", (PyCFunction)sched_last_lr, METH_NOARGS, NULL},
    {"get_lr", (PyCFunction)sched_get_lr, METH_NOARGS, NULL},
    {"last_epoch", (PyCFunction)sched_last_epoch, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyTypeObject Sched_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "keel._C.SchedulerHandle",
    .tp_basicsize = sizeof(SchedObject),
    .tp_dealloc = (destructor)sched_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "a C learning-rate scheduler (used by keel.optimizer.lr)",
    .tp_methods = sched_methods,
};

/* lr_scheduler(kind, ...) with Paddle's arguments in Paddle's order. */
static PyObject *m_lr_scheduler(PyObject *mod, PyObject *args)
{
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    PyObject *rest, *inner = NULL;
    const char *kind;
    keel_lr_scheduler *s = NULL;
    keel_status st;
    SchedObject *o;

    (void)mod;
    if (n < 1 || !PyUnicode_Check(PyTuple_GET_ITEM(args, 0)))
        return PyErr_Format(PyExc_TypeError, "lr_scheduler(kind, ...)");
    kind = PyUnicode_AsUTF8(PyTuple_GET_ITEM(args, 0));
    rest = PyTuple_GetSlice(args, 1, n);
    if (!kind || !rest)
        return NULL;
    if (!strcmp(kind, "StepDecay")) {
        double lr, g;
        long long ss;

        if (!PyArg_ParseTuple(rest, "dLd", &lr, &ss, &g))
            goto bad;
        st = keel_lr_step_decay_create(lr, ss, g, &s);
    } else if (!strcmp(kind, "MultiStepDecay")) {
        double lr, g;
        PyObject *ms;
        int64_t v[64];
        int nm;

        if (!PyArg_ParseTuple(rest, "dOd", &lr, &ms, &g) ||
            (nm = ints_of(ms, v, 64, "milestones")) < 0)
            goto bad;
        st = keel_lr_multi_step_decay_create(lr, v, (size_t)nm, g, &s);
    } else if (!strcmp(kind, "ExponentialDecay")) {
        double lr, g;

        if (!PyArg_ParseTuple(rest, "dd", &lr, &g))
            goto bad;
        st = keel_lr_exponential_decay_create(lr, g, &s);
    } else if (!strcmp(kind, "CosineAnnealingDecay")) {
        double lr, eta;
        long long tmax;

        if (!PyArg_ParseTuple(rest, "dLd", &lr, &tmax, &eta))
            goto bad;
        st = keel_lr_cosine_annealing_decay_create(lr, tmax, eta, &s);
    } else if (!strcmp(kind, "PolynomialDecay")) {
        double lr, end, power;
        long long steps;
        int cycle;

        if (!PyArg_ParseTuple(rest, "dLddp", &lr, &steps, &end, &power,
                              &cycle))
            goto bad;
        st = keel_lr_polynomial_decay_create(lr, steps, end, power, cycle, &s);
    } else if (!strcmp(kind, "LinearWarmup")) {
        PyObject *lr;
        long long ws;
        double a, b;

        if (!PyArg_ParseTuple(rest, "OLdd", &lr, &ws, &a, &b))
            goto bad;
        if (PyObject_TypeCheck(lr, &Sched_Type)) {
            st = keel_lr_linear_warmup_wrap(((SchedObject *)lr)->s, ws, a, b,
                                            &s);
            inner = lr;
        } else {
            double v = PyFloat_AsDouble(lr);

            if (v == -1.0 && PyErr_Occurred())
                goto bad;
            st = keel_lr_linear_warmup_create(v, ws, a, b, &s);
        }
    } else if (!strcmp(kind, "OneCycleLR")) {
        double mx, div, end, pct;
        long long total;
        const char *anneal;
        int three;

        if (!PyArg_ParseTuple(rest, "dLdddsp", &mx, &total, &div, &end, &pct,
                              &anneal, &three))
            goto bad;
        st = keel_lr_one_cycle_create(mx, total, div, end, pct, anneal, three,
                                      &s);
    } else if (!strcmp(kind, "ReduceOnPlateau")) {
        double lr, factor, thr, minlr, eps;
        const char *mode, *tmode;
        long long pat, cool;

        if (!PyArg_ParseTuple(rest, "dsdLdsLdd", &lr, &mode, &factor, &pat,
                              &thr, &tmode, &cool, &minlr, &eps))
            goto bad;
        st = keel_lr_reduce_on_plateau_create(lr, mode, factor, pat, thr,
                                              tmode, cool, minlr, eps, &s);
    } else {
        PyErr_Format(PyExc_ValueError, "unknown scheduler %s", kind);
        goto bad;
    }
    Py_DECREF(rest);
    KPY_CHECK(st);
    o = PyObject_New(SchedObject, &Sched_Type);
    if (!o) {
        keel_lr_scheduler_free(s);
        return NULL;
    }
    o->s = s;
    o->inner = inner;
    Py_XINCREF(inner);
    return (PyObject *)o;
bad:
    Py_DECREF(rest);
    return NULL;
}

/* ---- optimizers ------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    keel_optimizer *opt;
    PyObject *sched; /* the scheduler it reads, kept alive */
} OptimObject;

static void optim_dealloc(OptimObject *self)
{
    keel_optimizer_free(self->opt);
    self->opt = NULL;
    Py_CLEAR(self->sched);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *optim_step(OptimObject *self, PyObject *unused)
{
    keel_status st;

    (void)unused;
    Py_BEGIN_ALLOW_THREADS
    st = keel_optimizer_step(self->opt);
    Py_END_ALLOW_THREADS
    KPY_CHECK(st);
    Py_RETURN_NONE;
}

static PyObject *optim_clear_grad(OptimObject *self, PyObject *unused)
{
    (void)unused;
    KPY_CHECK(keel_optimizer_clear_grad(self->opt));
    Py_RETURN_NONE;
}

static PyObject *optim_get_lr(OptimObject *self, PyObject *unused)
{
    (void)unused;
    return PyFloat_FromDouble(keel_optimizer_get_lr(self->opt));
}

static PyObject *optim_set_lr(OptimObject *self, PyObject *arg)
{
    double lr = PyFloat_AsDouble(arg);

    if (lr == -1.0 && PyErr_Occurred())
        return NULL;
    KPY_CHECK(keel_optimizer_set_lr(self->opt, lr));
    Py_RETURN_NONE;
}

static keel_state_dict *dict_of(PyObject *pairs);

static PyObject *optim_state_get(OptimObject *self, PyObject *unused)
{
    keel_state_dict *sd = NULL;
    keel_status st;

    (void)unused;
    KPY_CHECK(keel_state_dict_create(&sd));
    st = keel_optimizer_state_get(self->opt, sd);
    if (st) {
        keel_state_dict_free(sd);
        return kpy_raise(st);
    }
    return named_list(sd);
}

static PyObject *optim_state_set(OptimObject *self, PyObject *pairs)
{
    keel_state_dict *sd = dict_of(pairs);
    keel_status st;

    if (!sd)
        return NULL;
    st = keel_optimizer_state_set(self->opt, sd);
    keel_state_dict_free(sd);
    KPY_CHECK(st);
    Py_RETURN_NONE;
}

/* set_param_options(name, lr_scale, weight_decay or NaN) */
static PyObject *optim_set_param_options(OptimObject *self, PyObject *args)
{
    const char *name;
    double scale, wd;

    if (!PyArg_ParseTuple(args, "sdd", &name, &scale, &wd))
        return NULL;
    KPY_CHECK(keel_optimizer_set_param_options(self->opt, name, scale, wd));
    Py_RETURN_NONE;
}

static PyMethodDef optim_methods[] = {
    {"set_param_options", (PyCFunction)optim_set_param_options,
     METH_VARARGS, NULL},
    {"state_get", (PyCFunction)optim_state_get, METH_NOARGS, NULL},
    {"state_set", (PyCFunction)optim_state_set, METH_O, NULL},
    {"step", (PyCFunction)optim_step, METH_NOARGS, NULL},
    {"clear_grad", (PyCFunction)optim_clear_grad, METH_NOARGS, NULL},
    {"get_lr", (PyCFunction)optim_get_lr, METH_NOARGS, NULL},
    {"set_lr", (PyCFunction)optim_set_lr, METH_O, NULL},
    {NULL, NULL, 0, NULL}};

static PyTypeObject Optim_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "keel._C.OptimizerHandle",
    .tp_basicsize = sizeof(OptimObject),
    .tp_dealloc = (destructor)optim_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "a C optimizer (used by keel.optimizer)",
    .tp_methods = optim_methods,
};

/* optimizer(kind, [(name, Tensor)], lr, weight_decay, momentum, nesterov,
 *           beta1, beta2, epsilon, clip_norm); lr is a number or a
 *           scheduler handle. */
static PyObject *m_optimizer(PyObject *mod, PyObject *args)
{
    static const char *const kinds[] = {"sgd", "momentum", "adam", "adamw"};
    const char *kind;
    PyObject *params, *seq = NULL, *lr_obj, *sched = NULL;
    double lr = 0, wd, mom, b1, b2, eps, clip;
    int nesterov, k = -1;
    keel_optimizer_options o;
    keel_named_param *np = NULL;
    keel_optimizer *opt = NULL;
    OptimObject *obj;
    Py_ssize_t n;
    keel_status st;

    (void)mod;
    if (!PyArg_ParseTuple(args, "sOOddpdddd", &kind, &params, &lr_obj, &wd,
                          &mom, &nesterov, &b1, &b2, &eps, &clip))
        return NULL;
    if (PyObject_TypeCheck(lr_obj, &Sched_Type)) {
        sched = lr_obj;
    } else {
        lr = PyFloat_AsDouble(lr_obj);
        if (lr == -1.0 && PyErr_Occurred())
            return NULL;
    }
    for (int i = 0; i < 4; i++)
        if (!strcmp(kind, kinds[i]))
            k = i;
    if (k < 0)
        return PyErr_Format(PyExc_ValueError, "unknown optimizer %s", kind);
    seq = PySequence_Fast(params, "parameters must be a sequence");
    if (!seq)
        return NULL;
    n = PySequence_Fast_GET_SIZE(seq);
    np = PyMem_Calloc((size_t)(n ? n : 1), sizeof(*np));
    if (!np) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PySequence_Fast_GET_ITEM(seq, i), *t;

        if (!PyArg_ParseTuple(pair, "sO", &np[i].name, &t) ||
            !(np[i].param = kpy_unwrap(t, "a parameter"))) {
            PyMem_Free(np);
            Py_DECREF(seq);
            return NULL;
        }
    }
    o = keel_optimizer_default_options((keel_optimizer_kind)k);
    if (sched)
        o.lr_scheduler = ((SchedObject *)sched)->s;
    else
        o.learning_rate = lr;
    if (wd >= 0)
        o.weight_decay = wd;
    o.momentum = mom;
    o.use_nesterov = nesterov;
    o.beta1 = b1;
    o.beta2 = b2;
    o.epsilon = eps;
    if (clip > 0) {
        o.grad_clip.kind = KEEL_GRAD_CLIP_GLOBAL_NORM;
        o.grad_clip.clip_norm = clip;
    }
    st = keel_optimizer_create((keel_optimizer_kind)k, np, (size_t)n, &o,
                               &opt);
    PyMem_Free(np);
    Py_DECREF(seq);
    KPY_CHECK(st);
    obj = PyObject_New(OptimObject, &Optim_Type);
    if (!obj) {
        keel_optimizer_free(opt);
        return NULL;
    }
    obj->opt = opt;
    obj->sched = sched;
    Py_XINCREF(sched);
    return (PyObject *)obj;
}

keel_optimizer *kpy_optimizer_of(PyObject *o)
{
    if (!PyObject_TypeCheck(o, &Optim_Type)) {
        PyErr_SetString(PyExc_TypeError, "a keel optimizer");
        return NULL;
    }
    return ((OptimObject *)o)->opt;
}

/* ---- state dicts and files ---------------------------------------------------- */

/* A new state dict referencing the tensors of [(name, Tensor)]. */
static keel_state_dict *dict_of(PyObject *pairs)
{
    PyObject *seq = PySequence_Fast(pairs, "a sequence of (name, Tensor)");
    keel_state_dict *sd = NULL;
    keel_status st;

    if (!seq)
        return NULL;
    st = keel_state_dict_create(&sd);
    if (st) {
        Py_DECREF(seq);
        kpy_raise(st);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        const char *name;
        PyObject *t;
        keel_tensor *kt;

        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "sO", &name,
                              &t) ||
            !(kt = kpy_unwrap(t, "a state dict value"))) {
            keel_state_dict_free(sd);
            Py_DECREF(seq);
            return NULL;
        }
        st = keel_state_dict_set(sd, name, kt);
        if (st) {
            keel_state_dict_free(sd);
            Py_DECREF(seq);
            kpy_raise(st);
            return NULL;
        }
    }
    Py_DECREF(seq);
    return sd;
}

static PyObject *m_save(PyObject *mod, PyObject *args)
{
    const char *path;
    PyObject *pairs;
    keel_state_dict *sd;
    keel_status st;

    (void)mod;
    if (!PyArg_ParseTuple(args, "sO", &path, &pairs) ||
        !(sd = dict_of(pairs)))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    st = keel_save(path, sd);
    Py_END_ALLOW_THREADS
    keel_state_dict_free(sd);
    KPY_CHECK(st);
    Py_RETURN_NONE;
}

static PyObject *m_load(PyObject *mod, PyObject *args)
{
    const char *path, *dev = NULL;
    keel_state_dict *sd = NULL;
    keel_status st;

    (void)mod;
    if (!PyArg_ParseTuple(args, "s|z", &path, &dev))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    st = keel_load(path, dev, &sd);
    Py_END_ALLOW_THREADS
    KPY_CHECK(st);
    return named_list(sd);
}

/* load_into(dst_pairs, src_pairs, strict): copy values by name. */
static PyObject *m_load_into(PyObject *mod, PyObject *args)
{
    PyObject *dp, *sp;
    int strict;
    keel_state_dict *d, *s = NULL;
    keel_status st;

    (void)mod;
    if (!PyArg_ParseTuple(args, "OOp", &dp, &sp, &strict) ||
        !(d = dict_of(dp)))
        return NULL;
    if (!(s = dict_of(sp))) {
        keel_state_dict_free(d);
        return NULL;
    }
    st = keel_state_dict_load_into(d, s, strict);
    keel_state_dict_free(d);
    keel_state_dict_free(s);
    KPY_CHECK(st);
    Py_RETURN_NONE;
}

/* ---- auto_cast and GradScaler -------------------------------------------------- */

static int names_of(PyObject *o, const char **v, int max, int *n)
{
    PyObject *seq;

    *n = 0;
    if (o == Py_None)
        return 0;
    seq = PySequence_Fast(o, "a list of op names");
    if (!seq)
        return -1;
    if (PySequence_Fast_GET_SIZE(seq) > max) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "at most %d op names", max);
        return -1;
    }
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        /* The strings live in the caller's list, alive during the call. */
        v[i] = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(seq, i));
        if (!v[i]) {
            Py_DECREF(seq);
            return -1;
        }
        (*n)++;
    }
    Py_DECREF(seq);
    return 0;
}

/* amp_begin(enable, level, dtype, white, black, use_promote) */
static PyObject *m_amp_begin(PyObject *mod, PyObject *args)
{
    int enable, promote;
    const char *level, *dtname;
    PyObject *white, *black;
    const char *w[128], *b[128];
    keel_amp_options o = keel_amp_default_options();
    keel_dtype dt;

    (void)mod;
    if (!PyArg_ParseTuple(args, "pssOOp", &enable, &level, &dtname, &white,
                          &black, &promote))
        return NULL;
    if (names_of(white, w, 128, &o.num_custom_white) < 0 ||
        names_of(black, b, 128, &o.num_custom_black) < 0)
        return NULL;
    KPY_CHECK(keel_dtype_parse(dtname, &dt));
    o.enable = enable;
    o.level = !strcmp(level, "O0")   ? KEEL_AMP_O0
              : !strcmp(level, "O1") ? KEEL_AMP_O1
              : !strcmp(level, "O2") ? KEEL_AMP_O2
              : !strcmp(level, "OD") ? KEEL_AMP_OD
                                     : (keel_amp_level)-1;
    if ((int)o.level < 0)
        return PyErr_Format(PyExc_ValueError,
                            "auto_cast: level must be O0, O1, O2 or OD, not "
                            "%s", level);
    o.dtype = dt;
    o.custom_white_list = w;
    o.custom_black_list = b;
    o.use_promote = promote;
    KPY_CHECK(keel_amp_begin(&o));
    Py_RETURN_NONE;
}

static PyObject *m_amp_end(PyObject *mod, PyObject *unused)
{
    (void)mod;
    (void)unused;
    KPY_CHECK(keel_amp_end());
    Py_RETURN_NONE;
}

/* amp_decorate([LayerHandle], [optimizer handle], level, dtype,
 * master_weight: -1 for None, 0, 1): keel_amp_decorate over C layers. */
static PyObject *m_amp_decorate(PyObject *mod, PyObject *args)
{
    PyObject *layers, *opts, *ls = NULL, *os = NULL, *ret = NULL;
    const char *level, *dtname;
    int master;
    keel_layer **lv = NULL;
    keel_optimizer **ov = NULL;
    keel_amp_level lvl;
    keel_dtype dt;
    Py_ssize_t nl, no;

    (void)mod;
    if (!PyArg_ParseTuple(args, "OOssi", &layers, &opts, &level, &dtname,
                          &master))
        return NULL;
    if (strcmp(level, "O1") && strcmp(level, "O2"))
        return PyErr_Format(PyExc_ValueError, "decorate: level must be O1 "
                            "or O2, not %s", level);
    lvl = level[1] == '1' ? KEEL_AMP_O1 : KEEL_AMP_O2;
    if (keel_dtype_parse(dtname, &dt) != KEEL_STATUS_OK ||
        (dt != KEEL_F16 && dt != KEEL_BF16))
        return PyErr_Format(PyExc_ValueError, "decorate: dtype must be "
                            "float16 or bfloat16, not %s", dtname);
    ls = PySequence_Fast(layers, "decorate: a list of layers");
    os = ls ? PySequence_Fast(opts, "decorate: a list of optimizers") : NULL;
    if (!os)
        goto out;
    nl = PySequence_Fast_GET_SIZE(ls);
    no = PySequence_Fast_GET_SIZE(os);
    if (nl > INT32_MAX || no > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "decorate: too many layers");
        goto out;
    }
    lv = PyMem_Calloc((size_t)nl + 1, sizeof(*lv));
    ov = PyMem_Calloc((size_t)no + 1, sizeof(*ov));
    if (!lv || !ov) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; i < nl; i++)
        if (!(lv[i] = kpy_layer_of(PySequence_Fast_GET_ITEM(ls, i))))
            goto out;
    for (Py_ssize_t i = 0; i < no; i++)
        if (!(ov[i] = kpy_optimizer_of(PySequence_Fast_GET_ITEM(os, i))))
            goto out;
    {
        keel_status st = keel_amp_decorate(lv, (int)nl, ov, (int)no, lvl, dt,
                                           master);

        if (st != KEEL_STATUS_OK) {
            kpy_raise(st);
            goto out;
        }
    }
    ret = Py_None;
    Py_INCREF(ret);
out:
    PyMem_Free(lv);
    PyMem_Free(ov);
    Py_XDECREF(ls);
    Py_XDECREF(os);
    return ret;
}

typedef struct {
    PyObject_HEAD
    keel_grad_scaler *s;
} ScalerObject;

static void scaler_dealloc(ScalerObject *self)
{
    keel_grad_scaler_free(self->s);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *scaler_scale(ScalerObject *self, PyObject *loss)
{
    keel_tensor *l = kpy_unwrap(loss, "loss"), *out = NULL;

    if (!l)
        return NULL;
    KPY_CHECK(keel_grad_scaler_scale(self->s, l, &out));
    return kpy_wrap(out);
}

static PyObject *scaler_with_opt(ScalerObject *self, PyObject *opt,
                                 keel_status (*fn)(keel_grad_scaler *,
                                                   keel_optimizer *))
{
    keel_optimizer *o = kpy_optimizer_of(opt);

    if (!o)
        return NULL;
    KPY_CHECK(fn(self->s, o));
    Py_RETURN_NONE;
}

static PyObject *scaler_step(ScalerObject *self, PyObject *opt)
{
    return scaler_with_opt(self, opt, keel_grad_scaler_step);
}

static PyObject *scaler_unscale(ScalerObject *self, PyObject *opt)
{
    return scaler_with_opt(self, opt, keel_grad_scaler_unscale);
}

static PyObject *scaler_minimize(ScalerObject *self, PyObject *opt)
{
    return scaler_with_opt(self, opt, keel_grad_scaler_minimize);
}

static PyObject *scaler_update(ScalerObject *self, PyObject *unused)
{
    (void)unused;
    KPY_CHECK(keel_grad_scaler_update(self->s));
    Py_RETURN_NONE;
}

static PyObject *scaler_info(ScalerObject *self, PyObject *unused)
{
    (void)unused;
    return Py_BuildValue("{sdsOsOsOsLsL}", "scale",
                         keel_grad_scaler_get_scale(self->s), "found_inf",
                         keel_grad_scaler_found_inf(self->s) ? Py_True
                                                             : Py_False,
                         "enabled",
                         keel_grad_scaler_is_enabled(self->s) ? Py_True
                                                              : Py_False,
                         "dynamic",
                         keel_grad_scaler_is_dynamic(self->s) ? Py_True
                                                              : Py_False,
                         "incr_count",
                         (long long)keel_grad_scaler_incr_count(self->s),
                         "decr_count",
                         (long long)keel_grad_scaler_decr_count(self->s));
}

static PyMethodDef scaler_methods[] = {
    {"scale", (PyCFunction)scaler_scale, METH_O, NULL},
    {"step", (PyCFunction)scaler_step, METH_O, NULL},
    {"unscale_", (PyCFunction)scaler_unscale, METH_O, NULL},
    {"minimize", (PyCFunction)scaler_minimize, METH_O, NULL},
    {"update", (PyCFunction)scaler_update, METH_NOARGS, NULL},
    {"info", (PyCFunction)scaler_info, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyTypeObject Scaler_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "keel._C.GradScalerHandle",
    .tp_basicsize = sizeof(ScalerObject),
    .tp_dealloc = (destructor)scaler_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "a C GradScaler (used by keel.amp)",
    .tp_methods = scaler_methods,
};

/* grad_scaler(enable, init, incr_ratio, decr_ratio, incr_every,
 *             decr_every, dynamic) */
static PyObject *m_grad_scaler(PyObject *mod, PyObject *args)
{
    keel_grad_scaler_options o = keel_grad_scaler_default_options();
    int enable, dyn;
    long long ie, de;
    keel_grad_scaler *s = NULL;
    ScalerObject *obj;

    (void)mod;
    if (!PyArg_ParseTuple(args, "pdddLLp", &enable, &o.init_loss_scaling,
                          &o.incr_ratio, &o.decr_ratio, &ie, &de, &dyn))
        return NULL;
    o.enable = enable;
    o.incr_every_n_steps = ie;
    o.decr_every_n_nan_or_inf = de;
    o.use_dynamic_loss_scaling = dyn;
    KPY_CHECK(keel_grad_scaler_create(&o, &s));
    obj = PyObject_New(ScalerObject, &Scaler_Type);
    if (!obj) {
        keel_grad_scaler_free(s);
        return NULL;
    }
    obj->s = s;
    return (PyObject *)obj;
}

static PyMethodDef nn_methods[] = {
    {"lr_scheduler", m_lr_scheduler, METH_VARARGS, NULL},
    {"save", m_save, METH_VARARGS, NULL},
    {"load", m_load, METH_VARARGS, NULL},
    {"load_into", m_load_into, METH_VARARGS, NULL},
    {"amp_begin", m_amp_begin, METH_VARARGS, NULL},
    {"amp_decorate", m_amp_decorate, METH_VARARGS, NULL},
    {"amp_end", m_amp_end, METH_NOARGS, NULL},
    {"grad_scaler", m_grad_scaler, METH_VARARGS, NULL},
    {"layer", m_layer, METH_VARARGS, NULL},
    {"optimizer", m_optimizer, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};

int kpy_nn_init(PyObject *m)
{
    if (PyType_Ready(&Layer_Type) < 0 || PyType_Ready(&Optim_Type) < 0 ||
        PyType_Ready(&Sched_Type) < 0 || PyType_Ready(&Scaler_Type) < 0)
        return -1;
    return kpy_add_functions(m, nn_methods);
}
