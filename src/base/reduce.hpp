// The element-wise reductions behind every CPU collective: combine N equally long buffers into
// one, in a fixed order, for every Loom data type and op.
#pragma once

#include <cstddef>

#include "loom/loom.h"

namespace loom {

// dst[i] = srcs[0][i] op srcs[1][i] op ... op srcs[nsrc-1][i], combined strictly in source order,
// so floating-point results are bit-exact and reproducible.
//
// op: loomSum, loomProd, loomMax or loomMin. Average is Sum followed by divideInPlace (or use
// reduceManyAndScale). Max and Min of floats propagate NaN; between equal values (+0 and -0) the
// earlier source wins.
//
// accum picks the accumulation type of fp16/bf16/fp8 data:
//   accum < 0 or accum == dtype: native; the running value is rounded to dtype after every step,
//     exactly as a chain of pairwise reductions in dtype (each step computed in float).
//   loomFloat16: the running value is rounded to fp16 after every step; dtype once at the end.
//   loomFloat32 / loomFloat64: accumulate in that type; round to dtype once at the end.
// Any other accum throws loomInvalidArgument for those types. For integer types and fp32/fp64
// accum is ignored: native arithmetic, integers wrapping like unsigned two's complement.
//
// dst may be one of the srcs (in place) or not overlap any of them; partial overlap is not
// supported. nsrc >= 1; nsrc == 1 copies. No allocation.
void reduceMany(void* dst, const void* const* srcs, int nsrc, size_t count, loomDataType_t dtype,
                loomRedOp_t op, int accum);

// Average's final step: dst[i] = dst[i] / divisor in the type's arithmetic. Integers use C++
// truncating division; floats divide in float (double for fp64), narrow floats then round to
// dtype. divisor >= 1.
void divideInPlace(void* dst, size_t count, loomDataType_t dtype, int divisor);

// reduceMany then divideInPlace, in one pass over memory. With a wider accum for a narrow dtype,
// the division happens in the accum type, before the single final rounding.
void reduceManyAndScale(void* dst, const void* const* srcs, int nsrc, size_t count,
                        loomDataType_t dtype, loomRedOp_t op, int accum, int divisor);

}  // namespace loom
