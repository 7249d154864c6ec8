/*
 * keel._C, part four: static graphs and inference (keel/jit.h,
 * keel/inference.h) for keel.jit and keel.inference.
 *
 * keel_jit_trace traces a keel_layer; py_layer() makes one whose forward
 * calls a Python callable (the model), with the model's parameters and
 * buffers registered so the tracer turns them into the graph's constants.
 */
#include "_C.h"

#include <string.h>

#include <keel/inference.h>
#include <keel/jit.h>
#include <keel/nn.h>


/* ---- a C layer running Python -------------------------------------------------- */

struct py_fwd {
    PyObject *fn;
};

static keel_status py_forward(keel_layer *layer, keel_tensor *const *inputs,
                              int n, keel_tensor **out)
{
    struct py_fwd *p = keel_layer_priv(layer);
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *args = PyTuple_New(n), *r = NULL;
    keel_status st = KEEL_STATUS_OK;

    for (int i = 0; args && i < n; i++) {
        PyObject *t = kpy_wrap(keel_tensor_ref(inputs[i]));

        if (!t) {
            Py_CLEAR(args);
            break;
        }
        PyTuple_SET_ITEM(args, i, t);
    }
    if (args)
        r = PyObject_Call(p->fn, args, NULL);
    Py_XDECREF(args);
    if (r) {
        keel_tensor *t = kpy_unwrap(r, "the model's output");

        if (t)
            *out = keel_tensor_ref(t);
        Py_DECREF(r);
    }
    /* A Python exception stays set for the caller (jit_trace returns it
     * instead of keel's status). */
    if (PyErr_Occurred())
        st = KEEL_STATUS_INVALID_ARGUMENT;
    PyGILState_Release(g);
    return st;
}

static void py_destroy(void *priv)
{
    struct py_fwd *p = priv;
    PyGILState_STATE g = PyGILState_Ensure();

    Py_XDECREF(p->fn);
    PyMem_RawFree(p);
    PyGILState_Release(g);
}

static const keel_layer_ops py_ops = {"PythonLayer", py_forward, py_destroy};

int kpy_layer_add_named(keel_layer *l, PyObject *pairs, int buffers)
{
    PyObject *seq = PySequence_Fast(pairs, "a sequence of (name, Tensor)");
    keel_status st = KEEL_STATUS_OK;

    if (!seq)
        return -1;
    for (Py_ssize_t i = 0; !st && i < PySequence_Fast_GET_SIZE(seq); i++) {
        const char *name;
        PyObject *t;
        keel_tensor *kt;
        char buf[256];

        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "sO", &name,
                              &t) ||
            !(kt = kpy_unwrap(t, "a parameter or buffer"))) {
            Py_DECREF(seq);
            return -1;
        }
        snprintf(buf, sizeof(buf), "%s", name);
        for (char *c = buf; *c; c++)
            if (*c == '.')
                *c = '/';
        st = buffers ? keel_layer_add_buffer(l, buf, kt)
                     : keel_layer_add_parameter(l, buf, kt);
    }
    Py_DECREF(seq);
    if (st) {
        kpy_raise(st);
        return -1;
    }
    return 0;
}

/* py_layer(fn, params, buffers) */
static PyObject *m_py_layer(PyObject *mod, PyObject *args)
{
    PyObject *fn, *params, *buffers;
    struct py_fwd *p;
    keel_layer *l = NULL;
    keel_status st;

    (void)mod;
    if (!PyArg_ParseTuple(args, "OOO", &fn, &params, &buffers))
        return NULL;
    p = PyMem_RawMalloc(sizeof(*p));
    if (!p)
        return PyErr_NoMemory();
    p->fn = fn;
    Py_INCREF(fn);
    st = keel_layer_create(&py_ops, p, &l);
    if (st) {
        Py_DECREF(fn);
        PyMem_RawFree(p);
        return kpy_raise(st);
    }
    if (kpy_layer_add_named(l, params, 0) < 0 ||
        kpy_layer_add_named(l, buffers, 1) < 0) {
        keel_layer_free(l);
        return NULL;
    }
    return kpy_layer_new(l);
}

/* ---- graphs ---------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    keel_graph *g;
} GraphObject;

static void graph_dealloc(GraphObject *self)
{
    keel_graph_free(self->g);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *graph_save(GraphObject *self, PyObject *args)
{
    const char *prefix;

    if (!PyArg_ParseTuple(args, "s", &prefix))
        return NULL;
    KPY_CHECK(keel_jit_save(self->g, prefix));
    Py_RETURN_NONE;
}

static PyObject *graph_layer(GraphObject *self, PyObject *unused)
{
    keel_layer *l = NULL;

    (void)unused;
    KPY_CHECK(keel_jit_layer(self->g, &l));
    return kpy_layer_new(l);
}

static PyObject *graph_info(GraphObject *self, PyObject *unused)
{
    PyObject *ins = PyList_New(0), *outs = PyList_New(0), *r;

    (void)unused;
    for (int i = 0; ins && i < keel_graph_num_inputs(self->g); i++) {
        PyObject *s = PyUnicode_FromString(keel_graph_input_name(self->g, i));

        if (!s || PyList_Append(ins, s) < 0)
            Py_CLEAR(ins);
        Py_XDECREF(s);
    }
    for (int i = 0; outs && i < keel_graph_num_outputs(self->g); i++) {
        PyObject *s = PyUnicode_FromString(keel_graph_output_name(self->g, i));

        if (!s || PyList_Append(outs, s) < 0)
            Py_CLEAR(outs);
        Py_XDECREF(s);
    }
    if (!ins || !outs) {
        Py_XDECREF(ins);
        Py_XDECREF(outs);
        return NULL;
    }
    r = Py_BuildValue("{sNsNsi}", "inputs", ins, "outputs", outs, "nodes",
                      keel_graph_num_nodes(self->g));
    return r;
}

static PyMethodDef graph_methods[] = {
    {"save", (PyCFunction)graph_save, METH_VARARGS, NULL},
    {"layer", (PyCFunction)graph_layer, METH_NOARGS, NULL},
    {"info", (PyCFunction)graph_info, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyTypeObject Graph_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "keel._C.GraphHandle",
    .tp_basicsize = sizeof(GraphObject),
    .tp_dealloc = (destructor)graph_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "a traced graph (used by keel.jit)",
    .tp_methods = graph_methods,
};

static PyObject *graph_new(keel_graph *g)
{
    GraphObject *o = PyObject_New(GraphObject, &Graph_Type);

    if (!o) {
        keel_graph_free(g);
        return NULL;
    }
    o->g = g;
    return (PyObject *)o;
}

/* jit_trace(layer_handle, [(name or None, dtype, [dims])]) */
static PyObject *m_jit_trace(PyObject *mod, PyObject *args)
{
    PyObject *lh, *specs_obj, *seq;
    keel_input_spec specs[16];
    keel_layer *l;
    keel_graph *g = NULL;
    Py_ssize_t n;
    keel_status st;

    (void)mod;
    if (!PyArg_ParseTuple(args, "OO", &lh, &specs_obj) ||
        !(l = kpy_layer_of(lh)))
        return NULL;
    seq = PySequence_Fast(specs_obj, "input_spec must be a sequence");
    if (!seq)
        return NULL;
    n = PySequence_Fast_GET_SIZE(seq);
    if (n < 1 || n > 16) {
        Py_DECREF(seq);
        return PyErr_Format(PyExc_ValueError, "input_spec: 1 to 16 specs");
    }
    memset(specs, 0, sizeof(specs));
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *name, *dims, *dseq;
        const char *dt;

        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "OsO", &name,
                              &dt, &dims))
            goto bad;
        if (name != Py_None && !(specs[i].name = PyUnicode_AsUTF8(name)))
            goto bad;
        if (keel_dtype_parse(dt, &specs[i].dtype)) {
            kpy_raise(keel_last_status());
            goto bad;
        }
        dseq = PySequence_Fast(dims, "a shape");
        if (!dseq)
            goto bad;
        specs[i].ndim = (int)PySequence_Fast_GET_SIZE(dseq);
        if (specs[i].ndim > KEEL_MAX_DIMS) {
            Py_DECREF(dseq);
            PyErr_SetString(PyExc_ValueError, "input_spec: too many dims");
            goto bad;
        }
        for (int k = 0; k < specs[i].ndim; k++) {
            PyObject *d = PySequence_Fast_GET_ITEM(dseq, k);

            specs[i].shape[k] = d == Py_None ? -1 : PyLong_AsLongLong(d);
        }
        Py_DECREF(dseq);
        if (PyErr_Occurred())
            goto bad;
    }
    st = keel_jit_trace(l, specs, (int)n, &g);
    Py_DECREF(seq);
    if (st) {
        if (PyErr_Occurred()) /* the model raised: keep its exception */
            return NULL;
        return kpy_raise(st);
    }
    return graph_new(g);
bad:
    Py_DECREF(seq);
    return NULL;
}

static PyObject *m_jit_load(PyObject *mod, PyObject *args)
{
    const char *prefix, *dev = NULL;
    keel_graph *g = NULL;

    (void)mod;
    if (!PyArg_ParseTuple(args, "s|z", &prefix, &dev))
        return NULL;
    KPY_CHECK(keel_jit_load(prefix, dev, &g));
    return graph_new(g);
}

/* ---- the Predictor ---------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    keel_predictor *p;
} PredObject;

static void pred_dealloc(PredObject *self)
{
    keel_predictor_free(self->p);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *pred_names(PredObject *self, PyObject *arg)
{
    int out = PyObject_IsTrue(arg);
    int n = out ? keel_predictor_num_outputs(self->p)
                : keel_predictor_num_inputs(self->p);
    PyObject *l = PyList_New(n);

    for (int i = 0; l && i < n; i++) {
        const char *s = out ? keel_predictor_output_name(self->p, i)
                            : keel_predictor_input_name(self->p, i);
        PyObject *v = PyUnicode_FromString(s ? s : "");

        if (!v) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, i, v);
    }
    return l;
}

/* set_input(name, buffer, dtype, shape) */
static PyObject *pred_set_input(PredObject *self, PyObject *args)
{
    const char *name, *dtname;
    PyObject *buf, *shape_obj;
    int64_t shape[KEEL_MAX_DIMS];
    keel_io_handle *h;
    keel_dtype dt;
    Py_buffer view;
    keel_status st;
    int nd;

    if (!PyArg_ParseTuple(args, "sOsO", &name, &buf, &dtname, &shape_obj))
        return NULL;
    KPY_CHECK(keel_dtype_parse(dtname, &dt));
    h = keel_predictor_input_handle(self->p, name);
    if (!h)
        return kpy_raise(KEEL_STATUS_INVALID_ARGUMENT);
    nd = kpy_int64s(shape_obj, shape, KEEL_MAX_DIMS, "copy_from_cpu");
    if (nd < 0)
        return NULL;
    if (PyObject_GetBuffer(buf, &view, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    {
        uint64_t need = keel_dtype_size(dt);

        for (int i = 0; i < nd; i++)
            need = shape[i] >= 0 && (shape[i] == 0 ||
                                     need <= UINT64_MAX / (uint64_t)shape[i])
                       ? need * (uint64_t)shape[i]
                       : UINT64_MAX;
        if (need != (uint64_t)view.len) {
            PyBuffer_Release(&view);
            return PyErr_Format(PyExc_ValueError,
                                "copy_from_cpu: %zd bytes of data for a "
                                "shape that needs another size", view.len);
        }
    }
    st = keel_io_handle_copy_from_host(h, view.buf, dt, nd, shape);
    PyBuffer_Release(&view);
    KPY_CHECK(st);
    Py_RETURN_NONE;
}

static PyObject *pred_run(PredObject *self, PyObject *unused)
{
    keel_status st;

    (void)unused;
    Py_BEGIN_ALLOW_THREADS
    st = keel_predictor_run(self->p);
    Py_END_ALLOW_THREADS
    KPY_CHECK(st);
    Py_RETURN_NONE;
}

/* get_output(name) -> (bytes, dtype, shape) */
static PyObject *pred_get_output(PredObject *self, PyObject *args)
{
    const char *name;
    keel_io_handle *h;
    keel_dtype dt;
    int64_t shape[KEEL_MAX_DIMS];
    int nd;
    uint64_t n = 1;
    PyObject *b, *shp;
    keel_status st;

    if (!PyArg_ParseTuple(args, "s", &name))
        return NULL;
    h = keel_predictor_output_handle(self->p, name);
    if (!h)
        return kpy_raise(KEEL_STATUS_INVALID_ARGUMENT);
    KPY_CHECK(keel_io_handle_shape(h, &dt, &nd, shape));
    for (int i = 0; i < nd; i++) {
        if (shape[i] < 0)
            return PyErr_Format(PyExc_RuntimeError,
                                "copy_to_cpu: run the predictor first");
        n *= (uint64_t)shape[i];
    }
    b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * keel_dtype_size(dt)));
    if (!b)
        return NULL;
    st = keel_io_handle_copy_to_host(h, PyBytes_AS_STRING(b),
                                     (size_t)(n * keel_dtype_size(dt)));
    if (st) {
        Py_DECREF(b);
        return kpy_raise(st);
    }
    shp = PyList_New(nd);
    for (int i = 0; shp && i < nd; i++)
        PyList_SET_ITEM(shp, i, PyLong_FromLongLong(shape[i]));
    if (!shp) {
        Py_DECREF(b);
        return NULL;
    }
    return Py_BuildValue("(NsN)", b, keel_dtype_name(dt), shp);
}

static PyObject *pred_summary(PredObject *self, PyObject *unused)
{
    char buf[8192];

    (void)unused;
    keel_predictor_summary(self->p, buf, sizeof(buf));
    return PyUnicode_FromString(buf);
}

static PyMethodDef pred_methods[] = {
    {"names", (PyCFunction)pred_names, METH_O, NULL},
    {"set_input", (PyCFunction)pred_set_input, METH_VARARGS, NULL},
    {"run", (PyCFunction)pred_run, METH_NOARGS, NULL},
    {"get_output", (PyCFunction)pred_get_output, METH_VARARGS, NULL},
    {"summary", (PyCFunction)pred_summary, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyTypeObject Pred_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "keel._C.PredictorHandle",
    .tp_basicsize = sizeof(PredObject),
    .tp_dealloc = (destructor)pred_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "a Predictor (used by keel.inference)",
    .tp_methods = pred_methods,
};

/* predictor(prefix, device, threads, ir_optim, memory_optim, precision,
 *           [deleted passes]) */
static PyObject *m_predictor(PyObject *mod, PyObject *args)
{
    const char *prefix, *dev, *prec;
    int threads, ir, mem;
    PyObject *deleted, *seq;
    keel_inference_config *cfg = NULL;
    keel_predictor *p = NULL;
    keel_dtype pdt;
    keel_status st;
    PredObject *o;

    (void)mod;
    if (!PyArg_ParseTuple(args, "szippsO", &prefix, &dev, &threads, &ir,
                          &mem, &prec, &deleted))
        return NULL;
    KPY_CHECK(keel_dtype_parse(prec, &pdt));
    seq = PySequence_Fast(deleted, "a list of pass names");
    if (!seq)
        return NULL;
    st = keel_inference_config_create(prefix, &cfg);
    if (!st && dev)
        st = keel_inference_config_set_device(cfg, dev);
    if (!st && threads)
        st = keel_inference_config_set_threads(cfg, threads);
    if (!st)
        st = keel_inference_config_switch_ir_optim(cfg, ir);
    if (!st)
        st = keel_inference_config_enable_memory_optim(cfg, mem);
    if (!st)
        st = keel_inference_config_set_precision(cfg, pdt);
    for (Py_ssize_t i = 0; !st && i < PySequence_Fast_GET_SIZE(seq); i++) {
        const char *s = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(seq, i));

        if (!s) {
            Py_DECREF(seq);
            keel_inference_config_free(cfg);
            return NULL;
        }
        st = keel_inference_config_delete_pass(cfg, s);
    }
    Py_DECREF(seq);
    if (!st)
        st = keel_predictor_create(cfg, &p);
    keel_inference_config_free(cfg);
    KPY_CHECK(st);
    o = PyObject_New(PredObject, &Pred_Type);
    if (!o) {
        keel_predictor_free(p);
        return NULL;
    }
    o->p = p;
    return (PyObject *)o;
}

static PyMethodDef jit_methods[] = {
    {"py_layer", m_py_layer, METH_VARARGS, NULL},
    {"jit_trace", m_jit_trace, METH_VARARGS, NULL},
    {"jit_load", m_jit_load, METH_VARARGS, NULL},
    {"predictor", m_predictor, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};

int kpy_jit_init(PyObject *m)
{
    if (PyType_Ready(&Graph_Type) < 0 || PyType_Ready(&Pred_Type) < 0)
        return -1;
    return kpy_add_functions(m, jit_methods);
}
