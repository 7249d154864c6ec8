/*
 * DLPack in keel._C: tensors out to NumPy / PyTorch and in from them
 * without a copy where the memory allows.
 *
 * The structures are DLPack's C ABI as its public header (dlpack.h, 0.x
 * and the "dltensor" capsule protocol of the Python array API) defines
 * them, declared here. Export needs a device whose memory the host
 * addresses (keel_tensor_host_address); import wraps the producer's host
 * memory with keel_tensor_from_host_memory, and the producer's deleter
 * runs when the last keel view of it goes.
 */
#include "_C.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- DLPack's declarations ------------------------------------------------ */

enum { kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3, kDLROCM = 10,
       kDLROCMHost = 11, kDLExtDev = 12 };
enum { kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4, kDLBool = 6 };

typedef struct {
    int32_t device_type;
    int32_t device_id;
} DLDevice;

typedef struct {
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
} DLDataType;

typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides;
    uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

/* DLPack 1.0: the versioned form ("dltensor_versioned" capsules), which
 * can say read-only. NumPy 2 asks for it and treats the legacy form as
 * read-only. */
typedef struct {
    uint32_t major;
    uint32_t minor;
} DLPackVersion;

#define DLPACK_FLAG_BITMASK_READ_ONLY (UINT64_C(1) << 0)

typedef struct DLManagedTensorVersioned {
    DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *self);
    uint64_t flags;
    DLTensor dl_tensor;
} DLManagedTensorVersioned;

/* ---- dtypes ----------------------------------------------------------------- */

static int dl_of_dtype(keel_dtype dt, DLDataType *out)
{
    static const struct { keel_dtype dt; uint8_t code, bits; } map[] = {
        {KEEL_F32, kDLFloat, 32}, {KEEL_F64, kDLFloat, 64},
        {KEEL_F16, kDLFloat, 16}, {KEEL_BF16, kDLBfloat, 16},
        {KEEL_I8, kDLInt, 8},     {KEEL_U8, kDLUInt, 8},
        {KEEL_I32, kDLInt, 32},   {KEEL_I64, kDLInt, 64},
        {KEEL_BOOL, kDLBool, 8},
    };

    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        if (map[i].dt == dt) {
            out->code = map[i].code;
            out->bits = map[i].bits;
            out->lanes = 1;
            return 0;
        }
    return -1;
}

static int dtype_of_dl(DLDataType d, keel_dtype *out)
{
    DLDataType k;

    if (d.lanes != 1)
        return -1;
    for (int dt = 0; dt < KEEL_DTYPE_COUNT_; dt++)
        if (dl_of_dtype((keel_dtype)dt, &k) == 0 && k.code == d.code &&
            k.bits == d.bits) {
            *out = (keel_dtype)dt;
            return 0;
        }
    return -1;
}

/* ---- export ----------------------------------------------------------------- */

/* One exported tensor: the DLPack view and the keel reference that keeps
 * its memory alive. */
struct export_ctx {
    DLManagedTensor managed;            /* legacy form */
    DLManagedTensorVersioned versioned; /* DLPack 1.0 form */
    keel_tensor *ref;
    int64_t shape[KEEL_MAX_DIMS];
    int64_t strides[KEEL_MAX_DIMS];
};

static void export_free(struct export_ctx *c)
{
    keel_tensor_free(c->ref);
    free(c);
}

static void export_deleter(DLManagedTensor *m)
{
    if (m)
        export_free(m->manager_ctx);
}

static void export_deleter_versioned(DLManagedTensorVersioned *m)
{
    if (m)
        export_free(m->manager_ctx);
}

/* A capsule nobody consumed still owns its managed tensor. */
static void capsule_destructor(PyObject *cap)
{
    if (PyCapsule_IsValid(cap, "dltensor")) {
        DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");

        if (m && m->deleter)
            m->deleter(m);
    } else if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
        DLManagedTensorVersioned *m =
            PyCapsule_GetPointer(cap, "dltensor_versioned");

        if (m && m->deleter)
            m->deleter(m);
    }
    /* else consumed ("used_..."): the consumer owns it */
}

/* to_dlpack(tensor, versioned) -> a "dltensor" capsule, or with versioned
 * a "dltensor_versioned" (DLPack 1.0) one, over the tensor's memory. */
static PyObject *m_to_dlpack(PyObject *mod, PyObject *args)
{
    PyObject *obj, *cap;
    int versioned = 0;
    keel_tensor *t;
    struct export_ctx *c;
    DLTensor *d;
    void *addr;
    int nd;

    if (!PyArg_ParseTuple(args, "O|p:to_dlpack", &obj, &versioned))
        return NULL;
    if (!(t = kpy_unwrap(obj, "to_dlpack(x)")))
        return NULL;
    KPY_CHECK(keel_tensor_host_address(t, &addr));
    c = calloc(1, sizeof(*c));
    if (!c)
        return PyErr_NoMemory();
    d = versioned ? &c->versioned.dl_tensor : &c->managed.dl_tensor;
    nd = keel_tensor_ndim(t);
    if (dl_of_dtype(keel_tensor_dtype(t), &d->dtype) < 0) {
        free(c);
        PyErr_Format(PyExc_BufferError, "to_dlpack: dtype %s has no DLPack "
                     "type", keel_dtype_name(keel_tensor_dtype(t)));
        return NULL;
    }
    memcpy(c->shape, keel_tensor_shape(t), (size_t)nd * sizeof(int64_t));
    memcpy(c->strides, keel_tensor_strides(t), (size_t)nd * sizeof(int64_t));
    c->ref = keel_tensor_ref(t);
    d->data = addr;
    d->device.device_type = kDLCPU;
    d->device.device_id = 0;
    d->ndim = nd;
    d->shape = c->shape;
    d->strides = c->strides;
    d->byte_offset = 0;
    if (versioned) {
        c->versioned.version.major = 1;
        c->versioned.version.minor = 0;
        c->versioned.manager_ctx = c;
        c->versioned.deleter = export_deleter_versioned;
        c->versioned.flags = 0; /* writable, not a copy */
        cap = PyCapsule_New(&c->versioned, "dltensor_versioned",
                            capsule_destructor);
    } else {
        c->managed.manager_ctx = c;
        c->managed.deleter = export_deleter;
        cap = PyCapsule_New(&c->managed, "dltensor", capsule_destructor);
    }
    if (!cap)
        export_free(c);
    return cap;
}

/* dlpack_device(tensor) -> (device_type, device_id) as DLPack names them:
 * kDLCPU for memory the host addresses, kDLExtDev otherwise (export then
 * raises, and the caller copies). */
static PyObject *m_dlpack_device(PyObject *mod, PyObject *arg)
{
    keel_tensor *t = kpy_unwrap(arg, "dlpack_device(x)");
    keel_device_props props;
    keel_place pl;

    if (!t)
        return NULL;
    pl = keel_tensor_place(t);
    KPY_CHECK(keel_device_get_props(pl, &props));
    if (props.features & KEEL_FEATURE_HOST_ADDRESSES)
        return Py_BuildValue("(ii)", kDLCPU, 0);
    return Py_BuildValue("(ii)", kDLExtDev, (int)pl.device);
}

/* ---- import ----------------------------------------------------------------- */

/* The producer's deleter, run when the last keel view goes: possibly on
 * another thread, so with the GIL (NumPy's deleter drops a reference). */
static void import_release(void *ctx)
{
    DLManagedTensor *m = ctx;
    PyGILState_STATE g;

    if (!m || !m->deleter || !Py_IsInitialized())
        return; /* interpreter gone: the producer's memory went with it */
    g = PyGILState_Ensure();
    m->deleter(m);
    PyGILState_Release(g);
}

static void import_release_versioned(void *ctx)
{
    DLManagedTensorVersioned *m = ctx;
    PyGILState_STATE g;

    if (!m || !m->deleter || !Py_IsInitialized())
        return;
    g = PyGILState_Ensure();
    m->deleter(m);
    PyGILState_Release(g);
}

/* A keel view of the DLTensor's host memory; NULL with an exception. */
static keel_tensor *wrap_dl(const DLTensor *d, const char *device,
                            keel_host_memory_release_fn release, void *ctx)
{
    keel_dtype dt;
    keel_tensor *view;
    keel_status st;

    if (d->device.device_type != kDLCPU &&
        d->device.device_type != kDLCUDAHost &&
        d->device.device_type != kDLROCMHost) {
        PyErr_Format(PyExc_BufferError,
                     "from_dlpack: memory of DLPack device type %d is not "
                     "host memory; keel takes CPU memory in place (copy it "
                     "to the CPU first)", (int)d->device.device_type);
        return NULL;
    }
    if (dtype_of_dl(d->dtype, &dt) < 0) {
        PyErr_Format(PyExc_BufferError,
                     "from_dlpack: DLPack dtype (code %u, %u bits, %u lanes) "
                     "has no keel dtype", d->dtype.code, d->dtype.bits,
                     d->dtype.lanes);
        return NULL;
    }
    if (d->ndim < 0 || d->ndim > KEEL_MAX_DIMS) {
        PyErr_Format(PyExc_BufferError, "from_dlpack: %d dimensions; keel "
                     "takes at most %d", (int)d->ndim, KEEL_MAX_DIMS);
        return NULL;
    }
    if (d->byte_offset % keel_dtype_size(dt)) {
        PyErr_SetString(PyExc_BufferError, "from_dlpack: byte_offset is not "
                        "a whole number of elements");
        return NULL;
    }
    st = keel_tensor_from_host_memory((char *)d->data + d->byte_offset, dt,
                                      d->ndim, d->shape, d->strides, device,
                                      release, ctx, &view);
    if (st != KEEL_STATUS_OK) {
        kpy_raise(st);
        return NULL;
    }
    return view;
}

/* from_dlpack(capsule, device) -> Tensor over the producer's memory. Both
 * capsule forms; the capsule is marked consumed ("used_...") only when
 * keel has taken it, and keeps its memory otherwise. */
static PyObject *m_from_dlpack(PyObject *mod, PyObject *args)
{
    PyObject *cap;
    const char *device = NULL;
    keel_tensor *t;

    if (!PyArg_ParseTuple(args, "O|z:from_dlpack", &cap, &device))
        return NULL;
    if (PyCapsule_IsValid(cap, "dltensor")) {
        DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");

        if (!m || PyCapsule_SetName(cap, "used_dltensor") < 0)
            return NULL;
        if (m->deleter == export_deleter) {
            /* One of ours coming back: the same storage. */
            t = keel_tensor_ref(((struct export_ctx *)m->manager_ctx)->ref);
            export_deleter(m);
            return kpy_wrap(t);
        }
        if (!(t = wrap_dl(&m->dl_tensor, device, import_release, m))) {
            PyCapsule_SetName(cap, "dltensor");
            return NULL;
        }
        return kpy_wrap(t);
    }
    if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
        DLManagedTensorVersioned *m =
            PyCapsule_GetPointer(cap, "dltensor_versioned");

        if (!m)
            return NULL;
        if (m->version.major != 1) {
            PyErr_Format(PyExc_BufferError, "from_dlpack: DLPack %u.%u; keel "
                         "reads major version 1", m->version.major,
                         m->version.minor);
            return NULL;
        }
        if (m->flags & DLPACK_FLAG_BITMASK_READ_ONLY) {
            PyErr_SetString(PyExc_BufferError,
                            "from_dlpack: the producer's memory is read-only "
                            "and keel tensors are writable; copy it "
                            "(keel.to_tensor)");
            return NULL;
        }
        if (PyCapsule_SetName(cap, "used_dltensor_versioned") < 0)
            return NULL;
        if (m->deleter == export_deleter_versioned) {
            t = keel_tensor_ref(((struct export_ctx *)m->manager_ctx)->ref);
            export_deleter_versioned(m);
            return kpy_wrap(t);
        }
        if (!(t = wrap_dl(&m->dl_tensor, device, import_release_versioned,
                          m))) {
            PyCapsule_SetName(cap, "dltensor_versioned");
            return NULL;
        }
        return kpy_wrap(t);
    }
    PyErr_SetString(PyExc_TypeError,
                    PyCapsule_IsValid(cap, "used_dltensor") ||
                            PyCapsule_IsValid(cap, "used_dltensor_versioned")
                        ? "from_dlpack: this DLPack capsule was already "
                          "consumed"
                        : "from_dlpack: expected a 'dltensor' or "
                          "'dltensor_versioned' capsule (what __dlpack__() "
                          "returns)");
    return NULL;
}

static PyMethodDef dlpack_methods[] = {
    {"to_dlpack", m_to_dlpack, METH_VARARGS, NULL},
    {"dlpack_device", m_dlpack_device, METH_O, NULL},
    {"from_dlpack", m_from_dlpack, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

int kpy_dlpack_init(PyObject *module)
{
    return kpy_add_functions(module, dlpack_methods);
}
