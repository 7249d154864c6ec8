/*
 * keel GPU kernels — device-wide radix sorts: CUB in the CUDA build,
 * rocPRIM (Debian's librocprim-dev) in the HIP build.
 *
 * The two libraries take the same arguments in the same order (temporary
 * storage and its size, key and value arrays in and out, the item count,
 * the bit range, the stream; a first call with tmp == NULL only sizes the
 * temporary storage), so each wrapper is one forwarding call. Keys are
 * unsigned integers the callers have made order-preserving; the bit range
 * [b0, b1) limits the passes to the bits that vary.
 */
#ifndef KEEL_GPU_CK_SORT_CUH
#define KEEL_GPU_CK_SORT_CUH

#ifdef KEEL_GPU_HIP
#include <rocprim/device/device_radix_sort.hpp>
#include <rocprim/device/device_segmented_radix_sort.hpp>
#else
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>
#endif

#include "keel_gpu.h"

namespace cks {

template <class K, class V>
cudaError_t sort_pairs(void *tmp, size_t &bytes, const K *ki, K *ko,
                       const V *vi, V *vo, int n, int b0, int b1,
                       cudaStream_t s)
{
#ifdef KEEL_GPU_HIP
    return rocprim::radix_sort_pairs(tmp, bytes, ki, ko, vi, vo, (size_t)n,
                                     (unsigned)b0, (unsigned)b1, s);
#else
    return cub::DeviceRadixSort::SortPairs(tmp, bytes, ki, ko, vi, vo, n, b0,
                                           b1, s);
#endif
}

template <class K>
cudaError_t sort_keys(void *tmp, size_t &bytes, const K *ki, K *ko, int n,
                      int b0, int b1, cudaStream_t s)
{
#ifdef KEEL_GPU_HIP
    return rocprim::radix_sort_keys(tmp, bytes, ki, ko, (size_t)n,
                                    (unsigned)b0, (unsigned)b1, s);
#else
    return cub::DeviceRadixSort::SortKeys(tmp, bytes, ki, ko, n, b0, b1, s);
#endif
}

/* nseg segments, segment i = [begin[i], end[i]) of the n items. */
template <class K, class V, class O>
cudaError_t seg_sort_pairs(void *tmp, size_t &bytes, const K *ki, K *ko,
                           const V *vi, V *vo, int n, int nseg, O begin,
                           O end, int b0, int b1, cudaStream_t s)
{
#ifdef KEEL_GPU_HIP
    return rocprim::segmented_radix_sort_pairs(
        tmp, bytes, ki, ko, vi, vo, (unsigned)n, (unsigned)nseg, begin, end,
        (unsigned)b0, (unsigned)b1, s);
#else
    return cub::DeviceSegmentedRadixSort::SortPairs(
        tmp, bytes, ki, ko, vi, vo, n, nseg, begin, end, b0, b1, s);
#endif
}

template <class K, class O>
cudaError_t seg_sort_keys(void *tmp, size_t &bytes, const K *ki, K *ko, int n,
                          int nseg, O begin, O end, int b0, int b1,
                          cudaStream_t s)
{
#ifdef KEEL_GPU_HIP
    return rocprim::segmented_radix_sort_keys(
        tmp, bytes, ki, ko, (unsigned)n, (unsigned)nseg, begin, end,
        (unsigned)b0, (unsigned)b1, s);
#else
    return cub::DeviceSegmentedRadixSort::SortKeys(tmp, bytes, ki, ko, n,
                                                   nseg, begin, end, b0, b1,
                                                   s);
#endif
}

} // namespace cks

#endif /* KEEL_GPU_CK_SORT_CUH */
