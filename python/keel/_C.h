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

#endif /* KEEL_PY_C_H */
