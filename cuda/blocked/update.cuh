// update.cuh - the compact-WY update's types (update.cu): one update's arguments, the split update's parts and
// workspace.
#pragma once

#include <stdint.h>

#include "qr2_cuda.h"

// Matrix b's columns of C from zero_from[b] - col0 on are exactly zero (qr2_update_args), or zero_from is null: the
// update leaves their strips alone, since Q^T keeps a zero column zero.
struct WyTail {
    const int* zero_from;
    int col0;
    __device__ bool zero(int64_t b, int j0) const { return zero_from && col0 + j0 >= zero_from[b]; }
};

// One update's geometry (see qr2_update_args), for a block of w <= 64 reflectors.
struct WyArgs {
    int64_t batch;
    int mr, w, nc;
    const float* v;
    int64_t ldv, v_bs;
    const float* t;
    int64_t t_rs, t_cs, t_bs;  // T(r, c) at t[r t_rs + c t_cs]: T, or T^T to apply Q instead of Q^T
    bool t_lower;              // whether that is T^T
    float* c;
    int64_t ldc, c_bs;
    const float* cf;  // where C's entries are read (row-major, see qr2_update_args.c_from), or nullptr: in c
    int64_t cf_rs, cf_bs;
    WyTail tail;
};

// What one launch of an update kernel does. whole: all of the update for a block's strip. Where strips alone leave
// SMs idle (a few large matrices), the rows are split over blocks in three launches: partial_w (W_s = V_s^T C_s over
// a block's rows, stored with a power-of-two scale per column), wy_reduce_kernel (W' = -T^T sum_s W_s, each column
// normalised by a power of two 2^-E_j), apply (C_s += V_s W' 2^E over a block's rows).
enum class WyPart { whole, partial_w, apply };

// Where the split update keeps its partial W's, their scales, W' and its scales: for item (matrix, strip) =
// b strips + strip and split s, W_s at part + (item splits + s) WMAX NT (W(k, j) at j WMAX + k), the scale exponent
// of its column j at scale[(item splits + s) NT + j] (the true W_s(k, j) is the stored one times 2^scale; SCALE_ZERO:
// the column is exactly zero); W' at wq + item WMAX NT, the exponent of its column j at e_of[item NT + j] (likewise).
// NT = 64 wherever rows are split.
struct WySplitWork {
    float* part;
    int* scale;
    float* wq;
    int* e_of;
};
