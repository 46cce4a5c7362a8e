/*
 * householder_op.h - the qr2::orgqr and qr2::ormqr operators (householder_op.c).
 */
#ifndef QR2_HOUSEHOLDER_OP_H
#define QR2_HOUSEHOLDER_OP_H

#include "torch_abi.h"

/* Defines the operators' schemas in lib_def and registers their kernels; NULL on success, else the failing step. */
const char* qr2_householder_register(TorchLibraryHandle lib_def, TorchLibraryHandle lib_cpu, TorchLibraryHandle lib_cuda,
                                     TorchLibraryHandle lib_autograd);

#endif /* QR2_HOUSEHOLDER_OP_H */
