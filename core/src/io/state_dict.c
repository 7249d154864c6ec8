/*
 * State dicts: an ordered map name -> tensor reference with string metadata,
 * and copying a dict's values into the existing tensors of another.
 *
 * Entries live in an array in insertion order; a small open-addressing hash
 * table of array indices makes lookups O(1), so building or loading a dict
 * of many thousand entries stays linear. Removing an entry shifts the array
 * and rebuilds the table.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <keel/io.h>

#include "tensor/tensor_internal.h"

#define NAME_MAX_BYTES KEEL_STATE_DICT_NAME_MAX
#define RESERVED_NAME "__metadata__"
/* How many names an error message lists before "and N more". */
#define LIST_MAX 8

struct sd_entry {
    char *name;
    keel_tensor *tensor;
};

struct sd_meta {
    char *key;
    char *value;
};

struct keel_state_dict {
    struct sd_entry *entries;
    int64_t count;
    int64_t capacity;
    /* Hash table of entry indices, -1 when empty; size a power of two. */
    int64_t *slots;
    int64_t nslots;
    struct sd_meta *meta;
    int64_t meta_count;
    int64_t meta_capacity;
};

/* ---- helpers ------------------------------------------------------------ */

/* true when s is well-formed UTF-8 (no overlongs, no surrogates). */
static bool utf8_valid(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;

    while (*p) {
        unsigned c = *p;
        int n;
        uint32_t cp;

        if (c < 0x80) {
            p++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            n = 1;
            cp = c & 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
            n = 2;
            cp = c & 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
            n = 3;
            cp = c & 0x07;
        } else {
            return false;
        }
        for (int i = 1; i <= n; i++) {
            if ((p[i] & 0xc0) != 0x80)
                return false;
            cp = (cp << 6) | (p[i] & 0x3f);
        }
        if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) ||
            (n == 3 && cp < 0x10000) || cp > 0x10ffff ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        p += n + 1;
    }
    return true;
}

static uint64_t hash_name(const char *s)
{
    uint64_t h = UINT64_C(0xcbf29ce484222325);

    while (*s) {
        h ^= (unsigned char)*s++;
        h *= UINT64_C(0x100000001b3);
    }
    return h;
}

/* Slot holding `name`, or the empty slot where it would go. */
static int64_t find_slot(const keel_state_dict *sd, const char *name)
{
    uint64_t mask = (uint64_t)sd->nslots - 1;
    uint64_t i = hash_name(name) & mask;

    for (;;) {
        int64_t e = sd->slots[i];

        if (e < 0 || !strcmp(sd->entries[e].name, name))
            return (int64_t)i;
        i = (i + 1) & mask;
    }
}

static int64_t find_entry(const keel_state_dict *sd, const char *name)
{
    if (!sd || !name || !sd->nslots)
        return -1;
    return sd->slots[find_slot(sd, name)];
}

/* Rebuild the table with room for at least `want` entries at load <= 1/2. */
static keel_status rehash(keel_state_dict *sd, int64_t want)
{
    int64_t n = 16;
    int64_t *slots;

    while (n < 2 * want)
        n *= 2;
    slots = malloc((size_t)n * sizeof(*slots));
    if (!slots)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "state dict: out of host memory for %lld entries",
                           (long long)want);
    free(sd->slots);
    sd->slots = slots;
    sd->nslots = n;
    for (int64_t i = 0; i < n; i++)
        slots[i] = -1;
    for (int64_t e = 0; e < sd->count; e++)
        slots[find_slot(sd, sd->entries[e].name)] = e;
    return KEEL_STATUS_OK;
}

static keel_status check_name(const char *what, const char *name)
{
    size_t len;

    if (!name)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT, "%s: name is NULL",
                           what);
    len = strlen(name);
    if (!len)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: the name is empty", what);
    if (len > NAME_MAX_BYTES)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: name '%.40s...' is %zu bytes long, the limit "
                           "is %d",
                           what, name, len, NAME_MAX_BYTES);
    if (!strcmp(name, RESERVED_NAME))
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: the name '%s' is reserved for the file "
                           "format's metadata",
                           what, RESERVED_NAME);
    if (!utf8_valid(name))
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: name '%s' is not valid UTF-8", what, name);
    return KEEL_STATUS_OK;
}

/* ---- lifetime ----------------------------------------------------------- */

keel_status keel_state_dict_create(keel_state_dict **out)
{
    keel_state_dict *sd;

    if (!out)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_state_dict_create: out is NULL");
    *out = NULL;
    sd = calloc(1, sizeof(*sd));
    if (!sd)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "keel_state_dict_create: out of host memory");
    *out = sd;
    return KEEL_STATUS_OK;
}

void keel_state_dict_free(keel_state_dict *sd)
{
    if (!sd)
        return;
    for (int64_t i = 0; i < sd->count; i++) {
        free(sd->entries[i].name);
        keel_tensor_free(sd->entries[i].tensor);
    }
    for (int64_t i = 0; i < sd->meta_count; i++) {
        free(sd->meta[i].key);
        free(sd->meta[i].value);
    }
    free(sd->entries);
    free(sd->slots);
    free(sd->meta);
    free(sd);
}

/* ---- entries ------------------------------------------------------------ */

keel_status keel_state_dict_set(keel_state_dict *sd, const char *name,
                                keel_tensor *tensor)
{
    static const char what[] = "keel_state_dict_set";
    int64_t e;
    char *copy;
    keel_status st;

    if (!sd || !tensor)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT, "%s: %s is NULL",
                           what, sd ? "tensor" : "state dict");
    st = check_name(what, name);
    if (st != KEEL_STATUS_OK)
        return st;
    e = find_entry(sd, name);
    if (e >= 0) {
        keel_tensor *old = sd->entries[e].tensor;

        sd->entries[e].tensor = keel_tensor_ref(tensor);
        keel_tensor_free(old);
        return KEEL_STATUS_OK;
    }
    if (sd->count == sd->capacity) {
        int64_t cap = sd->capacity ? 2 * sd->capacity : 16;
        struct sd_entry *grown;

        grown = realloc(sd->entries, (size_t)cap * sizeof(*grown));
        if (!grown)
            return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                               "%s: out of host memory for entry '%s'", what,
                               name);
        sd->entries = grown;
        sd->capacity = cap;
    }
    if (2 * (sd->count + 1) > sd->nslots) {
        st = rehash(sd, sd->count + 1);
        if (st != KEEL_STATUS_OK)
            return st;
    }
    copy = keel__strdup(name);
    if (!copy)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "%s: out of host memory for entry '%s'", what,
                           name);
    sd->entries[sd->count].name = copy;
    sd->entries[sd->count].tensor = keel_tensor_ref(tensor);
    sd->slots[find_slot(sd, copy)] = sd->count;
    sd->count++;
    return KEEL_STATUS_OK;
}

keel_tensor *keel_state_dict_get(const keel_state_dict *sd, const char *name)
{
    int64_t e = find_entry(sd, name);

    return e >= 0 ? sd->entries[e].tensor : NULL;
}

bool keel_state_dict_contains(const keel_state_dict *sd, const char *name)
{
    return find_entry(sd, name) >= 0;
}

keel_status keel_state_dict_remove(keel_state_dict *sd, const char *name)
{
    int64_t e;

    if (!sd || !name)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_state_dict_remove: %s is NULL",
                           sd ? "name" : "state dict");
    e = find_entry(sd, name);
    if (e < 0)
        return keel__error(KEEL_STATUS_NOT_FOUND,
                           "keel_state_dict_remove: no entry named '%s'",
                           name);
    free(sd->entries[e].name);
    keel_tensor_free(sd->entries[e].tensor);
    memmove(&sd->entries[e], &sd->entries[e + 1],
            (size_t)(sd->count - e - 1) * sizeof(sd->entries[0]));
    sd->count--;
    /* Rebuilding at the same size cannot fail: reuse the table in place. */
    for (int64_t i = 0; i < sd->nslots; i++)
        sd->slots[i] = -1;
    for (int64_t i = 0; i < sd->count; i++)
        sd->slots[find_slot(sd, sd->entries[i].name)] = i;
    return KEEL_STATUS_OK;
}

int64_t keel_state_dict_count(const keel_state_dict *sd)
{
    return sd ? sd->count : 0;
}

keel_status keel_state_dict_at(const keel_state_dict *sd, int64_t index,
                               const char **name, keel_tensor **tensor)
{
    if (!sd)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_state_dict_at: state dict is NULL");
    if (index < 0 || index >= sd->count)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_state_dict_at: index %lld is outside "
                           "[0, %lld)",
                           (long long)index, (long long)sd->count);
    if (name)
        *name = sd->entries[index].name;
    if (tensor)
        *tensor = sd->entries[index].tensor;
    return KEEL_STATUS_OK;
}

const char *keel_state_dict_name(const keel_state_dict *sd, int64_t index)
{
    if (!sd || index < 0 || index >= sd->count)
        return NULL;
    return sd->entries[index].name;
}

/* ---- metadata ----------------------------------------------------------- */

static int64_t find_meta(const keel_state_dict *sd, const char *key)
{
    for (int64_t i = 0; sd && key && i < sd->meta_count; i++)
        if (!strcmp(sd->meta[i].key, key))
            return i;
    return -1;
}

keel_status keel_state_dict_set_metadata(keel_state_dict *sd, const char *key,
                                         const char *value)
{
    static const char what[] = "keel_state_dict_set_metadata";
    char *v, *k = NULL;
    int64_t i;

    if (!sd || !key || !value)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT, "%s: %s is NULL",
                           what, !sd ? "state dict" : !key ? "key" : "value");
    if (!*key)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: the key is empty", what);
    if (!utf8_valid(key) || !utf8_valid(value))
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: the %s of metadata '%s' is not valid UTF-8",
                           what, utf8_valid(key) ? "value" : "key", key);
    i = find_meta(sd, key);
    v = keel__strdup(value);
    if (i < 0)
        k = keel__strdup(key);
    if (!v || (i < 0 && !k))
        goto oom;
    if (i >= 0) {
        free(sd->meta[i].value);
        sd->meta[i].value = v;
        return KEEL_STATUS_OK;
    }
    if (sd->meta_count == sd->meta_capacity) {
        int64_t cap = sd->meta_capacity ? 2 * sd->meta_capacity : 8;
        struct sd_meta *grown = realloc(sd->meta, (size_t)cap * sizeof(*grown));

        if (!grown)
            goto oom;
        sd->meta = grown;
        sd->meta_capacity = cap;
    }
    sd->meta[sd->meta_count].key = k;
    sd->meta[sd->meta_count].value = v;
    sd->meta_count++;
    return KEEL_STATUS_OK;
oom:
    free(k);
    free(v);
    return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                       "%s: out of host memory for metadata '%s'", what, key);
}

const char *keel_state_dict_get_metadata(const keel_state_dict *sd,
                                         const char *key)
{
    int64_t i = find_meta(sd, key);

    return i >= 0 ? sd->meta[i].value : NULL;
}

int64_t keel_state_dict_metadata_count(const keel_state_dict *sd)
{
    return sd ? sd->meta_count : 0;
}

keel_status keel_state_dict_metadata_at(const keel_state_dict *sd,
                                        int64_t index, const char **key,
                                        const char **value)
{
    if (!sd)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_state_dict_metadata_at: state dict is NULL");
    if (index < 0 || index >= sd->meta_count)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_state_dict_metadata_at: index %lld is "
                           "outside [0, %lld)",
                           (long long)index, (long long)sd->meta_count);
    if (key)
        *key = sd->meta[index].key;
    if (value)
        *value = sd->meta[index].value;
    return KEEL_STATUS_OK;
}

/* ---- load_into ---------------------------------------------------------- */

/* A growing message buffer that never fails (it truncates). */
struct msg {
    char buf[1536];
    size_t len;
};

static void msg_add(struct msg *m, const char *fmt, ...) KEEL_PRINTF(2, 3);

static void msg_add(struct msg *m, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (m->len >= sizeof(m->buf) - 1)
        return;
    va_start(ap, fmt);
    n = vsnprintf(m->buf + m->len, sizeof(m->buf) - m->len, fmt, ap);
    va_end(ap);
    if (n > 0)
        m->len += (size_t)n;
    if (m->len >= sizeof(m->buf))
        m->len = sizeof(m->buf) - 1;
}

/* Append "N <what> (<where>): 'a', 'b', ..." for names of `a` not in `b`;
 * returns how many there were. */
static int64_t list_absent(struct msg *m, const keel_state_dict *a,
                           const keel_state_dict *b, const char *what,
                           const char *where)
{
    int64_t n = 0, shown = 0;

    for (int64_t i = 0; i < a->count; i++)
        n += find_entry(b, a->entries[i].name) < 0;
    if (!n)
        return 0;
    msg_add(m, "%s%lld %s%s (%s):", m->len ? "; " : "", (long long)n, what,
            n == 1 ? "" : "s", where);
    for (int64_t i = 0; i < a->count && shown < LIST_MAX; i++)
        if (find_entry(b, a->entries[i].name) < 0)
            msg_add(m, "%s '%s'", shown++ ? "," : "", a->entries[i].name);
    if (n > shown)
        msg_add(m, " and %lld more", (long long)(n - shown));
    return n;
}

static bool same_shape(const keel_tensor *a, const keel_tensor *b)
{
    if (a->ndim != b->ndim)
        return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i])
            return false;
    return true;
}

/* true when two index tuples of t reach the same element. */
static bool self_overlapping(const keel_tensor *t)
{
    int64_t span = 1, numel = keel__numel(t->ndim, t->shape);
    int order[KEEL_MAX_DIMS];
    int n = 0;

    if (numel <= 1)
        return false;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] == 1)
            continue;
        if (t->strides[i] == 0)
            return true;
        order[n++] = i;
    }
    /* Sort the remaining axes by |stride| and require each stride to step
     * past everything the smaller axes span. */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0; j--) {
            int64_t sa = llabs(t->strides[order[j - 1]]);
            int64_t sb = llabs(t->strides[order[j]]);
            int tmp;

            if (sa <= sb)
                break;
            tmp = order[j];
            order[j] = order[j - 1];
            order[j - 1] = tmp;
        }
    for (int i = 0; i < n; i++) {
        int64_t s = llabs(t->strides[order[i]]);

        if (s < span)
            return true;
        span = s * t->shape[order[i]];
    }
    return false;
}

/* Check names, dtypes, shapes and destinations; nothing is written. */
static keel_status load_into_check(const keel_state_dict *dst,
                                   const keel_state_dict *src, bool strict)
{
    static const char what[] = "keel_state_dict_load_into";
    struct msg m = {.len = 0};
    int64_t bad = 0, shown = 0;

    if (strict) {
        int64_t missing, unexpected;

        missing = list_absent(&m, dst, src, "missing key",
                              "in the destination, not in the source");
        unexpected = list_absent(&m, src, dst, "unexpected key",
                                 "in the source, not in the destination");
        if (missing || unexpected)
            return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                               "%s (strict): %s; nothing was copied", what,
                               m.buf);
    }
    for (int64_t i = 0; i < dst->count; i++) {
        const keel_tensor *d = dst->entries[i].tensor;
        const keel_tensor *s = keel_state_dict_get(src, dst->entries[i].name);
        char a[160], b[160];

        if (!s)
            continue;
        if (d->dtype == s->dtype && same_shape(d, s) && !self_overlapping(d))
            continue;
        bad++;
        if (shown >= LIST_MAX)
            continue;
        shown++;
        keel__tensor_str(d, a, sizeof(a));
        keel__tensor_str(s, b, sizeof(b));
        if (d->dtype != s->dtype)
            msg_add(&m, "%sdtype mismatch for '%s': destination %s, "
                    "source %s", m.len ? "; " : "",
                    dst->entries[i].name, a, b);
        else if (!same_shape(d, s))
            msg_add(&m, "%sshape mismatch for '%s': destination %s, "
                    "source %s", m.len ? "; " : "",
                    dst->entries[i].name, a, b);
        else
            msg_add(&m, "%sdestination '%s' (%s) has overlapping elements "
                    "(an expanded view) and cannot be written",
                    m.len ? "; " : "", dst->entries[i].name, a);
    }
    if (bad > shown)
        msg_add(&m, "; and %lld more", (long long)(bad - shown));
    if (bad)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: %s; nothing was copied", what, m.buf);
    return KEEL_STATUS_OK;
}

/* Write the row-major host bytes `host` into the strided tensor d, one
 * contiguous run at a time. */
static keel_status write_strided(keel_tensor *d, const unsigned char *host)
{
    size_t es = keel_dtype_size(d->dtype);
    int64_t idx[KEEL_MAX_DIMS] = {0};
    int64_t numel = keel__numel(d->ndim, d->shape);
    int64_t run = 1;
    int last = d->ndim - 1;
    keel_tensor_desc desc;
    keel_status st = KEEL_STATUS_OK;

    keel__desc(d, &desc);
    if (last >= 0 && d->strides[last] == 1)
        run = d->shape[last];
    for (int64_t done = 0; done < numel && st == KEEL_STATUS_OK;
         done += run) {
        int64_t off = 0;

        for (int i = 0; i < d->ndim; i++)
            off += idx[i] * d->strides[i];
        st = keel_mem_copy_h2d(d->storage->place,
                               desc.data + (keel_dptr)(off * (int64_t)es),
                               host + done * (int64_t)es,
                               (uint64_t)run * es);
        /* Advance the index by `run` elements (run is 1 or a whole row). */
        for (int i = run > 1 ? last - 1 : last; i >= 0; i--) {
            if (++idx[i] < d->shape[i])
                break;
            idx[i] = 0;
        }
    }
    return st;
}

/*
 * One destination's new value, staged before anything is written: either a
 * contiguous tensor on the destination's own device (written with one
 * device-to-device copy) or the row-major bytes in host memory (written
 * with host-to-device copies). Both writes allocate nothing, so once every
 * entry is staged the only way left to fail is the device copy itself.
 */
struct stage {
    keel_tensor *dst;
    keel_tensor *dev;
    unsigned char *host;
    uint64_t bytes;
    const char *name;
};

static bool same_place(const keel_tensor *a, const keel_tensor *b)
{
    return a->storage->place.plugin == b->storage->place.plugin &&
           a->storage->place.device == b->storage->place.device;
}

static keel_status stage_one(struct stage *sg, keel_tensor *d,
                             const keel_tensor *s, const char *name)
{
    char cause[512];
    keel_status st;

    sg->dst = d;
    sg->name = name;
    sg->bytes = (uint64_t)keel__numel(d->ndim, d->shape) *
                keel_dtype_size(d->dtype);
    if (!sg->bytes)
        return KEEL_STATUS_OK;
    if (keel_tensor_is_contiguous(d) && same_place(d, s)) {
        st = keel_contiguous(s, &sg->dev);
        if (st == KEEL_STATUS_OK)
            return KEEL_STATUS_OK;
    } else {
        sg->host = malloc(sg->bytes);
        if (!sg->host)
            return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                               "keel_state_dict_load_into: out of host "
                               "memory staging '%s' (%llu bytes); nothing "
                               "was copied", name,
                               (unsigned long long)sg->bytes);
        st = keel_tensor_to_host(s, sg->host, sg->bytes);
        if (st == KEEL_STATUS_OK)
            return KEEL_STATUS_OK;
    }
    snprintf(cause, sizeof(cause), "%s", keel_last_error());
    return keel__error(st, "keel_state_dict_load_into: staging '%s' failed: "
                       "%s; nothing was copied", name, cause);
}

static keel_status write_values(const struct stage *sg)
{
    keel_tensor *d = sg->dst;
    keel_tensor_desc dd, sd;

    keel__desc(d, &dd);
    if (sg->dev) {
        keel__desc(sg->dev, &sd);
        return keel_mem_copy_d2d(d->storage->place, dd.data, sd.data,
                                 sg->bytes);
    }
    if (keel_tensor_is_contiguous(d))
        return keel_mem_copy_h2d(d->storage->place, dd.data, sg->host,
                                 sg->bytes);
    return write_strided(d, sg->host);
}

/* Write one entry; its storage gets a new version, as any in-place write
 * does, so a graph that saved the old values refuses to run backward. */
static keel_status write_one(const struct stage *sg)
{
    keel_status st;

    if (!sg->bytes)
        return KEEL_STATUS_OK;
    st = write_values(sg);
    if (st == KEEL_STATUS_OK)
        atomic_fetch_add(&sg->dst->storage->version, 1);
    return st;
}

static void stages_free(struct stage *sg, int64_t n)
{
    for (int64_t i = 0; sg && i < n; i++) {
        keel_tensor_free(sg[i].dev);
        free(sg[i].host);
    }
    free(sg);
}

keel_status keel_state_dict_load_into(keel_state_dict *dst,
                                      const keel_state_dict *src, bool strict)
{
    struct stage *sg = NULL;
    int64_t n = 0;
    keel_status st;

    if (!dst || !src)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_state_dict_load_into: %s is NULL",
                           dst ? "source" : "destination");
    st = load_into_check(dst, src, strict);
    if (st != KEEL_STATUS_OK)
        return st;
    /* Stage every new value first: running out of memory (host or
     * device), or a source that cannot be read, leaves dst untouched. */
    sg = calloc((size_t)dst->count + 1, sizeof(*sg));
    if (!sg)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "keel_state_dict_load_into: out of host memory "
                           "for %lld entries; nothing was copied",
                           (long long)dst->count);
    for (int64_t i = 0; i < dst->count; i++) {
        keel_tensor *d = dst->entries[i].tensor;
        const keel_tensor *s = keel_state_dict_get(src, dst->entries[i].name);

        if (!s || s == d)
            continue;
        st = stage_one(&sg[n], d, s, dst->entries[i].name);
        n++;
        if (st != KEEL_STATUS_OK)
            goto out;
    }
    for (int64_t i = 0; i < n; i++) {
        st = write_one(&sg[i]);
        if (st != KEEL_STATUS_OK) {
            char cause[512];

            snprintf(cause, sizeof(cause), "%s", keel_last_error());
            st = keel__error(st, "keel_state_dict_load_into: the device copy "
                             "into '%s' failed after every entry was staged; "
                             "%lld earlier entr%s already updated: %s",
                             sg[i].name, (long long)i,
                             i == 1 ? "y is" : "ies are", cause);
            goto out;
        }
    }
out:
    stages_free(sg, n);
    return st;
}
