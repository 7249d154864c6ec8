/*
 * keel device demo: pick devices by name, move data through device memory
 * and sum a vector across every device of a type with an all-reduce.
 *
 *   keel-example-devices [TYPE]      (default: the current device's type)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <keel/runtime.h>

#define N 8
#define MAX_DEV 16

static int fail(const char *what)
{
    fprintf(stderr, "%s failed: %s\n", what, keel_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    char type[64], name[80];
    keel_place places[MAX_DEV];
    keel_communicator *comms[MAX_DEV] = {0};
    keel_dptr bufs[MAX_DEV] = {0};
    keel_comm_id id;
    float host[N], sum[N];
    int ndev, rc = 1;

    if (keel_set_device(argc > 1 ? argv[1] : keel_get_device()) !=
        KEEL_STATUS_OK)
        return fail("keel_set_device");
    snprintf(type, sizeof(type), "%s", keel_get_device());
    if (strchr(type, ':'))
        *strchr(type, ':') = '\0';
    ndev = keel_device_count(type);
    if (ndev > MAX_DEV)
        ndev = MAX_DEV;
    printf("current device %s; %d device(s) of type '%s'\n",
           keel_get_device(), ndev, type);

    /* Device d holds [d+1, d+1, ...]; the sum over devices is known. */
    for (int d = 0; d < ndev; d++) {
        snprintf(name, sizeof(name), "%s:%d", type, d);
        if (keel_place_parse(name, &places[d]) != KEEL_STATUS_OK)
            return fail("keel_place_parse");
        for (int i = 0; i < N; i++)
            host[i] = (float)(d + 1) * (float)(i + 1);
        if (keel_mem_alloc(places[d], sizeof(host), &bufs[d]) ||
            keel_mem_copy_h2d(places[d], bufs[d], host, sizeof(host)))
            return fail("alloc/copy");
        printf("  %s: wrote [%g .. %g]\n", name, host[0], host[N - 1]);
    }

    if (keel_comm_get_unique_id(places[0], &id) != KEEL_STATUS_OK) {
        printf("plugin has no collectives: %s\n", keel_last_error());
        rc = 0;
        goto out;
    }
    keel_group_start(places[0]);
    for (int d = 0; d < ndev; d++)
        if (keel_comm_init_rank(places[d], ndev, &id, d, &comms[d]))
            break;
    if (keel_group_end(places[0]) != KEEL_STATUS_OK)
        goto out_err;
    keel_group_start(places[0]);
    for (int d = 0; d < ndev; d++)
        keel_all_reduce(comms[d], NULL, bufs[d], bufs[d], N, KEEL_F32,
                        KEEL_REDUCE_SUM);
    if (keel_group_end(places[0]) != KEEL_STATUS_OK)
        goto out_err;
    for (int d = 0; d < ndev; d++) {
        if (keel_mem_copy_d2h(places[d], sum, bufs[d], sizeof(sum)))
            goto out_err;
        for (int i = 0; i < N; i++) {
            float want = (float)(ndev * (ndev + 1) / 2) * (float)(i + 1);
            if (sum[i] != want) {
                fprintf(stderr, "device %d element %d: %g, expected %g\n",
                        d, i, sum[i], want);
                goto out;
            }
        }
    }
    printf("all-reduce(sum) over %d device(s): [%g .. %g] on every device, "
           "as expected\n",
           ndev, sum[0], sum[N - 1]);
    rc = 0;
    goto out;
out_err:
    fprintf(stderr, "collective failed: %s\n", keel_last_error());
out:
    for (int d = 0; d < ndev; d++) {
        keel_comm_destroy(comms[d]);
        keel_mem_free(places[d], bufs[d]);
    }
    keel_shutdown();
    return rc;
}
