/*
 * keel._C: the CPython binding of libkeel's public API.
 *
 * One object type, TensorBase, holds a keel_tensor reference; the Python
 * package (keel/__init__.py) subclasses it as keel.Tensor and registers
 * that class here, so every tensor this module makes is a keel.Tensor.
 * Ops run through keel_op_run by catalog name, with attributes passed as
 * (name, type, value) triples that the package builds from the catalog's
 * attribute strings. Nothing here computes anything itself.
 *
 * Errors: every keel status other than OK raises keel.KeelError (a
 * RuntimeError) carrying keel_last_error(); INVALID_ARGUMENT raises
 * InvalidArgumentError, which is also a ValueError, and NOT_FOUND
 * NotFoundError, also a LookupError. Attributes hold `status`, the status
 * name.
 */
#include "_C.h"

#include <stdint.h>
#include <string.h>

#include <keel/autograd.h>
#include <keel/ops.h>
#include <keel/runtime.h>
#include <keel/tensor.h>

#define MAX_OP_IO 16
#define MAX_OP_ATTRS 16

typedef struct {
    PyObject_HEAD
    keel_tensor *t;
} TensorObject;

static PyTypeObject TensorBase_Type;
static PyObject *tensor_class; /* keel.Tensor, set by _set_tensor_class */
static PyObject *KeelError, *InvalidArgumentError, *NotFoundError;

/* ---- errors --------------------------------------------------------------- */

PyObject *kpy_raise(keel_status st)
{
    PyObject *type = st == KEEL_STATUS_INVALID_ARGUMENT ? InvalidArgumentError
                     : st == KEEL_STATUS_NOT_FOUND      ? NotFoundError
                                                        : KeelError;
    PyObject *args, *exc, *name_obj;
    const char *name;

    args = Py_BuildValue("(s)", keel_last_error());
    if (!args)
        return NULL;
    exc = PyObject_Call(type, args, NULL);
    Py_DECREF(args);
    if (!exc)
        return NULL;
    name = keel_status_name(st);
    if (!strncmp(name, "KEEL_STATUS_", 12))
        name += 12;
    name_obj = PyUnicode_FromString(name);
    if (name_obj) {
        PyObject_SetAttrString(exc, "status", name_obj);
        Py_DECREF(name_obj);
    }
    PyErr_SetObject(type, exc);
    Py_DECREF(exc);
    return NULL;
}

#define CHECK KPY_CHECK

/* ---- tensors -------------------------------------------------------------- */

/* A new keel.Tensor owning the reference t (t is freed on failure). */
PyObject *kpy_wrap(keel_tensor *t)
{
    PyTypeObject *cls = tensor_class ? (PyTypeObject *)tensor_class
                                     : &TensorBase_Type;
    TensorObject *o;

    if (!t)
        Py_RETURN_NONE;
    o = (TensorObject *)cls->tp_alloc(cls, 0);
    if (!o) {
        keel_tensor_free(t);
        return NULL;
    }
    o->t = t;
    return (PyObject *)o;
}

keel_tensor *kpy_unwrap(PyObject *o, const char *what)
{
    if (!PyObject_TypeCheck(o, &TensorBase_Type) ||
        !((TensorObject *)o)->t) {
        PyErr_Format(PyExc_TypeError, "%s must be a keel.Tensor, not %s",
                     what, Py_TYPE(o)->tp_name);
        return NULL;
    }
    return ((TensorObject *)o)->t;
}

static void tensor_dealloc(TensorObject *self)
{
    keel_tensor_free(self->t);
    self->t = NULL;
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int tensor_init(TensorObject *self, PyObject *args, PyObject *kw)
{
    (void)args;
    (void)kw;
    if (!self->t) {
        PyErr_SetString(PyExc_TypeError,
                        "keel.Tensor is made by keel.to_tensor and the ops, "
                        "not called directly");
        return -1;
    }
    return 0;
}

static keel_tensor *self_t(TensorObject *self)
{
    if (!self->t)
        PyErr_SetString(PyExc_ValueError, "the tensor was never made");
    return self->t;
}

static PyObject *tensor_get_shape(TensorObject *self, void *c)
{
    keel_tensor *t = self_t(self);
    PyObject *l;
    int nd;

    (void)c;
    if (!t)
        return NULL;
    nd = keel_tensor_ndim(t);
    l = PyList_New(nd);
    for (int i = 0; l && i < nd; i++) {
        PyObject *v = PyLong_FromLongLong(keel_tensor_shape(t)[i]);
        if (!v) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, i, v);
    }
    return l;
}

static PyObject *tensor_get_dtype(TensorObject *self, void *c)
{
    keel_tensor *t = self_t(self);

    (void)c;
    return t ? PyUnicode_FromString(keel_dtype_name(keel_tensor_dtype(t)))
             : NULL;
}

static PyObject *tensor_get_place(TensorObject *self, void *c)
{
    keel_tensor *t = self_t(self);
    char buf[64];

    (void)c;
    if (!t)
        return NULL;
    CHECK(keel_place_name(keel_tensor_place(t), buf, sizeof(buf)));
    return PyUnicode_FromString(buf);
}

static PyObject *tensor_get_stop_gradient(TensorObject *self, void *c)
{
    keel_tensor *t = self_t(self);

    (void)c;
    return t ? PyBool_FromLong(keel_tensor_stop_gradient(t)) : NULL;
}

static int tensor_set_stop_gradient(TensorObject *self, PyObject *v, void *c)
{
    keel_tensor *t = self_t(self);
    int b;
    keel_status st;

    (void)c;
    if (!t)
        return -1;
    if (!v) {
        PyErr_SetString(PyExc_AttributeError,
                        "stop_gradient cannot be deleted");
        return -1;
    }
    b = PyObject_IsTrue(v);
    if (b < 0)
        return -1;
    st = keel_tensor_set_stop_gradient(t, b != 0);
    if (st) {
        kpy_raise(st);
        return -1;
    }
    return 0;
}

static PyObject *tensor_get_grad(TensorObject *self, void *c)
{
    keel_tensor *t = self_t(self);

    (void)c;
    return t ? kpy_wrap(keel_tensor_grad(t)) : NULL;
}

static int tensor_set_grad(TensorObject *self, PyObject *v, void *c)
{
    keel_tensor *t = self_t(self), *g = NULL;
    keel_status st;

    (void)c;
    if (!t)
        return -1;
    if (v && v != Py_None && !(g = kpy_unwrap(v, "grad")))
        return -1;
    st = keel_tensor_set_grad(t, g);
    if (st) {
        kpy_raise(st);
        return -1;
    }
    return 0;
}

static PyObject *tensor_get_is_leaf(TensorObject *self, void *c)
{
    keel_tensor *t = self_t(self);

    (void)c;
    return t ? PyBool_FromLong(keel_tensor_is_leaf(t)) : NULL;
}

static PyObject *tensor_get_grad_fn(TensorObject *self, void *c)
{
    keel_tensor *t = self_t(self);
    const char *n;

    (void)c;
    if (!t)
        return NULL;
    n = keel_tensor_grad_fn_name(t);
    if (!n)
        Py_RETURN_NONE;
    return PyUnicode_FromString(n);
}

static PyObject *tensor_get_is_contiguous(TensorObject *self, void *c)
{
    keel_tensor *t = self_t(self);

    (void)c;
    return t ? PyBool_FromLong(keel_tensor_is_contiguous(t)) : NULL;
}

/* The elements, row-major, as bytes (the package makes NumPy arrays of
 * them). */
static PyObject *tensor_to_bytes(TensorObject *self, PyObject *unused)
{
    keel_tensor *t = self_t(self);
    PyObject *b;
    size_t n;
    keel_status st;

    (void)unused;
    if (!t)
        return NULL;
    n = (size_t)keel_tensor_numel(t) * keel_dtype_size(keel_tensor_dtype(t));
    b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)n);
    if (!b)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    st = keel_tensor_to_host(t, PyBytes_AS_STRING(b), n);
    Py_END_ALLOW_THREADS
    if (st) {
        Py_DECREF(b);
        return kpy_raise(st);
    }
    return b;
}

static PyObject *tensor_backward(TensorObject *self, PyObject *args,
                                 PyObject *kw)
{
    static char *names[] = {"grad_tensor", "retain_graph", NULL};
    PyObject *g = Py_None;
    int retain = 0;
    keel_tensor *t = self_t(self), *gt = NULL;
    keel_status st;

    if (!t || !PyArg_ParseTupleAndKeywords(args, kw, "|Op", names, &g,
                                           &retain))
        return NULL;
    if (g != Py_None && !(gt = kpy_unwrap(g, "grad_tensor")))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    st = keel_backward(t, gt, retain != 0);
    Py_END_ALLOW_THREADS
    CHECK(st);
    Py_RETURN_NONE;
}

static PyObject *tensor_clear_grad(TensorObject *self, PyObject *args,
                                   PyObject *kw)
{
    static char *names[] = {"set_to_zero", NULL};
    int zero = 1;
    keel_tensor *t = self_t(self);

    if (!t || !PyArg_ParseTupleAndKeywords(args, kw, "|p", names, &zero))
        return NULL;
    CHECK(zero ? keel_tensor_clear_grad(t) : keel_tensor_set_grad(t, NULL));
    Py_RETURN_NONE;
}

static PyObject *tensor_detach(TensorObject *self, PyObject *unused)
{
    keel_tensor *t = self_t(self), *d = NULL;

    (void)unused;
    if (!t)
        return NULL;
    CHECK(keel_detach(t, &d));
    return kpy_wrap(d);
}

static PyObject *tensor_to_device(TensorObject *self, PyObject *args)
{
    const char *dev;
    keel_tensor *t = self_t(self), *o = NULL;

    if (!t || !PyArg_ParseTuple(args, "s", &dev))
        return NULL;
    CHECK(keel_tensor_to(t, dev, &o));
    return kpy_wrap(o);
}

static PyObject *tensor_cast(TensorObject *self, PyObject *args)
{
    const char *name;
    keel_dtype dt;
    keel_tensor *t = self_t(self), *o = NULL;

    if (!t || !PyArg_ParseTuple(args, "s", &name))
        return NULL;
    CHECK(keel_dtype_parse(name, &dt));
    CHECK(keel_cast(t, dt, &o));
    return kpy_wrap(o);
}

/* View helpers for indexing: x[start:stop:step] on one axis, and the
 * removal of one axis of size 1. */
static PyObject *tensor_slice(TensorObject *self, PyObject *args)
{
    int axis;
    long long a, b, s;
    keel_tensor *t = self_t(self), *o = NULL;

    if (!t || !PyArg_ParseTuple(args, "iLLL", &axis, &a, &b, &s))
        return NULL;
    CHECK(keel_slice(t, axis, a, b, s, &o));
    return kpy_wrap(o);
}

/* x.expand(shape): a broadcast view (-1 keeps a dim). */
static PyObject *tensor_expand(TensorObject *self, PyObject *shape_obj)
{
    int64_t shape[KEEL_MAX_DIMS];
    keel_tensor *t = self_t(self), *o = NULL;
    int nd;

    if (!t || (nd = kpy_int64s(shape_obj, shape, KEEL_MAX_DIMS,
                               "expand(shape)")) < 0)
        return NULL;
    CHECK(keel_expand(t, nd, shape, &o));
    return kpy_wrap(o);
}

static PyObject *tensor_squeeze_axis(TensorObject *self, PyObject *args)
{
    int axis;
    keel_tensor *t = self_t(self), *o = NULL;

    if (!t || !PyArg_ParseTuple(args, "i", &axis))
        return NULL;
    CHECK(keel_squeeze(t, 1, &axis, &o));
    return kpy_wrap(o);
}

static PyObject *tensor_shares_storage(TensorObject *self, PyObject *other)
{
    keel_tensor *t = self_t(self), *u = kpy_unwrap(other, "other");

    if (!t || !u)
        return NULL;
    return PyBool_FromLong(keel_tensor_shares_storage(t, u));
}

static PyObject *tensor_format(TensorObject *self, PyObject *unused)
{
    keel_tensor *t = self_t(self);
    char buf[4096];

    (void)unused;
    if (!t)
        return NULL;
    keel_tensor_format(t, buf, sizeof(buf));
    return PyUnicode_FromString(buf);
}

static PyGetSetDef tensor_getset[] = {
    {"shape", (getter)tensor_get_shape, NULL, "the dimensions, a list", NULL},
    {"dtype", (getter)tensor_get_dtype, NULL, "the dtype's name", NULL},
    {"place", (getter)tensor_get_place, NULL, "the device, as 'cpu:0'", NULL},
    {"stop_gradient", (getter)tensor_get_stop_gradient,
     (setter)tensor_set_stop_gradient, "Paddle's stop_gradient", NULL},
    {"grad", (getter)tensor_get_grad, (setter)tensor_set_grad,
     "the accumulated gradient, or None", NULL},
    {"is_leaf", (getter)tensor_get_is_leaf, NULL, "no producing node", NULL},
    {"grad_fn", (getter)tensor_get_grad_fn, NULL,
     "the name of the producing node's backward, or None", NULL},
    {"_contiguous", (getter)tensor_get_is_contiguous, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyMethodDef tensor_methods[] = {
    {"_to_bytes", (PyCFunction)tensor_to_bytes, METH_NOARGS, NULL},
    {"backward", (PyCFunction)(void (*)(void))tensor_backward,
     METH_VARARGS | METH_KEYWORDS,
     "backward(grad_tensor=None, retain_graph=False)"},
    {"clear_grad", (PyCFunction)(void (*)(void))tensor_clear_grad,
     METH_VARARGS | METH_KEYWORDS, "clear_grad(set_to_zero=True)"},
    {"detach", (PyCFunction)tensor_detach, METH_NOARGS, NULL},
    {"_to_device", (PyCFunction)tensor_to_device, METH_VARARGS, NULL},
    {"_cast", (PyCFunction)tensor_cast, METH_VARARGS, NULL},
    {"_slice", (PyCFunction)tensor_slice, METH_VARARGS, NULL},
    {"_expand", (PyCFunction)tensor_expand, METH_O, NULL},
    {"_squeeze_axis", (PyCFunction)tensor_squeeze_axis, METH_VARARGS, NULL},
    {"_shares_storage", (PyCFunction)tensor_shares_storage, METH_O, NULL},
    {"_format", (PyCFunction)tensor_format, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyTypeObject TensorBase_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "keel._C.TensorBase",
    .tp_basicsize = sizeof(TensorObject),
    .tp_dealloc = (destructor)tensor_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "a keel tensor (use keel.Tensor)",
    .tp_methods = tensor_methods,
    .tp_getset = tensor_getset,
    .tp_init = (initproc)tensor_init,
    .tp_new = PyType_GenericNew,
};

/* ---- module functions ----------------------------------------------------- */


static PyObject *m_set_tensor_class(PyObject *m, PyObject *cls)
{
    (void)m;
    if (!PyType_Check(cls) ||
        !PyType_IsSubtype((PyTypeObject *)cls, &TensorBase_Type)) {
        PyErr_SetString(PyExc_TypeError, "a subclass of TensorBase");
        return NULL;
    }
    Py_XDECREF(tensor_class);
    Py_INCREF(cls);
    tensor_class = cls;
    Py_RETURN_NONE;
}

/* from_buffer(obj, dtype, shape, device): a new tensor with a copy of a
 * C-contiguous buffer's bytes (a NumPy array, bytes, array.array). */
static PyObject *m_from_buffer(PyObject *m, PyObject *args)
{
    PyObject *obj, *shape_obj;
    const char *dtname, *device;
    int64_t shape[KEEL_MAX_DIMS];
    Py_buffer view;
    keel_dtype dt;
    keel_tensor *t = NULL;
    Py_ssize_t nd;
    keel_status st;
    uint64_t need = 1;

    (void)m;
    if (!PyArg_ParseTuple(args, "OsOz", &obj, &dtname, &shape_obj, &device))
        return NULL;
    CHECK(keel_dtype_parse(dtname, &dt));
    nd = kpy_int64s(shape_obj, shape, KEEL_MAX_DIMS, "to_tensor");
    if (nd < 0)
        return NULL;
    for (Py_ssize_t i = 0; i < nd; i++) {
        if (shape[i] < 0)
            return PyErr_Format(PyExc_ValueError,
                                "to_tensor: dimension %zd is %lld", i,
                                (long long)shape[i]);
        if (shape[i] && need > UINT64_MAX / (uint64_t)shape[i])
            return PyErr_Format(PyExc_ValueError,
                                "to_tensor: the shape's element count "
                                "overflows");
        need *= (uint64_t)shape[i];
    }
    if (PyObject_GetBuffer(obj, &view, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (need > UINT64_MAX / keel_dtype_size(dt) ||
        (uint64_t)view.len != need * keel_dtype_size(dt)) {
        PyBuffer_Release(&view);
        return PyErr_Format(PyExc_ValueError,
                            "to_tensor: the data has %zd bytes, the shape "
                            "and dtype %s need %llu",
                            view.len, dtname,
                            (unsigned long long)(need * keel_dtype_size(dt)));
    }
    st = keel_tensor_from_host(view.buf, dt, (int)nd, shape, device, &t);
    PyBuffer_Release(&view);
    CHECK(st);
    return kpy_wrap(t);
}

static PyObject *m_set_device(PyObject *m, PyObject *args)
{
    const char *name;

    (void)m;
    if (!PyArg_ParseTuple(args, "s", &name))
        return NULL;
    CHECK(keel_set_device(name));
    return PyUnicode_FromString(keel_get_device());
}

static PyObject *m_get_device(PyObject *m, PyObject *unused)
{
    const char *d;

    (void)m;
    (void)unused;
    d = keel_get_device();
    if (!d)
        return kpy_raise(keel_last_status() ? keel_last_status()
                                               : KEEL_STATUS_INVALID_STATE);
    return PyUnicode_FromString(d);
}

static PyObject *m_device_count(PyObject *m, PyObject *args)
{
    const char *name;

    (void)m;
    if (!PyArg_ParseTuple(args, "s", &name))
        return NULL;
    return PyLong_FromLong(keel_device_count(name));
}

static PyObject *m_seed(PyObject *m, PyObject *args)
{
    unsigned long long s;

    (void)m;
    if (!PyArg_ParseTuple(args, "K", &s))
        return NULL;
    keel_seed((uint64_t)s);
    Py_RETURN_NONE;
}

static PyObject *m_no_grad_begin(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    keel_no_grad_begin();
    Py_RETURN_NONE;
}

static PyObject *m_no_grad_end(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    keel_no_grad_end();
    Py_RETURN_NONE;
}

static PyObject *m_enable_grad_begin(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    CHECK(keel_enable_grad_begin());
    Py_RETURN_NONE;
}

static PyObject *m_enable_grad_end(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    keel_enable_grad_end();
    Py_RETURN_NONE;
}

static PyObject *m_is_grad_enabled(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    return PyBool_FromLong(keel_is_grad_enabled());
}

/* The catalog: [(name, num_inputs, num_outputs, attrs, differentiable)]. */
static PyObject *m_ops(PyObject *m, PyObject *unused)
{
    PyObject *l = PyList_New(0);

    (void)m;
    (void)unused;
    for (int i = 0; l && i < KEEL_OP_COUNT; i++) {
        const keel_op_info *in = keel_op_get_info((keel_op_id)i);
        PyObject *e;

        if (!in)
            continue;
        e = Py_BuildValue("(siisO)", in->name, (int)in->num_inputs,
                          (int)in->num_outputs, in->attrs ? in->attrs : "",
                          strcmp(in->grad_rule, "NONE") ? Py_True : Py_False);
        if (!e || PyList_Append(l, e) < 0) {
            Py_XDECREF(e);
            Py_DECREF(l);
            return NULL;
        }
        Py_DECREF(e);
    }
    return l;
}

/* Storage for one call's attributes: the strings and arrays stay alive
 * until the op has run. */
struct attr_mem {
    keel_attr a[MAX_OP_ATTRS];
    int64_t *ints[MAX_OP_ATTRS];
    double *floats[MAX_OP_ATTRS];
    int n;
};

static void attr_mem_free(struct attr_mem *m)
{
    for (int i = 0; i < m->n; i++) {
        PyMem_Free(m->ints[i]);
        PyMem_Free(m->floats[i]);
    }
}

/* One (name, type, value) triple; type is the catalog's: int, float,
 * bool, str, ints, floats, dtype. Strings point into the tuple (kept by
 * the caller). */
static int attr_from(PyObject *triple, struct attr_mem *m)
{
    const char *name, *type;
    PyObject *v;
    keel_attr *a = &m->a[m->n];
    int k = m->n;

    if (!PyArg_ParseTuple(triple, "ssO", &name, &type, &v))
        return -1;
    m->ints[k] = NULL;
    m->floats[k] = NULL;
    a->name = name;
    if (!strcmp(type, "int") || !strcmp(type, "bool")) {
        a->type = type[0] == 'i' ? KEEL_ATTR_INT : KEEL_ATTR_BOOL;
        a->v.i = type[0] == 'i' ? PyLong_AsLongLong(v) : PyObject_IsTrue(v);
        if ((a->v.i == -1) && PyErr_Occurred())
            return -1;
    } else if (!strcmp(type, "float")) {
        a->type = KEEL_ATTR_FLOAT;
        a->v.f = PyFloat_AsDouble(v);
        if (a->v.f == -1.0 && PyErr_Occurred())
            return -1;
    } else if (!strcmp(type, "str")) {
        a->type = KEEL_ATTR_STRING;
        a->v.s = PyUnicode_AsUTF8(v);
        if (!a->v.s)
            return -1;
    } else if (!strcmp(type, "dtype")) {
        keel_dtype dt;
        const char *s = PyUnicode_AsUTF8(v);
        keel_status st;

        if (!s)
            return -1;
        st = keel_dtype_parse(s, &dt);
        if (st) {
            kpy_raise(st);
            return -1;
        }
        a->type = KEEL_ATTR_DTYPE;
        a->v.i = dt;
    } else if (!strcmp(type, "ints") || !strcmp(type, "floats")) {
        PyObject *seq = PySequence_Fast(v, "a sequence of numbers");
        Py_ssize_t n;

        if (!seq)
            return -1;
        n = PySequence_Fast_GET_SIZE(seq);
        if (type[0] == 'i') {
            m->ints[k] = PyMem_Malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
            if (!m->ints[k]) {
                Py_DECREF(seq);
                PyErr_NoMemory();
                return -1;
            }
            for (Py_ssize_t i = 0; i < n; i++) {
                m->ints[k][i] =
                    PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));
                if (m->ints[k][i] == -1 && PyErr_Occurred()) {
                    Py_DECREF(seq);
                    m->n++; /* so the array is freed */
                    return -1;
                }
            }
            a->type = KEEL_ATTR_INTS;
            a->v.ints.data = m->ints[k];
            a->v.ints.count = n;
        } else {
            m->floats[k] = PyMem_Malloc(sizeof(double) * (size_t)(n ? n : 1));
            if (!m->floats[k]) {
                Py_DECREF(seq);
                PyErr_NoMemory();
                return -1;
            }
            for (Py_ssize_t i = 0; i < n; i++) {
                m->floats[k][i] =
                    PyFloat_AsDouble(PySequence_Fast_GET_ITEM(seq, i));
                if (m->floats[k][i] == -1.0 && PyErr_Occurred()) {
                    Py_DECREF(seq);
                    m->n++;
                    return -1;
                }
            }
            a->type = KEEL_ATTR_FLOATS;
            a->v.floats.data = m->floats[k];
            a->v.floats.count = n;
        }
        Py_DECREF(seq);
    } else {
        PyErr_Format(PyExc_ValueError, "attribute %s: unknown type %s", name,
                     type);
        return -1;
    }
    m->n++;
    return 0;
}

/* run_op(name, inputs, attrs) -> tuple of tensors. inputs: a sequence of
 * keel.Tensor or None (an absent optional input); attrs: a sequence of
 * (name, type, value). */
static PyObject *m_run_op(PyObject *mod, PyObject *args)
{
    const char *name;
    PyObject *ins, *attrs, *res = NULL;
    keel_tensor *in[MAX_OP_IO], *out[MAX_OP_IO];
    struct attr_mem m;
    keel_op_id op;
    Py_ssize_t nin, na;
    int nout = 0;
    keel_status st;

    (void)mod;
    if (!PyArg_ParseTuple(args, "sOO", &name, &ins, &attrs))
        return NULL;
    CHECK(keel_op_find(name, &op));
    ins = PySequence_Fast(ins, "inputs must be a sequence");
    if (!ins)
        return NULL;
    attrs = PySequence_Fast(attrs, "attrs must be a sequence");
    if (!attrs) {
        Py_DECREF(ins);
        return NULL;
    }
    nin = PySequence_Fast_GET_SIZE(ins);
    na = PySequence_Fast_GET_SIZE(attrs);
    m.n = 0;
    if (nin > MAX_OP_IO || na > MAX_OP_ATTRS) {
        PyErr_Format(PyExc_ValueError, "%s: too many inputs or attributes",
                     name);
        goto out;
    }
    for (Py_ssize_t i = 0; i < nin; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(ins, i);

        in[i] = NULL;
        if (o != Py_None && !(in[i] = kpy_unwrap(o, "an op input")))
            goto out;
    }
    for (Py_ssize_t i = 0; i < na; i++)
        if (attr_from(PySequence_Fast_GET_ITEM(attrs, i), &m) < 0)
            goto out;
    Py_BEGIN_ALLOW_THREADS
    st = keel_op_run(op, in, (int)nin, m.a, m.n, out, MAX_OP_IO, &nout);
    Py_END_ALLOW_THREADS
    if (st) {
        kpy_raise(st);
        goto out;
    }
    res = PyTuple_New(nout);
    for (int i = 0; i < nout; i++) {
        PyObject *w = res ? kpy_wrap(out[i]) : NULL;

        if (!res) {
            keel_tensor_free(out[i]);
            continue;
        }
        if (!w) {
            for (int j = i + 1; j < nout; j++)
                keel_tensor_free(out[j]);
            Py_CLEAR(res);
            break;
        }
        PyTuple_SET_ITEM(res, i, w);
    }
out:
    attr_mem_free(&m);
    Py_DECREF(ins);
    Py_DECREF(attrs);
    return res;
}

static PyObject *m_reshape(PyObject *mod, PyObject *args)
{
    PyObject *x, *shape_obj;
    int64_t shape[KEEL_MAX_DIMS];
    keel_tensor *t, *o = NULL;
    int nd;

    (void)mod;
    if (!PyArg_ParseTuple(args, "OO", &x, &shape_obj) ||
        !(t = kpy_unwrap(x, "x")))
        return NULL;
    nd = kpy_int64s(shape_obj, shape, KEEL_MAX_DIMS, "reshape");
    if (nd < 0)
        return NULL;
    CHECK(keel_reshape(t, nd, shape, &o));
    return kpy_wrap(o);
}

static PyObject *m_transpose(PyObject *mod, PyObject *args)
{
    PyObject *x, *perm_obj;
    int perm[KEEL_MAX_DIMS];
    keel_tensor *t, *o = NULL;
    Py_ssize_t nd;

    (void)mod;
    if (!PyArg_ParseTuple(args, "OO", &x, &perm_obj) ||
        !(t = kpy_unwrap(x, "x")))
        return NULL;
    perm_obj = PySequence_Fast(perm_obj, "perm must be a sequence");
    if (!perm_obj)
        return NULL;
    nd = PySequence_Fast_GET_SIZE(perm_obj);
    if (nd > KEEL_MAX_DIMS) {
        Py_DECREF(perm_obj);
        return PyErr_Format(PyExc_ValueError, "transpose: %zd axes", nd);
    }
    for (Py_ssize_t i = 0; i < nd; i++) {
        perm[i] = (int)PyLong_AsLong(PySequence_Fast_GET_ITEM(perm_obj, i));
        if (perm[i] == -1 && PyErr_Occurred()) {
            Py_DECREF(perm_obj);
            return NULL;
        }
    }
    Py_DECREF(perm_obj);
    if (nd != keel_tensor_ndim(t))
        return PyErr_Format(PyExc_ValueError,
                            "transpose: perm has %zd axes, x has %d", nd,
                            keel_tensor_ndim(t));
    CHECK(keel_permute(t, perm, &o));
    return kpy_wrap(o);
}

static PyObject *m_unsqueeze(PyObject *mod, PyObject *args)
{
    PyObject *x;
    int axis;
    keel_tensor *t, *o = NULL;

    (void)mod;
    if (!PyArg_ParseTuple(args, "Oi", &x, &axis) || !(t = kpy_unwrap(x, "x")))
        return NULL;
    CHECK(keel_unsqueeze(t, axis, &o));
    return kpy_wrap(o);
}

int kpy_int64s(PyObject *obj, int64_t *v, int max, const char *what)
{
    PyObject *seq = PySequence_Fast(obj, "expected a sequence of integers");
    Py_ssize_t n;

    if (!seq)
        return -1;
    n = PySequence_Fast_GET_SIZE(seq);
    if (n > max) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "%s: %zd values (at most %d)", what,
                     n, max);
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

/* create(kind, shape, dtype, device, a, b): empty, zeros, ones, full (a),
 * rand, randn, uniform (a, b), normal (a, b), randint (a, b). */
static PyObject *m_create(PyObject *mod, PyObject *args)
{
    const char *kind, *dtname, *dev;
    PyObject *shape_obj;
    double a = 0, b = 0;
    int64_t shape[KEEL_MAX_DIMS];
    keel_dtype dt;
    keel_tensor *o = NULL;
    keel_status st;
    int nd;

    (void)mod;
    if (!PyArg_ParseTuple(args, "sOsz|dd", &kind, &shape_obj, &dtname, &dev,
                          &a, &b))
        return NULL;
    nd = kpy_int64s(shape_obj, shape, KEEL_MAX_DIMS, kind);
    if (nd < 0)
        return NULL;
    CHECK(keel_dtype_parse(dtname, &dt));
    if (!strcmp(kind, "empty"))
        st = keel_empty(nd, shape, dt, dev, &o);
    else if (!strcmp(kind, "zeros"))
        st = keel_zeros(nd, shape, dt, dev, &o);
    else if (!strcmp(kind, "ones"))
        st = keel_ones(nd, shape, dt, dev, &o);
    else if (!strcmp(kind, "full"))
        st = keel_full(nd, shape, dt, a, dev, &o);
    else if (!strcmp(kind, "rand"))
        st = keel_rand(nd, shape, dt, dev, &o);
    else if (!strcmp(kind, "randn"))
        st = keel_randn(nd, shape, dt, dev, &o);
    else if (!strcmp(kind, "uniform"))
        st = keel_uniform(nd, shape, dt, a, b, dev, &o);
    else if (!strcmp(kind, "normal"))
        st = keel_normal(nd, shape, dt, a, b, dev, &o);
    else if (!strcmp(kind, "randint"))
        st = keel_randint((int64_t)a, (int64_t)b, nd, shape, dt, dev, &o);
    else
        return PyErr_Format(PyExc_ValueError, "create: unknown kind %s",
                            kind);
    CHECK(st);
    return kpy_wrap(o);
}

static PyObject *m_arange(PyObject *mod, PyObject *args)
{
    double a, b, step;
    const char *dtname, *dev;
    keel_dtype dt;
    keel_tensor *o = NULL;

    (void)mod;
    if (!PyArg_ParseTuple(args, "dddsz", &a, &b, &step, &dtname, &dev))
        return NULL;
    CHECK(keel_dtype_parse(dtname, &dt));
    CHECK(keel_arange(a, b, step, dt, dev, &o));
    return kpy_wrap(o);
}

static PyObject *m_memory_stats(PyObject *mod, PyObject *args)
{
    const char *dev = NULL;
    keel_memory_stats ms;

    (void)mod;
    if (!PyArg_ParseTuple(args, "|z", &dev))
        return NULL;
    CHECK(keel_memory_stats_get(dev ? dev : keel_get_device(), &ms));
    return Py_BuildValue("{sKsKsKsK}", "allocated",
                         (unsigned long long)ms.allocated, "reserved",
                         (unsigned long long)ms.reserved, "peak_allocated",
                         (unsigned long long)ms.peak_allocated, "alloc_count",
                         (unsigned long long)ms.alloc_count);
}

/* binary(op_id, x, y): a two-input op without attributes, the operators'
 * fast path (both operands already tensors). */
static PyObject *m_binary(PyObject *mod, PyObject *const *args,
                          Py_ssize_t nargs)
{
    keel_tensor *in[2], *out[2];
    long id;
    int nout = 0;
    keel_status st;

    (void)mod;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "binary(op_id, x, y)");
        return NULL;
    }
    id = PyLong_AsLong(args[0]);
    if (id == -1 && PyErr_Occurred())
        return NULL;
    if (!(in[0] = kpy_unwrap(args[1], "x")) ||
        !(in[1] = kpy_unwrap(args[2], "y")))
        return NULL;
    st = keel_op_run((keel_op_id)id, in, 2, NULL, 0, out, 2, &nout);
    CHECK(st);
    for (int i = 1; i < nout; i++)
        keel_tensor_free(out[i]);
    return kpy_wrap(out[0]);
}

static PyObject *m_op_id(PyObject *mod, PyObject *args)
{
    const char *name;
    keel_op_id op;

    (void)mod;
    if (!PyArg_ParseTuple(args, "s", &name))
        return NULL;
    CHECK(keel_op_find(name, &op));
    return PyLong_FromLong((long)op);
}

static PyObject *m_version(PyObject *mod, PyObject *unused)
{
    (void)mod;
    (void)unused;
    return PyUnicode_FromString(keel_version());
}

static PyMethodDef module_methods[] = {
    {"_set_tensor_class", m_set_tensor_class, METH_O, NULL},
    {"from_buffer", m_from_buffer, METH_VARARGS, NULL},
    {"set_device", m_set_device, METH_VARARGS, NULL},
    {"get_device", m_get_device, METH_NOARGS, NULL},
    {"device_count", m_device_count, METH_VARARGS, NULL},
    {"seed", m_seed, METH_VARARGS, NULL},
    {"no_grad_begin", m_no_grad_begin, METH_NOARGS, NULL},
    {"no_grad_end", m_no_grad_end, METH_NOARGS, NULL},
    {"enable_grad_begin", m_enable_grad_begin, METH_NOARGS, NULL},
    {"enable_grad_end", m_enable_grad_end, METH_NOARGS, NULL},
    {"is_grad_enabled", m_is_grad_enabled, METH_NOARGS, NULL},
    {"ops", m_ops, METH_NOARGS, NULL},
    {"run_op", m_run_op, METH_VARARGS, NULL},
    {"reshape", m_reshape, METH_VARARGS, NULL},
    {"transpose", m_transpose, METH_VARARGS, NULL},
    {"unsqueeze", m_unsqueeze, METH_VARARGS, NULL},
    {"version", m_version, METH_NOARGS, NULL},
    {"binary", (PyCFunction)(void (*)(void))m_binary, METH_FASTCALL, NULL},
    {"op_id", m_op_id, METH_VARARGS, NULL},
    {"create", m_create, METH_VARARGS, NULL},
    {"memory_stats", m_memory_stats, METH_VARARGS, NULL},
    {"arange", m_arange, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "keel._C",
    "The binding of libkeel's public C API (use the keel package).", -1,
    module_methods, NULL, NULL, NULL, NULL};

int kpy_add_functions(PyObject *m, PyMethodDef *defs)
{
    for (PyMethodDef *d = defs; d->ml_name; d++) {
        PyObject *f = PyCFunction_New(d, NULL);

        if (!f || PyModule_AddObject(m, d->ml_name, f) < 0) {
            Py_XDECREF(f);
            return -1;
        }
    }
    return 0;
}

PyMODINIT_FUNC PyInit__C(void); /* the module's entry point */

PyMODINIT_FUNC PyInit__C(void)
{
    PyObject *m, *bases;
    keel_status st;

    st = keel_init();
    if (st) {
        PyErr_Format(PyExc_ImportError, "keel: %s", keel_last_error());
        return NULL;
    }
    if (PyType_Ready(&TensorBase_Type) < 0)
        return NULL;
    m = PyModule_Create(&module_def);
    if (!m)
        return NULL;
    KeelError = PyErr_NewException("keel.KeelError", PyExc_RuntimeError,
                                   NULL);
    bases = KeelError ? PyTuple_Pack(2, KeelError, PyExc_ValueError) : NULL;
    InvalidArgumentError =
        bases ? PyErr_NewException("keel.InvalidArgumentError", bases, NULL)
              : NULL;
    Py_XDECREF(bases);
    bases = KeelError ? PyTuple_Pack(2, KeelError, PyExc_LookupError) : NULL;
    NotFoundError = bases ? PyErr_NewException("keel.NotFoundError", bases,
                                               NULL)
                          : NULL;
    Py_XDECREF(bases);
    if (!KeelError || !InvalidArgumentError || !NotFoundError) {
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&TensorBase_Type);
    if (PyModule_AddObject(m, "TensorBase", (PyObject *)&TensorBase_Type) < 0 ||
        PyModule_AddObject(m, "KeelError", KeelError) < 0 ||
        PyModule_AddObject(m, "InvalidArgumentError", InvalidArgumentError) <
            0 ||
        PyModule_AddObject(m, "NotFoundError", NotFoundError) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(KeelError);
    Py_INCREF(InvalidArgumentError);
    Py_INCREF(NotFoundError);
    if (kpy_nn_init(m) < 0 || kpy_dist_init(m) < 0 || kpy_jit_init(m) < 0 ||
        kpy_dlpack_init(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
