/*
 * What the files of keel._C share: making and reading keel.Tensor
 * objects, and raising keel's errors.
 */
#ifndef KEEL_PY_C_H
#define KEEL_PY_C_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <keel/runtime.h>
#include <keel/tensor.h>

/** A new keel.Tensor owning the reference t (freed on failure); None for
 *  a NULL t. */
PyObject *kpy_wrap(keel_tensor *t);
/** The tensor of a keel.Tensor (borrowed), or NULL with a TypeError
 *  naming `what`. */
keel_tensor *kpy_unwrap(PyObject *o, const char *what);
/** A sequence of at most `max` integers into v (its count), or -1 with
 *  an exception naming `what`. */
int kpy_int64s(PyObject *obj, int64_t *v, int max, const char *what);
/** Register [(name, Tensor)] with a C layer as parameters (or buffers);
 *  '.' in names becomes '/' (C layer names hold no dots). 0, or -1 with
 *  an exception. */
struct keel_layer;
int kpy_layer_add_named(struct keel_layer *l, PyObject *pairs, int buffers);
/** A LayerHandle owning layer l (freed on failure), and the layer of a
 *  LayerHandle (NULL with a TypeError). */
PyObject *kpy_layer_new(struct keel_layer *l);
struct keel_layer *kpy_layer_of(PyObject *o);

/** Raise keel's last error for status st; returns NULL. */
PyObject *kpy_raise(keel_status st);

#define KPY_CHECK(call)                                                      \
    do {                                                                     \
        keel_status st_ = (call);                                            \
        if (st_ != KEEL_STATUS_OK)                                           \
            return kpy_raise(st_);                                           \
    } while (0)

/** Add the functions of a NULL-terminated table to the module. */
int kpy_add_functions(PyObject *module, PyMethodDef *defs);

/** Add the nn and optimizer objects and functions (_C_nn.c). */
int kpy_nn_init(PyObject *module);
/** Add the dist functions (_C_dist.c). */
int kpy_dist_init(PyObject *module);
/** Add the jit and inference functions (_C_jit.c). */
int kpy_jit_init(PyObject *module);
/** Add the DLPack functions (_C_dlpack.c). */
int kpy_dlpack_init(PyObject *module);

#endif /* KEEL_PY_C_H */
