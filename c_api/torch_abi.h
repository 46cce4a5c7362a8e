/*
 * torch_abi.h - the part of PyTorch's stable C ABI that qr2 uses, declared in C.
 *
 * Torch's own shim headers are C++ only (alias declarations, namespaces), so the
 * dispatch layer declares the handful of types and functions it calls here. Each
 * prototype is a copy of the one in torch 2.11's headers:
 *   torch/csrc/inductor/aoti_torch/c/shim.h   (aoti_torch_*)
 *   torch/csrc/stable/c/shim.h                (torch_*, 2.10+)
 * tests/test_torch_abi.py compiles this header as strict C11 and again as C++
 * together with torch's real headers: any drifted prototype is a hard error there.
 *
 * Ownership (torch's stack convention): tensor handles passed to a boxed kernel
 * are owned by the kernel; handles it stores as returns are owned by torch;
 * torch_call_dispatcher steals the handles on its stack and returns new ones.
 */
#ifndef QR2_TORCH_ABI_H
#define QR2_TORCH_ABI_H

#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct AtenTensorOpaque* AtenTensorHandle;
typedef struct TorchLibraryOpaque* TorchLibraryHandle;
typedef struct CUDAGuardOpaque* CUDAGuardHandle;
typedef int32_t AOTITorchError;
typedef uint64_t StableIValue;

/* The torch release qr2 is written against (TORCH_ABI_VERSION encoding). */
#define QR2_TORCH_ABI_2_11 0x020B000000000000ULL

/* --- library and operator registration (libtorch_cpu) --- */
AOTITorchError aoti_torch_library_init_def(const char* ns, const char* file, uint32_t line,
                                           TorchLibraryHandle* ret_new_torch_lib);
AOTITorchError aoti_torch_library_init_impl(const char* ns, const char* k, const char* file,
                                            uint32_t line, TorchLibraryHandle* ret_new_torch_lib);
AOTITorchError aoti_torch_library_def(TorchLibraryHandle self, const char* schema);
AOTITorchError torch_library_impl(TorchLibraryHandle self, const char* name,
                                  void (*fn)(StableIValue*, uint64_t, uint64_t),
                                  uint64_t extension_build_version);
AOTITorchError torch_call_dispatcher(const char* opName, const char* overloadName,
                                     StableIValue* stack, uint64_t extension_build_version);
uint64_t aoti_torch_abi_version(void);
void aoti_torch_check(bool cond, const char* func, const char* file, uint32_t line,
                      const char* msg);

/* --- dtype and device codes --- */
int32_t aoti_torch_dtype_float32(void);
int32_t aoti_torch_dtype_float64(void);
int32_t aoti_torch_dtype_complex64(void);
int32_t aoti_torch_dtype_complex128(void);
int32_t aoti_torch_dtype_float16(void);
int32_t aoti_torch_dtype_bfloat16(void);
int32_t aoti_torch_dtype_int64(void);
int32_t aoti_torch_dtype_int32(void);
int32_t aoti_torch_dtype_bool(void);
int32_t aoti_torch_dtype_int16(void);
int32_t aoti_torch_dtype_int8(void);
int32_t aoti_torch_dtype_uint8(void);
int32_t aoti_torch_dtype_uint16(void);
int32_t aoti_torch_dtype_uint32(void);
int32_t aoti_torch_dtype_uint64(void);
int32_t aoti_torch_dtype_complex32(void);
int32_t aoti_torch_dtype_float8_e4m3fn(void);
int32_t aoti_torch_dtype_float8_e5m2(void);
int32_t aoti_torch_dtype_float8_e4m3fnuz(void);
int32_t aoti_torch_dtype_float8_e5m2fnuz(void);
int32_t torch_dtype_float8_e8m0fnu(void);
int32_t torch_dtype_float4_e2m1fn_x2(void);
int32_t aoti_torch_layout_strided(void);
int32_t aoti_torch_device_type_cpu(void);
int32_t aoti_torch_device_type_cuda(void);

/* --- tensors --- */
AOTITorchError aoti_torch_get_dim(AtenTensorHandle tensor, int64_t* ret_dim);
AOTITorchError aoti_torch_get_sizes(AtenTensorHandle tensor, int64_t** ret_sizes);
AOTITorchError aoti_torch_get_strides(AtenTensorHandle tensor, int64_t** ret_strides);
AOTITorchError aoti_torch_get_dtype(AtenTensorHandle tensor, int32_t* ret_dtype);
AOTITorchError aoti_torch_get_layout(AtenTensorHandle tensor, int32_t* ret_layout);
AOTITorchError aoti_torch_get_device_type(AtenTensorHandle tensor, int32_t* ret_device_type);
AOTITorchError aoti_torch_get_device_index(AtenTensorHandle tensor, int32_t* ret_device_index);
size_t aoti_torch_dtype_element_size(int32_t dtype);
AOTITorchError aoti_torch_get_data_ptr(AtenTensorHandle tensor, void** ret_data_ptr);
AOTITorchError aoti_torch_empty_strided(int64_t ndim, const int64_t* sizes_ptr,
                                        const int64_t* strides_ptr, int32_t dtype,
                                        int32_t device_type, int32_t device_index,
                                        AtenTensorHandle* ret_new_tensor);
AOTITorchError aoti_torch_copy_(AtenTensorHandle self, AtenTensorHandle src, int32_t non_blocking);
AOTITorchError aoti_torch_delete_tensor_object(AtenTensorHandle tensor);
AOTITorchError aoti_torch_new_tensor_handle(AtenTensorHandle orig_handle, AtenTensorHandle* new_handle);
AOTITorchError aoti_torch_is_defined(AtenTensorHandle tensor, bool* ret_is_defined);
bool aoti_torch_grad_mode_is_enabled(void);

/* --- CUDA (libtorch_cuda) --- */
AOTITorchError aoti_torch_create_cuda_guard(int32_t device_index, CUDAGuardHandle* ret_guard);
AOTITorchError aoti_torch_delete_cuda_guard(CUDAGuardHandle guard);
AOTITorchError aoti_torch_get_current_cuda_stream(int32_t device_index, void** ret_stream);
AOTITorchError torch_get_current_cuda_blas_handle(void** ret_handle);

#ifdef __cplusplus
}
#endif

#endif /* QR2_TORCH_ABI_H */
