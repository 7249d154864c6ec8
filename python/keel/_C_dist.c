/*
 * keel._C, part three: the dist layer (keel/dist.h) for keel.distributed.
 *
 * DataParallel works on a keel_layer; a Python model is not one, so
 * param_layer() makes a C layer that only holds the model's parameter
 * tensors (shared), and data_parallel() wraps that: the broadcast from
 * rank 0, the buckets and the gradient averaging are all the C layer's.
 */
#include "_C.h"

#include <string.h>

#include <keel/dist.h>
#include <keel/nn.h>


static const keel_layer_ops holder_ops = {"ParameterHolder", NULL, NULL};

/* param_layer([(name, Tensor)]): a C layer owning references to the
 * tensors (names as kpy_layer_add_named makes them). */
static PyObject *m_param_layer(PyObject *mod, PyObject *pairs)
{
    keel_layer *l = NULL;
    keel_status st;

    (void)mod;
    st = keel_layer_create(&holder_ops, NULL, &l);
    if (st)
        return kpy_raise(st);
    if (kpy_layer_add_named(l, pairs, 0) < 0) {
        keel_layer_free(l);
        return NULL;
    }
    return kpy_layer_new(l);
}

typedef struct {
    PyObject_HEAD
    keel_data_parallel *dp;
    PyObject *holder; /* the parameter layer, kept alive */
} DPObject;

static void dp_dealloc(DPObject *self)
{
    keel_data_parallel_free(self->dp);
    Py_CLEAR(self->holder);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *dp_backward(DPObject *self, PyObject *loss)
{
    keel_tensor *l = kpy_unwrap(loss, "loss");
    keel_status st;

    if (!l)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    st = keel_data_parallel_backward(self->dp, l);
    Py_END_ALLOW_THREADS
    KPY_CHECK(st);
    Py_RETURN_NONE;
}

static PyObject *dp_sync(DPObject *self, PyObject *unused)
{
    keel_status st;

    (void)unused;
    Py_BEGIN_ALLOW_THREADS
    st = keel_data_parallel_sync_gradients(self->dp);
    Py_END_ALLOW_THREADS
    KPY_CHECK(st);
    Py_RETURN_NONE;
}

static PyObject *dp_set_sync(DPObject *self, PyObject *arg)
{
    int on = PyObject_IsTrue(arg);

    if (on < 0)
        return NULL;
    keel_data_parallel_set_sync(self->dp, on != 0);
    Py_RETURN_NONE;
}

static PyObject *dp_stats(DPObject *self, PyObject *unused)
{
    (void)unused;
    return Py_BuildValue(
        "{sisLsLsdsd}", "buckets", keel_data_parallel_num_buckets(self->dp),
        "reductions", (long long)keel_data_parallel_num_reductions(self->dp),
        "early", (long long)keel_data_parallel_num_early_reductions(self->dp),
        "sync_seconds", keel_data_parallel_sync_seconds(self->dp),
        "comm_seconds", keel_data_parallel_comm_seconds(self->dp));
}

static PyMethodDef dp_methods[] = {
    {"backward", (PyCFunction)dp_backward, METH_O, NULL},
    {"sync", (PyCFunction)dp_sync, METH_NOARGS, NULL},
    {"set_sync", (PyCFunction)dp_set_sync, METH_O, NULL},
    {"stats", (PyCFunction)dp_stats, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyTypeObject DP_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "keel._C.DataParallelHandle",
    .tp_basicsize = sizeof(DPObject),
    .tp_dealloc = (destructor)dp_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "a C DataParallel (used by keel.distributed)",
    .tp_methods = dp_methods,
};

/* data_parallel(holder, comm_mb, last_mb, find_unused, overlap) */
static PyObject *m_data_parallel(PyObject *mod, PyObject *args)
{
    PyObject *holder;
    keel_data_parallel_config c;
    int find, overlap;
    keel_layer *l;
    keel_data_parallel *dp = NULL;
    keel_status st;
    DPObject *o;

    (void)mod;
    keel_data_parallel_config_init(&c);
    if (!PyArg_ParseTuple(args, "Oddpp", &holder, &c.comm_buffer_size_mb,
                          &c.last_comm_buffer_size_mb, &find, &overlap) ||
        !(l = kpy_layer_of(holder)))
        return NULL;
    c.find_unused_parameters = find;
    c.overlap = overlap;
    Py_BEGIN_ALLOW_THREADS
    st = keel_data_parallel_create(l, &c, &dp);
    Py_END_ALLOW_THREADS
    KPY_CHECK(st);
    o = PyObject_New(DPObject, &DP_Type);
    if (!o) {
        keel_data_parallel_free(dp);
        return NULL;
    }
    o->dp = dp;
    o->holder = holder;
    Py_INCREF(holder);
    return (PyObject *)o;
}

static PyObject *m_dist_init(PyObject *mod, PyObject *unused)
{
    keel_status st;

    (void)mod;
    (void)unused;
    Py_BEGIN_ALLOW_THREADS
    st = keel_dist_init();
    Py_END_ALLOW_THREADS
    KPY_CHECK(st);
    Py_RETURN_NONE;
}

static PyObject *m_dist_finalize(PyObject *mod, PyObject *unused)
{
    (void)mod;
    (void)unused;
    KPY_CHECK(keel_dist_finalize());
    Py_RETURN_NONE;
}

static PyObject *m_dist_info(PyObject *mod, PyObject *unused)
{
    keel_dist_env e;

    (void)mod;
    (void)unused;
    KPY_CHECK(keel_dist_get_env(&e));
    return Py_BuildValue("{sisisisiss}", "rank", (int)e.rank, "world_size",
                         (int)e.world_size, "local_rank", (int)e.local_rank,
                         "local_size", (int)e.local_size, "launcher",
                         e.launcher ? e.launcher : "none");
}

static PyObject *m_dist_all_reduce(PyObject *mod, PyObject *args)
{
    PyObject *t;
    const char *op;
    keel_tensor *kt;
    keel_reduce_op rop;
    keel_status st;

    (void)mod;
    if (!PyArg_ParseTuple(args, "Os", &t, &op) ||
        !(kt = kpy_unwrap(t, "tensor")))
        return NULL;
    if (!strcmp(op, "sum"))
        rop = KEEL_REDUCE_SUM;
    else if (!strcmp(op, "max"))
        rop = KEEL_REDUCE_MAX;
    else if (!strcmp(op, "min"))
        rop = KEEL_REDUCE_MIN;
    else if (!strcmp(op, "prod"))
        rop = KEEL_REDUCE_PROD;
    else if (!strcmp(op, "avg"))
        rop = KEEL_REDUCE_AVG;
    else
        return PyErr_Format(PyExc_ValueError, "all_reduce: op %s", op);
    Py_BEGIN_ALLOW_THREADS
    st = keel_dist_all_reduce(kt, rop, NULL);
    Py_END_ALLOW_THREADS
    KPY_CHECK(st);
    Py_RETURN_NONE;
}

static PyObject *m_dist_barrier(PyObject *mod, PyObject *unused)
{
    keel_status st;

    (void)mod;
    (void)unused;
    Py_BEGIN_ALLOW_THREADS
    st = keel_dist_barrier(NULL);
    Py_END_ALLOW_THREADS
    KPY_CHECK(st);
    Py_RETURN_NONE;
}

/* recompute(layer handle, x) -> keel_recompute: the layer's activations
 * are not kept; backward runs its forward again (a py_layer calls back
 * into Python, with the GIL). */
static PyObject *m_recompute(PyObject *mod, PyObject *args)
{
    PyObject *lh, *xo;
    keel_layer *l;
    keel_tensor *x, *out = NULL;

    (void)mod;
    if (!PyArg_ParseTuple(args, "OO", &lh, &xo) || !(l = kpy_layer_of(lh)) ||
        !(x = kpy_unwrap(xo, "recompute(x)")))
        return NULL;
    KPY_CHECK(keel_recompute(l, x, &out));
    return kpy_wrap(out);
}

static PyMethodDef dist_methods[] = {
    {"param_layer", m_param_layer, METH_O, NULL},
    {"recompute", m_recompute, METH_VARARGS, NULL},
    {"data_parallel", m_data_parallel, METH_VARARGS, NULL},
    {"dist_init", m_dist_init, METH_NOARGS, NULL},
    {"dist_finalize", m_dist_finalize, METH_NOARGS, NULL},
    {"dist_info", m_dist_info, METH_NOARGS, NULL},
    {"dist_all_reduce", m_dist_all_reduce, METH_VARARGS, NULL},
    {"dist_barrier", m_dist_barrier, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL}};

int kpy_dist_init(PyObject *m)
{
    if (PyType_Ready(&DP_Type) < 0)
        return -1;
    return kpy_add_functions(m, dist_methods);
}
