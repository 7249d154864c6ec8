/*
 * keel io — state dicts and the safetensors file format.
 *
 * A state dict is an ordered map from names ("fc1.weight", "bn.running_mean")
 * to tensor references, plus an ordered set of string metadata pairs. It is
 * what layers hand out and take back for checkpoints: the dict holds its own
 * reference to every tensor it stores, so the tensors stay alive as long as
 * the dict does, and setting a name that exists replaces the tensor in place
 * (the order of names does not change).
 *
 * keel_save() writes a state dict as a safetensors file (see docs/io.md):
 *
 *   8 bytes   N, the header length, unsigned little-endian
 *   N bytes   a JSON object, padded with spaces to a multiple of 8 bytes:
 *             {"__metadata__": {"k": "v", ...},               (optional)
 *              "name": {"dtype": "F32", "shape": [2, 3],
 *                       "data_offsets": [begin, end]}, ...}
 *   the rest  the data buffer: every tensor, row-major, little-endian,
 *             packed in dict order; offsets are relative to its start
 *
 * The save is atomic: the bytes go to a temporary file next to the target,
 * which is flushed and fsync'ed before it is renamed over the target, so the
 * path holds either the complete old file or the complete new one.
 *
 * keel_load() validates the whole file before it returns anything: every
 * defect (a short file, a lying header length, bad JSON, an unknown dtype,
 * a byte range that overlaps another or leaves a hole, ...) is reported
 * with KEEL_STATUS_CORRUPT and a message that names the file and what was
 * wrong; system call failures are KEEL_STATUS_IO_ERROR.
 *
 * keel_state_dict_load_into() copies a loaded dict into the existing tensors
 * of another (a model's parameters), checking every name, dtype and shape
 * before it writes anything.
 *
 * keel_npy_save() and keel_npy_load() write and read one tensor as a NumPy
 * .npy file, with the same atomic write and the same complete validation.
 *
 * Not thread-safe: one state dict must not be changed from two threads at
 * once (concurrent reads are fine).
 */
#ifndef KEEL_IO_H
#define KEEL_IO_H

#include <stdbool.h>
#include <stdint.h>

#include <keel/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Longest tensor name a state dict accepts, in bytes. */
#define KEEL_STATE_DICT_NAME_MAX 4095

/** An ordered map name -> tensor, with string metadata. */
typedef struct keel_state_dict keel_state_dict;

/* ---- state dicts -------------------------------------------------------- */

/** New empty state dict. Returns OK, INVALID_ARGUMENT, OUT_OF_MEMORY. */
KEEL_API keel_status keel_state_dict_create(keel_state_dict **out);

/** Free a state dict and drop its tensor references (NULL is a no-op). */
KEEL_API void keel_state_dict_free(keel_state_dict *sd);

/**
 * Store `tensor` under `name`. The dict takes its own reference (the caller
 * keeps, and must still free, its own). An existing entry of that name is
 * replaced where it stands; a new name goes at the end.
 *
 * A name is a non-empty UTF-8 string of at most KEEL_STATE_DICT_NAME_MAX
 * bytes, other than "__metadata__" (reserved by the file format). Returns
 * OK, INVALID_ARGUMENT, OUT_OF_MEMORY.
 */
KEEL_API keel_status keel_state_dict_set(keel_state_dict *sd, const char *name,
                                         keel_tensor *tensor);

/** The tensor stored under `name`, borrowed (valid until the entry is
 *  replaced or removed or the dict freed); NULL when absent. Take a
 *  reference with keel_tensor_ref() to keep it longer. */
KEEL_API keel_tensor *keel_state_dict_get(const keel_state_dict *sd,
                                          const char *name);

/** true when `name` is in the dict. */
KEEL_API bool keel_state_dict_contains(const keel_state_dict *sd,
                                       const char *name);

/** Remove `name` and drop the dict's reference; the entries after it move
 *  up by one. Returns OK, INVALID_ARGUMENT, NOT_FOUND. */
KEEL_API keel_status keel_state_dict_remove(keel_state_dict *sd,
                                            const char *name);

/** Number of entries (0 for NULL). */
KEEL_API int64_t keel_state_dict_count(const keel_state_dict *sd);

/**
 * Entry `index` (0 <= index < count) in order: its name and tensor, both
 * borrowed (either out pointer may be NULL). Returns OK, INVALID_ARGUMENT.
 */
KEEL_API keel_status keel_state_dict_at(const keel_state_dict *sd,
                                        int64_t index, const char **name,
                                        keel_tensor **tensor);

/** Name of entry `index`, borrowed; NULL when out of range. */
KEEL_API const char *keel_state_dict_name(const keel_state_dict *sd,
                                          int64_t index);

/* ---- metadata (the file's "__metadata__" object) ------------------------ */

/** Set metadata `key` (a non-empty UTF-8 string) to `value` (a UTF-8
 *  string, may be empty); replaces an existing key in place, else appends.
 *  Returns OK, INVALID_ARGUMENT, OUT_OF_MEMORY. */
KEEL_API keel_status keel_state_dict_set_metadata(keel_state_dict *sd,
                                                  const char *key,
                                                  const char *value);

/** Value of metadata `key`, borrowed; NULL when absent. */
KEEL_API const char *keel_state_dict_get_metadata(const keel_state_dict *sd,
                                                  const char *key);

/** Number of metadata pairs. */
KEEL_API int64_t keel_state_dict_metadata_count(const keel_state_dict *sd);

/** Metadata pair `index` in order, borrowed. Returns OK, INVALID_ARGUMENT. */
KEEL_API keel_status keel_state_dict_metadata_at(const keel_state_dict *sd,
                                                 int64_t index,
                                                 const char **key,
                                                 const char **value);

/* ---- copying into existing tensors -------------------------------------- */

/**
 * Copy the values of `src` into the tensors of `dst` that have the same
 * names (what a model's set_state_dict does). The tensors of `dst` keep
 * their identity, device and storage; only their elements change. `src`'s
 * tensors may live on any device.
 *
 * Everything is checked before anything is written:
 *   - strict: every name of `dst` must be in `src` (else "missing keys")
 *     and every name of `src` in `dst` (else "unexpected keys"); not
 *     strict: names in only one of them are skipped;
 *   - for every name in both, the dtypes and the shapes must be equal;
 *   - a destination must not have overlapping elements (an expanded view).
 * On any of these errors (INVALID_ARGUMENT, listing the names) no tensor of
 * `dst` has changed. A device failure while copying (DEVICE_ERROR and
 * friends, after the checks) can leave some tensors updated.
 */
KEEL_API keel_status keel_state_dict_load_into(keel_state_dict *dst,
                                               const keel_state_dict *src,
                                               bool strict);

/* ---- files -------------------------------------------------------------- */

/**
 * Write `sd` to `path` as a safetensors file, atomically (temporary file
 * "<path>.tmp.XXXXXX" in the same folder, fwrite, fflush, fsync, fsync of
 * the folder, rename over `path`, fsync of the folder). Tensors may live
 * on any device and be non-contiguous views. On failure the temporary file
 * is removed and a previous file at `path` is left as it was.
 *
 * Returns OK, INVALID_ARGUMENT, OUT_OF_MEMORY, IO_ERROR (the message names
 * the system call, the path and errno's text), or a device error from
 * reading a tensor. One case is special: when the rename succeeded but the
 * final folder fsync failed, the new file is in place and IO_ERROR says so.
 */
KEEL_API keel_status keel_save(const char *path, const keel_state_dict *sd);

/**
 * Read the safetensors file `path` into a new state dict whose tensors live
 * on `device` (NULL: the current device), in the order of their byte
 * ranges in the file (which is the dict order for files keel wrote), with
 * the file's metadata. The file is validated completely; see docs/io.md for
 * the list of checks. Returns OK, INVALID_ARGUMENT, NOT_FOUND (no such
 * file), IO_ERROR, CORRUPT, OUT_OF_MEMORY, or a device error; on failure
 * *out is NULL and nothing is left allocated.
 */
KEEL_API keel_status keel_load(const char *path, const char *device,
                               keel_state_dict **out);

/* ---- .npy files (one tensor, NumPy's format) ---------------------------- */

/**
 * Write tensor `t` (any device, any view; copied to the host) to `path`
 * as a .npy file: format version 1.0 (2.0 when the header would not fit
 * in 65535 bytes), C order, little-endian; the bytes np.save writes for
 * the same array. dtypes: float16/32/64 ('<f2', '<f4', '<f8'), int8
 * ('|i1'), uint8 ('|u1'), int32, int64 ('<i4', '<i8'), bool ('|b1').
 * NumPy has no bfloat16: a bfloat16 tensor is refused with
 * INVALID_ARGUMENT, naming it.
 *
 * Written atomically, as keel_save is: "<path>.tmp.<pid>.XXXXXX" in the
 * same folder, fflush, fsync, rename over `path`; on failure the
 * temporary file is removed and a previous file at `path` is untouched.
 * Returns OK, INVALID_ARGUMENT, OUT_OF_MEMORY, IO_ERROR (the message names
 * the step, the path and errno's text) or a device error from reading t.
 */
KEEL_API keel_status keel_npy_save(const char *path, const keel_tensor *t);

/**
 * Read the .npy file `path` into a new tensor on `device` (NULL: the
 * current device). Reads format versions 1.0, 2.0 and 3.0; descr '<f2',
 * '<f4', '<f8', '|i1', '<i2', '<i4', '<i8', '|u1', '|b1', their '>'
 * (big-endian, swapped on read) forms and '<' / '>' for the one-byte
 * types; int16 ('<i2') becomes an int32 tensor, as keel has no int16.
 * fortran_order True is transposed into C order.
 *
 * Everything is validated before a tensor is made: the magic, the
 * version, the header length within the file, the header's syntax (a
 * Python dict literal with exactly the keys descr, fortran_order and
 * shape, each once), shape entries non-negative integers, at most
 * KEEL_MAX_DIMS of them, the element count and byte size overflow-checked,
 * the data length exactly what the shape needs, bools 0 or 1. A file that
 * fails a check is CORRUPT with a message naming the file and what was
 * wrong. Other returns: INVALID_ARGUMENT (NULL path or out), NOT_FOUND (no
 * such file), IO_ERROR, OUT_OF_MEMORY, a device error; on failure *out is
 * NULL.
 */
KEEL_API keel_status keel_npy_load(const char *path, const char *device,
                                   keel_tensor **out);

#ifdef __cplusplus
}
#endif

#endif /* KEEL_IO_H */
