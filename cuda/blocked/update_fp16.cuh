// update_fp16.cuh - update.cu's entry to the FP16 update (update_fp16.cu).
#pragma once

#include <stdint.h>

// Whether the FP16 update takes a piece of these sizes and alignments (w 33..64; rows, leading dimensions and strides
// multiples of four floats; 16-byte aligned pointers).
bool qr2_update_fp16_holds(int mr, int w, int64_t ldv, int64_t v_bs, int64_t ldc, int64_t c_bs, const float* v,
                           const float* c);
// The update of every (matrix, 64-column strip), one launch: see fp16_update_kernel.
int qr2_update_fp16_run(int64_t batch, int mr, int w, int nc, const float* v, int64_t ldv, int64_t v_bs,
                        const float* t, int64_t t_rs, int64_t t_cs, int64_t t_bs, float* c, int64_t ldc, int64_t c_bs,
                        const int* scale_exp, int64_t scale_bs, const int* zero_from, int col0, const float* cf,
                        int64_t cf_rs, int64_t cf_bs, void* stream);
