// library_stubs.cuh - what the benches' kernel files call in the library (cuda/device.cu, cuda/launch.cu), printing
// instead: the error recorders, and a launch replay that the benches never ask for.
#pragma once

#include <cstdio>

#include "launch.cuh"

int qr2_record_error(const char* what, const char* detail) {
    fprintf(stderr, "%s: %s\n", what, detail);
    return 1;
}
int qr2_record_cuda_error(cudaError_t err, const char* what) {
    fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(err));
    return 1;
}
int qr2_replay_launch(const void*, dim3, dim3, size_t, void*, void**, const char* what) {
    return qr2_record_error(what, "no launch replay in the benches");
}
