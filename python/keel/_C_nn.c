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

#include <keel/nn.h>
#include <keel/optim.h>

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

/* [(name, Tensor)] of a state dict the layer made (the tensors shared). */
static PyObject *named_list(keel_state_dict *sd, bool params_only,
                            const keel_layer *l)
{
    PyObject *list = PyList_New(0);

    for (int64_t i = 0; list && i < keel_state_dict_count(sd); i++) {
        const char *name = NULL;
        keel_tensor *t = NULL;
        PyObject *e;

        keel_state_dict_at(sd, i, &name, &t);
        (void)params_only;
        (void)l;
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
    return named_list(sd, true, l);
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
    return named_list(sd, false, l);
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

static PyObject *layer_new_from(keel_layer *l)
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

static int ints_of(PyObject *o, int64_t *v, int max, const char *what)
{
    PyObject *seq;
    Py_ssize_t n;

    if (PyLong_Check(o)) {
        v[0] = PyLong_AsLongLong(o);
        return v[0] == -1 && PyErr_Occurred() ? -1 : 1;
    }
    seq = PySequence_Fast(o, what);
    if (!seq)
        return -1;
    n = PySequence_Fast_GET_SIZE(seq);
    if (n < 1 || n > max) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "%s: 1 to %d integers", what, max);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        v[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));
        if (v[i] == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
    }
    Py_DECREF(seq);
    return (int)n;
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
    } else if (!strcmp(kind, "conv2d")) {
        long long in, out, groups = 1;
        PyObject *ks, *stride, *pad, *dil;
        const char *algo = "EXPLICIT";
        int bias = 1;
        int64_t k[2], s[2], d[2];
        keel_conv2d_params p;
        keel_param_attr none = {KEEL_INIT_NONE, 0, 0};
        int nk, ns, nd, np;

        if (!PyArg_ParseTuple(rest, "LLOOOOLps", &in, &out, &ks, &stride,
                              &pad, &dil, &groups, &bias, &algo))
            goto bad;
        memset(&p, 0, sizeof(p));
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
        st = keel_nn_conv2d(in, out, k[0], nk == 2 ? k[1] : k[0], &p, NULL,
                            bias ? NULL : &none, &l);
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

        if (!PyArg_ParseTuple(rest, "|Lspipd", &ignore, &red, &soft, &o.axis,
                              &use_softmax, &o.label_smoothing))
            goto bad;
        o.ignore_index = ignore;
        o.reduction = red;
        o.soft_label = soft;
        o.use_softmax = use_softmax;
        st = keel_nn_cross_entropy_loss(&o, &l);
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
    return layer_new_from(l);
bad:
    Py_DECREF(rest);
    return NULL;
}

/* ---- optimizers ------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    keel_optimizer *opt;
} OptimObject;

static void optim_dealloc(OptimObject *self)
{
    keel_optimizer_free(self->opt);
    self->opt = NULL;
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

static PyMethodDef optim_methods[] = {
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
 *           beta1, beta2, epsilon, clip_norm) */
static PyObject *m_optimizer(PyObject *mod, PyObject *args)
{
    static const char *const kinds[] = {"sgd", "momentum", "adam", "adamw"};
    const char *kind;
    PyObject *params, *seq = NULL;
    double lr, wd, mom, b1, b2, eps, clip;
    int nesterov, k = -1;
    keel_optimizer_options o;
    keel_named_param *np = NULL;
    keel_optimizer *opt = NULL;
    OptimObject *obj;
    Py_ssize_t n;
    keel_status st;

    (void)mod;
    if (!PyArg_ParseTuple(args, "sOdddpdddd", &kind, &params, &lr, &wd, &mom,
                          &nesterov, &b1, &b2, &eps, &clip))
        return NULL;
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
    return (PyObject *)obj;
}

static PyMethodDef nn_methods[] = {
    {"layer", m_layer, METH_VARARGS, NULL},
    {"optimizer", m_optimizer, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};

int kpy_nn_init(PyObject *m)
{
    if (PyType_Ready(&Layer_Type) < 0 || PyType_Ready(&Optim_Type) < 0)
        return -1;
    for (PyMethodDef *d = nn_methods; d->ml_name; d++) {
        PyObject *f = PyCFunction_New(d, NULL);

        if (!f || PyModule_AddObject(m, d->ml_name, f) < 0) {
            Py_XDECREF(f);
            return -1;
        }
    }
    return 0;
}
